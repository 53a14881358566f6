"""Run the node checks on this node and print one report: ``python3 -m hpq.scripts.node_doctor``.

The laptop's ``hpq doctor`` runs this on every node at once (srun on Slurm, a pod per node on EKS) and
joins the reports; drift between nodes is judged there, from each report's ``fingerprint``.

Every tool runs under a time bound, so one hung tool (nvidia-smi on a GPU that fell off the bus, a write
to a hung Lustre mount) costs its bound, not the whole doctor. A check whose tool could not be read is
named in ``unchecked``: such a node is INCONCLUSIVE, never PASS.

Exit codes: 0 PASS, 1 FAIL (a critical finding), 2 bad arguments, 3 INCONCLUSIVE.
Standard library only: it runs on cluster nodes with the system python3.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

from hpq.lifecycle import catalog, names
from hpq.scripts import dcgm_checks, neuron_checks, node_checks, nodeinfo, result_metrics

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3
TOOL_TIMEOUT_S = 30.0
FSX_WRITE_TIMEOUT_S = 10.0
# EFA error counters are cumulative since boot; only a rise while we watch says the link is sick now.
EFA_WINDOW_S = 5.0
# dcgmi diag -r 1 (Deployment checks) takes seconds; its bound stays well inside run-node-doctor's per-node one.
DCGM_TIMEOUT_S = 90.0
DAEMONS = ("slurmd", "kubelet")
# Where NCCL's library is found on HyperPod's DLAMI-based images and in CUDA installs.
NCCL_GLOBS = ("/opt/nccl/build/lib/libnccl.so.2.*", "/usr/local/cuda*/lib*/libnccl.so.2.*",
              "/usr/lib/x86_64-linux-gnu/libnccl.so.2.*", "/usr/lib64/libnccl.so.2.*")
OFI_NCCL_GLOBS = ("/opt/amazon/ofi-nccl/lib*/libnccl-net*.so*", "/opt/aws-ofi-nccl/lib*/libnccl-net*.so*")
EFA_PACKAGES = "/opt/amazon/efa_installed_packages"


def run_tool(argv: List[str], timeout: Optional[float] = None) -> Tuple[Optional[int], str, str]:
    """(exit code or None when absent/timed out, stdout, stderr), output capped at the parsers' bound.

    ``timeout`` None: TOOL_TIMEOUT_S, read at call time."""
    timeout = TOOL_TIMEOUT_S if timeout is None else timeout
    if shutil.which(argv[0]) is None:
        return None, "", "%s: not found" % argv[0]
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              universal_newlines=True, errors="replace")
    except subprocess.TimeoutExpired:
        return None, "", "%s: no answer in %.0f s" % (argv[0], timeout)
    except OSError as exc:
        return None, "", "%s: %s" % (argv[0], exc)
    cap = node_checks.MAX_TOOL_OUTPUT_BYTES
    return done.returncode, done.stdout[:cap], done.stderr[:cap]


def kernel_log() -> Tuple[Optional[str], str]:
    """The kernel ring buffer (dmesg), else the kernel journal; None with the reason when neither reads."""
    rc, out, err = run_tool(["dmesg"])
    if rc == 0:
        return out, "dmesg"
    rc2, out2, err2 = run_tool(["journalctl", "-k", "--no-pager", "-n", "100000"])
    if rc2 == 0:
        return out2, "journalctl -k"
    return None, (err or err2).strip().splitlines()[0] if (err or err2).strip() else "no kernel log"


def fsx_writable(path: str) -> Optional[bool]:
    """Write and remove a small file in a child process, so a hung Lustre mount cannot hang the doctor.

    The file goes in the lifecycle's shared results directory (mode 1777: lifecycle/fsx.shared_results_dir)
    when it exists, since a new Lustre root is root:root 0755 and the checks run as the default user.
    None: this user may not write there (says nothing about the mount) or the child could not start."""
    results = os.path.join(path, os.path.basename(names.FSX_RESULTS_DIR))
    where = results if os.path.isdir(results) else path
    code = ("import os,sys\np=os.path.join(sys.argv[1],'.hpq-doctor-%d'%os.getpid())\n"
            "try:\n    f=open(p,'w')\nexcept PermissionError:\n    sys.exit(3)\n"
            "with f: f.write('ok')\nos.remove(p)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code, where], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=FSX_WRITE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False
    except OSError:
        return None
    return None if done.returncode == 3 else done.returncode == 0


def _first_version(patterns, regex: str) -> Optional[str]:
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            match = re.search(regex, os.path.basename(os.path.realpath(path)))
            if match:
                return match.group(1)
    return None


def fingerprint(smi: Optional[node_checks.SmiReport], fi_info_version: str, gpu_node: bool = False) -> Dict[str, str]:
    """The software this node runs, for drift across nodes: absent pieces are left out, not guessed; on a GPU
    node whose nvidia-smi did not answer the driver and CUDA are ``node_checks.UNKNOWN`` (not read, so not drift: the
    gpu_count finding already names that node)."""
    fp = {"kernel": os.uname().release}
    if smi is not None:
        fp["nvidia_driver"], fp["cuda"] = smi.driver_version, smi.cuda_version
    elif gpu_node:
        fp["nvidia_driver"] = fp["cuda"] = node_checks.UNKNOWN
    try:
        with open(EFA_PACKAGES) as fh:
            match = re.search(r"EFA installer version:\s*(\S+)", fh.read(4096))
        if match:
            fp["efa_installer"] = match.group(1)
    except OSError:
        pass
    match = re.search(r"^libfabric:\s*(\S+)", fi_info_version, re.MULTILINE)
    if match:
        fp["libfabric"] = match.group(1)
    nccl = _first_version(NCCL_GLOBS, r"libnccl\.so\.(2\.\d+\.\d+)")
    if nccl:
        fp["nccl"] = nccl
    ofi = _first_version(OFI_NCCL_GLOBS, r"\.so\.(\d+\.\d+\.\d+)")
    if ofi:
        fp["aws_ofi_nccl"] = ofi
    return {k: v for k, v in fp.items() if v}


def daemon_findings(daemons=DAEMONS) -> List[node_checks.Finding]:
    """A node daemon whose unit is loaded (installed, not masked) but not active.

    ``systemctl is-active`` says "inactive" for a unit that does not exist, so the unit's LoadState decides
    first: not-found (an EKS node's slurmd) and masked (slurmd on hpq's Slurm controller) are not checked.
    """
    findings = []
    for name in daemons:
        rc, out, _ = run_tool(["systemctl", "show", "-p", "LoadState,ActiveState", name], timeout=10)
        if rc != 0:
            continue
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        if props.get("LoadState") == "loaded" and props.get("ActiveState") != "active":
            findings.append(node_checks.Finding("daemon_down", node_checks.SEVERITY_CRITICAL,
                                       "%s is %s" % (name, props.get("ActiveState", "?")), node_checks.ACTION_REBOOT))
    return findings


def neuron_ls() -> Tuple[Optional[List[neuron_checks.NeuronDevice]], str]:
    """The Neuron devices from ``neuron-ls``: the JSON flag of Neuron before 2.34, else the one after it.

    (devices, "") on an answer; (None, reason) when neuron-ls is absent ("not found") or fails."""
    reasons = []
    for flags in (["--json-output"], ["--output-format", "json"]):
        rc, out, err = run_tool(["neuron-ls"] + flags)
        if rc is None and "not found" in err:
            return None, "neuron-ls not found"
        if rc == 0:
            try:
                return neuron_checks.parse_neuron_ls(out), ""
            except ValueError as exc:
                reasons.append(str(exc))
                continue
        reasons.append((err.strip().splitlines() or ["neuron-ls %s: exit %s" % (" ".join(flags), rc)])[0])
    return None, "; ".join(reasons)


def neuron_findings(entry: catalog.InstanceType) -> Tuple[List[node_checks.Finding], List[str]]:
    """Trainium: the Neuron devices against the type's count, and Neuron hardware errors in the kernel log."""
    findings: List[node_checks.Finding] = []
    unchecked: List[str] = []
    devices, why = neuron_ls()
    if devices is not None:
        findings += neuron_checks.judge_neuron(devices, entry.accelerator_count)
    elif why == "neuron-ls not found":
        unchecked.append("neuron: neuron-ls not found")
    else:
        # neuron-ls present and failing: the driver sees no device it can use, as nvidia-smi failing does.
        found = neuron_checks.judge_neuron(None, entry.accelerator_count)
        found[0].evidence += " (%s)" % why[:300]
        findings += found
    log, source = kernel_log()
    if log is None:
        unchecked.append("neuron errors: %s" % source)
    else:
        findings += neuron_checks.judge_neuron_log(log)
    return findings, unchecked


def dcgm_findings(node: str) -> Tuple[List[node_checks.Finding], List[str]]:
    """``dcgmi diag -r 1 -j``, bounded; a node without dcgmi is named, INCONCLUSIVE for this check."""
    rc, out, err = run_tool(["dcgmi", "diag", "-r", "1", "-j"], timeout=DCGM_TIMEOUT_S)
    if rc is None and "not found" in err:
        return [], ["dcgm: dcgmi not installed on %s" % node]
    if rc is None:
        return [], ["dcgm: %s" % err.strip()]
    try:
        # dcgmi exits non-zero when a test fails: its JSON still says which.
        return dcgm_checks.judge_diag(out), []
    except ValueError as exc:
        first = (err.strip().splitlines() or [str(exc)])[0]
        return [], ["dcgm: dcgmi diag -r 1 exit %d: %s" % (rc, first[:300])]


def examine(entry: catalog.InstanceType, fsx: Optional[str], efa_window: float = EFA_WINDOW_S,
            sys_infiniband: str = "/sys/class/infiniband", proc_mounts: str = "/proc/mounts",
            disks=("/", "/opt/sagemaker"), with_dcgm: bool = False) -> Dict[str, object]:
    """Every check on this node: findings, what could not be checked, and the software fingerprint."""
    started = time.monotonic()
    findings: List[node_checks.Finding] = []
    unchecked: List[str] = []
    smi: Optional[node_checks.SmiReport] = None
    efa_before = node_checks.read_efa_counters(sys_infiniband)
    if entry.accelerator == catalog.GPU:
        rc, out, err = run_tool(["nvidia-smi", "-q", "-x"])
        if rc == 0:
            try:
                smi = node_checks.parse_smi_xml(out)
            except ValueError as exc:
                unchecked.append("gpus: %s" % exc)
        elif "not found" in err:
            unchecked.append("gpus: nvidia-smi not found")
        else:
            # nvidia-smi failing or hanging is itself the finding: a GPU off the bus does both.
            findings += node_checks.judge_gpus(None, entry.accelerator_count, entry.accelerator_model)
        if smi is not None:
            links = None
            if node_checks.GPU_MODELS.get(entry.accelerator_model, node_checks.GpuModelFacts(0, 0, 0)).nvlinks:
                rc_l, out_l, _ = run_tool(["nvidia-smi", "nvlink", "-s"])
                if rc_l == 0:
                    links = node_checks.parse_nvlink_status(out_l)
                else:
                    unchecked.append("nvlink: nvidia-smi nvlink -s did not answer")
            findings += node_checks.judge_gpus(smi, entry.accelerator_count, entry.accelerator_model, links)
        log, source = kernel_log()
        if log is None:
            unchecked.append("xid: %s" % source)
        else:
            findings += node_checks.judge_xids(node_checks.parse_xids(log))
        if with_dcgm:
            found, why = dcgm_findings(os.environ.get("SLURMD_NODENAME") or os.uname().nodename)
            findings += found
            unchecked += why
    elif entry.accelerator == catalog.TRAINIUM:
        found, why = neuron_findings(entry)
        findings += found
        unchecked += why
    fi_version = ""
    if entry.has_efa:
        rc, out, err = run_tool(["fi_info", "-p", "efa"])
        provider_ok = None if rc is None else (rc == 0 and "provider: efa" in out)
        if rc is None:
            unchecked.append("efa provider: %s" % (err.strip() or "fi_info did not answer"))
        fi_version = run_tool(["fi_info", "--version"])[1]
        if efa_window > 0:
            time.sleep(efa_window)
        findings += node_checks.judge_efa(node_checks.efa_devices(sys_infiniband), entry.efa_interfaces, efa_before,
                                 node_checks.read_efa_counters(sys_infiniband), provider_ok)
    for path in disks:
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        findings += node_checks.judge_disk(path, st.f_blocks, st.f_bavail, st.f_files, st.f_favail)
    if fsx:
        try:
            with open(proc_mounts) as fh:
                mounts = fh.read(node_checks.MAX_TOOL_OUTPUT_BYTES)
        except OSError as exc:
            mounts = ""
            unchecked.append("fsx: %s" % exc)
        writable = fsx_writable(fsx) if os.path.isdir(fsx) else None
        found = node_checks.judge_mounts(mounts, fsx, writable)
        if writable is None and not found and os.path.isdir(fsx):
            unchecked.append("fsx: no permission to write a test file under %s" % fsx)
        findings += found
    findings += daemon_findings()
    verdict = node_checks.worst(findings)
    if verdict == "PASS" and unchecked:
        verdict = "INCONCLUSIVE"
    # The node as Slurm names it when srun started us (its NodeName), else the host name.
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    return {"node": node, "instance_type": entry.name, "verdict": verdict, "findings": [f.to_dict() for f in findings],
            "unchecked": unchecked, "fingerprint": fingerprint(smi, fi_version, entry.accelerator == catalog.GPU),
            "seconds": round(time.monotonic() - started, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m hpq.scripts.node_doctor",
                                 description="Check this node's GPUs, EFA, disks and /fsx; print findings.")
    ap.add_argument("--instance-type", default=None, help="default: from the node's info file or IMDS")
    ap.add_argument("--fsx", default=None,
                    help="shared file system to check ('' for none; default: where the lifecycle mounted FSx, "
                         "none where it mounted none)")
    ap.add_argument("--efa-window", type=float, default=EFA_WINDOW_S,
                    help="seconds to watch the EFA error counters (default %(default)s)")
    ap.add_argument("--dcgm", action="store_true",
                    help="also run dcgmi diag -r 1 on GPU nodes (bounded to %d s; needs DCGM)" % DCGM_TIMEOUT_S)
    ap.add_argument("--output", choices=("json", "text"), default="text")
    args = ap.parse_args(argv)
    if not (0 <= args.efa_window <= 300):
        ap.error("--efa-window must be between 0 and 300 seconds")
    itype = nodeinfo.resolve_instance_type(args.instance_type)
    if not itype:
        ap.error("cannot tell this node's instance type: pass --instance-type")
    try:
        entry = catalog.lookup(itype)
    except catalog.UnknownInstanceType as exc:
        ap.error(str(exc))
    # /fsx where the lifecycle mounted it, in the mount table it read (HPQ_PROC_MOUNTS, the setting the lifecycle
    # reads too, for a node whose kernel table is not the one its mounts are recorded in): nodeinfo.fsx_to_check.
    fsx, mounts = nodeinfo.fsx_to_check(args.fsx)
    report = examine(entry, fsx, args.efa_window, proc_mounts=mounts, with_dcgm=args.dcgm)
    # This node's textfile directory when observability is on (run-node-doctor runs this on every node);
    # a failure there is a stderr note only, the report and exit code are unchanged.
    result_metrics.publish(report, "node_doctor")
    if args.output == "json":
        print(json.dumps(report, sort_keys=True))
    else:
        print("%s: %s on %s (%d finding(s), %.1f s)" % (report["verdict"], os.uname().nodename,
                                                        report["instance_type"], len(report["findings"]),
                                                        report["seconds"]))
        for f in report["findings"]:
            print("  %-8s %-18s %-8s %s" % (f["severity"], f["kind"], f["action"], f["evidence"]))
        for item in report["unchecked"]:
            print("  unchecked: %s" % item)
    return {"PASS": EXIT_PASS, "FAIL": EXIT_FAIL}.get(report["verdict"], EXIT_INCONCLUSIVE)


if __name__ == "__main__":
    sys.exit(main())
