"""Fault injection for the rehearsal: make one node look sick to ``node_doctor``, the way a real one does.

node_doctor reads only what a real node has (``nvidia-smi``, ``dmesg``, ``/sys/class/infiniband``, statvfs of
``/opt/sagemaker``, the mount table, the NCCL library's file name); nothing here changes node code. A fault
changes the rehearsal node's own view of those paths, in its overlay root or its mount namespace:

- every worker first gets the device tools a GPU node has (:func:`prepare`): ``/usr/bin/nvidia-smi`` replaying
  what the real one printed on an H100 host (``data/nvidia-smi-q-x.xml``, tests/data/node_tools/h100-x1,
  captured with dev/capture_node_tools.sh; one ``<gpu>`` per GPU of the type, each with its own bus id; for
  ``nvlink -s`` the format of the real 2x H200 capture, every link up), on a type with EFA ``/usr/bin/fi_info``
  listing the EFA provider over the node's EFA devices (:data:`FI_INFO`), and ``/usr/bin/dmesg`` printing the
  node's kernel log ``/var/log/kern.log`` (seeded with the real host's boot lines, ``data/dmesg.txt``):
  the rehearsal's nodes share the host's kernel, so the kernel log a node reads is its own file;
- then each ``--fault NODE:KIND`` changes that node alone (:data:`KINDS`).

The expected finding of each kind (what the doctor must name on that node) is in :data:`KINDS` too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpq.errors import UsageError
from hpq.lifecycle import catalog
from hpq.rehearsal.plan import REGION
from hpq.scripts.node_checks import GPU_MODELS, GpuModelFacts
from hpq.standins.fsx import MOUNTS_FILE
from hpq.standins.hyperpod_api import EmulatedHyperPodApi, EmulatedNode
from hpq.validation import doctor_fix
from hpq.validation.backend import ClusterFacts, run_test
from hpq.validation.request import DOCTOR, TestRequest
from hpq.validation.slurm import SlurmBackend

DATA = Path(__file__).parent / "data"
KERNEL_LOG = "/var/log/kern.log"
NCCL_DIR = "/opt/nccl/build/lib"
NCCL_VERSION, NCCL_DRIFTED = "2.26.2", "2.21.5"
# NVIDIA's driver prints Xid lines as ``NVRM: Xid (PCI:<bus>): <code>, pid=..., <text>`` (node_checks.py).
XID_LINE = "[{t:>12.6f}] NVRM: Xid (PCI:0000:00:06): {code}, pid=2374, name=python3, {text}\n"
# The text after ``pid=..., name=...,`` of each Xid fault, as the driver prints it:
# - 79 and 48: the driver's messages for a GPU off the bus and a double-bit ECC error;
# - 94 (contained ECC error): the error-containment format of NVIDIA/open-gpu-kernel-modules
#   src/nvidia/src/kernel/gpu/arch/ampere/kern_gpu_ga100.c, _gpuGenerateErrorLog, engine location:
#   "Contained: <unit> (0x<engine>). RST: No, D-RST: No" (its own example: "94, pid=7062, Contained: CE User
#   Channel (0x9). RST: No, D-RST: No");
# - 13 (graphics engine exception, an application fault): "Graphics Exception: ChID 000c, Class 0000cbc0, Offset
#   00000000, Data 00000000", the form real hosts log (e.g. "NVRM: Xid (PCI:0002:00:00): 13, pid=2519562,
#   name=python3, Graphics Exception: ChID ..." in public Xid-monitor test data).
XID_TEXTS = {
    "xid79": (79, "GPU has fallen off the bus."),
    "xid48": (48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
                  "partition 0, subpartition 0."),
    "xid94": (94, "Contained: SM (0x1). RST: No, D-RST: No"),
    "xid13": (13, "Graphics Exception: ChID 000c, Class 0000cbc0, Offset 00000000, Data 00000000"),
}


@dataclass(frozen=True)
class Kind:
    what: str
    finding: str  # the node_doctor finding kind the doctor must report on the node
    action: str  # and the action it must propose
    needs: str = ""  # "gpu", "nvlink", "efa" or "3 workers": where the fault can be shown
    severity: str = ""  # when set, the finding's severity must be this too (an informational Xid: "info")


KINDS: dict[str, Kind] = {
    "xid79": Kind("Xid 79 (GPU has fallen off the bus) in the kernel log", "xid", "reboot", "gpu"),
    "xid48": Kind("Xid 48 (double-bit ECC error) in the kernel log", "xid", "reboot", "gpu"),
    "gpu-missing": Kind("nvidia-smi cannot reach a GPU (as when one fell off the bus)", "gpu_count", "reboot", "gpu"),
    "ecc": Kind("uncorrectable ECC errors counted by nvidia-smi -q -x", "ecc_uncorrectable", "reboot", "gpu"),
    # NVIDIA's catalog (scripts/xid_catalog.py): Xid 94 ROBUST_CHANNEL_CONTAINED_ERROR and Xid 13
    # ROBUST_CHANNEL_GR_EXCEPTION are RESTART_APP: the error was contained to one application, which restarts;
    # the node needs nothing. The doctor must still name them, as information with no node action.
    "xid94": Kind("Xid 94 (contained ECC error) in the kernel log: informational, the application restarts",
                  "xid", "none", "gpu", "info"),
    "xid13": Kind("Xid 13 (graphics engine exception, an application fault) in the kernel log: informational, "
                  "the application restarts", "xid", "none", "gpu", "info"),
    "row-remap-pending": Kind("a GPU with a row remap waiting for a reset (remapped_row_pending Yes)",
                              "row_remap_pending", "reboot", "gpu"),
    "nvlink-down": Kind("one NVLink of the first GPU <inactive> in nvidia-smi nvlink -s", "nvlink_down", "reboot",
                        "nvlink"),
    "row-remap-failure": Kind("a GPU out of spare rows (remapped_row_failure Yes)", "row_remap_failure", "replace",
                              "gpu"),
    "throttle": Kind("a GPU's clocks slowed down by heat (clocks_event_reason_hw_thermal_slowdown Active)",
                     "clock_slowdown", "drain", "gpu"),
    "pcie-degraded": Kind("a GPU's PCIe link trained at x8 instead of x16 (current_link_width)", "pcie_degraded",
                          "reboot", "gpu"),
    "efa-missing": Kind("one EFA device gone from /sys/class/infiniband", "efa_count", "reboot", "efa"),
    "fi-info-fail": Kind("fi_info -p efa finds no EFA provider (libfabric's 'fi_getinfo: -61')", "efa_provider",
                         "reboot", "efa"),
    "disk-full": Kind("/opt/sagemaker (HyperPod's data volume) full", "disk_full", "drain"),
    "inodes-full": Kind("/opt/sagemaker out of inodes (space left)", "disk_full", "drain"),
    "fsx-gone": Kind("/fsx no longer mounted", "fsx_missing", "reboot"),
    "fsx-readonly": Kind("/fsx remounted read-only (as a Lustre client does on errors)", "fsx_unwritable", "drain"),
    "nccl-drift": Kind(f"NCCL {NCCL_DRIFTED} where the other workers have {NCCL_VERSION}", "drift", "replace",
                       "3 workers"),
}


def describe() -> str:
    """The kinds, one a line (``hpq rehearse --list-faults``)."""
    needs = {"nvlink": "GPUs with NVLink"}
    return "\n".join(f"{name:18} {k.what} -> {k.finding}, {k.action}" + (f" ({k.severity})" if k.severity else "")
                     + (f" (needs {needs.get(k.needs, k.needs)})" if k.needs else "") for name, k in KINDS.items())


def parse(specs: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """``NODE:KIND`` each (NODE as in the rehearsal's nodes list: worker-1, ...); one clear error otherwise."""
    out = []
    for spec in specs:
        node, sep, kind = spec.partition(":")
        if not sep or not re.fullmatch(r"worker-[1-9][0-9]*", node):
            raise UsageError(f"--fault {spec!r}: give WORKER:KIND, e.g. worker-2:xid79 (faults go on workers)")
        if kind not in KINDS:
            raise UsageError(f"--fault {spec!r}: unknown kind {kind!r}; `hpq rehearse --list-faults` lists them")
        out.append((node, kind))
    return out


# Kinds that cannot both show on one node: one hides or undoes the other (nvidia-smi failing hides every field
# it would print; an unmounted /fsx cannot be remounted read-only; two volumes over one /opt/sagemaker).
_SMI_KINDS = frozenset({"ecc", "row-remap-failure", "row-remap-pending", "throttle", "pcie-degraded", "nvlink-down"})
CONFLICTS: tuple[tuple[frozenset[str], frozenset[str]], ...] = (
    (frozenset({"gpu-missing"}), _SMI_KINDS),
    (frozenset({"fsx-gone"}), frozenset({"fsx-readonly"})),
    (frozenset({"disk-full"}), frozenset({"inodes-full"})),
)


def check_applicable(faults: list[tuple[str, str]], workers: int, worker_type: str) -> None:
    entry = catalog.lookup(worker_type)
    for node in {n for n, _ in faults}:
        kinds = {k for n, k in faults if n == node}
        for one, other in CONFLICTS:
            if kinds & one and kinds & other:
                a, b = sorted(kinds & one)[0], sorted(kinds & other)[0]
                raise UsageError(f"--fault {node}:{a} and {node}:{b}: one hides the other on a node; "
                                 "put them on different workers")
    for node, kind in faults:
        if int(node.split("-")[1]) > workers:
            raise UsageError(f"--fault {node}:{kind}: the rehearsal has {workers} worker(s)")
        needs = KINDS[kind].needs
        if needs == "gpu" and entry.accelerator != catalog.GPU:
            raise UsageError(f"--fault {node}:{kind}: {worker_type} has no NVIDIA GPU")
        if needs == "nvlink" and not (entry.accelerator == catalog.GPU and _nvlinks(entry.accelerator_model)):
            raise UsageError(f"--fault {node}:{kind}: {worker_type}'s GPUs ({entry.accelerator_model or 'none'}) "
                             "have no NVLink (pick e.g. --instance-type ml.p5.48xlarge)")
        if needs == "efa" and not entry.efa_interfaces:
            raise UsageError(f"--fault {node}:{kind}: {worker_type} has no EFA (pick --instance-type with EFA)")
        if needs == "3 workers" and workers < 3:
            raise UsageError(f"--fault {node}:{kind}: drift needs a majority to differ from: --nodes 3 or more")


def _nvlinks(model: str) -> int:
    return GPU_MODELS.get(model, GpuModelFacts(0, 0, 0)).nvlinks


def smi_xml(count: int, model: str) -> str:
    """The real capture with one ``<gpu>`` per GPU of the type (bus ids 00:06.0, 00:07.0, ...)."""
    xml = (DATA / "nvidia-smi-q-x.xml").read_text()
    start, end = xml.index("\t<gpu id="), xml.index("\t</gpu>") + len("\t</gpu>\n")
    gpu = xml[start:end]
    gpus = []
    for i in range(count):
        bus = "00000000:00:%02X.0" % (6 + i)
        gpus.append(gpu.replace("00000000:00:06.0", bus))
    body = xml[:start] + "".join(gpus) + xml[end:]
    return body.replace("<attached_gpus>1</attached_gpus>", f"<attached_gpus>{count}</attached_gpus>")


def nvlink_text(count: int, links: int) -> str:
    """``nvidia-smi nvlink -s`` in the real 2x H200 capture's form (tests/data/node_tools/h200-x2), every link up."""
    out = []
    for i in range(count):
        out.append(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-55b3778e-b97c-2806-cf17-5199d25523{i:02x})\n")
        out += [f"\t Link {n}: 26.562 GB/s\n" for n in range(links)]
    return "".join(out)


def nvlink_errors_text(count: int, links: int) -> str:
    """``nvidia-smi nvlink -e`` in the real 2x H200 capture's form (tests/data/node_tools/h200-x2), no error; a GPU
    without NVLink prints nothing (the real 1x H100 capture)."""
    out = []
    for i in range(count if links else 0):
        out.append(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-55b3778e-b97c-2806-cf17-5199d25523{i:02x})\n")
        for n in range(links):
            out += [f"\t Link {n}: {what} Errors: 0\n" for what in ("Replay", "Recovery", "CRC")]
            out.append("\n")
    return "".join(out)


NVIDIA_SMI = r"""#!/bin/sh
# nvidia-smi stand-in (hpq rehearse): what the real one printed on an H100 host, per GPU of this node's type.
if [ -e /etc/hpq-rehearse/nvidia-smi.fail ]; then
    cat /etc/hpq-rehearse/nvidia-smi.fail >&2
    exit 15
fi
case "$1 $2" in
    "-q -x") cat /etc/hpq-rehearse/nvidia-smi-q-x.xml ;;
    "nvlink -s") cat /etc/hpq-rehearse/nvidia-smi-nvlink-s.txt ;;
    "nvlink -e") cat /etc/hpq-rehearse/nvidia-smi-nvlink-e.txt ;;
    *) echo "nvidia-smi (hpq rehearse stand-in): only -q -x, nvlink -s and nvlink -e are replayed" >&2; exit 2 ;;
esac
"""
# fi_info stand-in: one entry per EFA device the node shows (fi_info enumerates the devices the kernel driver
# exposes), in the format of AWS's EFA guide, "Get started with EFA and NCCL" step "fi_info -p efa -t FI_EP_RDM"
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html: "provider: efa / fabric / domain:
# <dev>-rdm / version / type: FI_EP_RDM / protocol: FI_PROTO_EFA"); with no provider libfabric's util/info.c
# prints "fi_getinfo: -61 (No data available)" and exits 1. ``--version`` in fi_info's three-line form
# ("fi_info: V", "libfabric: V", "libfabric api: A"); V is the stand-in's own, the same on every node.
FI_INFO = r"""#!/bin/sh
# fi_info stand-in (hpq rehearse): the EFA provider over this node's EFA devices.
if [ "$1" = "--version" ]; then
    printf 'fi_info: 1.22.0amzn4.0\nlibfabric: 1.22.0amzn4.0\nlibfabric api: 1.22\n'
    exit 0
fi
n=0
if [ ! -e /etc/hpq-rehearse/fi_info.fail ]; then
    for d in /sys/class/infiniband/*; do
        [ "$(basename "$(readlink -f "$d/device/driver")")" = efa ] || continue
        dev=${d##*/}
        printf 'provider: efa\n    fabric: efa\n    domain: %s-rdm\n    version: 122.0\n' "$dev"
        printf '    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n'
        n=$((n + 1))
    done
fi
if [ "$n" = 0 ]; then
    echo "fi_getinfo: -61 (No data available)" >&2
    exit 1
fi
"""
DMESG = f"""#!/bin/sh
# dmesg stand-in (hpq rehearse): the node's kernel log (the rehearsal's nodes share the host's kernel).
exec cat {KERNEL_LOG}
"""


def prepare(node: Any, worker_type: str) -> None:
    """The device tools a worker of ``worker_type`` has, healthy (every worker, faulty or not)."""
    entry = catalog.lookup(worker_type)
    node.write(KERNEL_LOG, (DATA / "dmesg.txt").read_text(), 0o644)
    node.write("/usr/bin/dmesg", DMESG, 0o755)
    if entry.accelerator == catalog.GPU:
        links = _nvlinks(entry.accelerator_model)
        node.write(SMI_XML, smi_xml(entry.accelerator_count, entry.accelerator_model))
        node.write(NVLINK_TXT, nvlink_text(entry.accelerator_count, links))
        node.write(NVLINK_ERRORS_TXT, nvlink_errors_text(entry.accelerator_count, links))
        node.write("/usr/bin/nvidia-smi", NVIDIA_SMI, 0o755)
    if entry.has_efa:
        node.write("/usr/bin/fi_info", FI_INFO, 0o755)


def prepare_drift(node: Any, version: str) -> None:
    """The NCCL library as the DLAMI installs it (its file name carries the version node_doctor reads)."""
    node.sh(f"mkdir -p {NCCL_DIR} && rm -f {NCCL_DIR}/libnccl.so.2.* && : > {NCCL_DIR}/libnccl.so.{version}")


SMI_XML = "/etc/hpq-rehearse/nvidia-smi-q-x.xml"  # what the stand-in nvidia-smi prints for -q -x
NVLINK_TXT = "/etc/hpq-rehearse/nvidia-smi-nvlink-s.txt"  # and for nvlink -s
NVLINK_ERRORS_TXT = "/etc/hpq-rehearse/nvidia-smi-nvlink-e.txt"  # and for nvlink -e
# A link that is down: nvidia-smi prints ``Link <n>: <inactive>`` in place of its speed (NVIDIA's nvidia-smi
# nvlink --status, as public captures show it, e.g. "\t Link 1: <inactive>" beside "\t Link 0: 26.562 GB/s").
NVLINK_DOWN_SED = r"0,/^\(\s*Link 1:\) .*GB\/s$/s//\1 <inactive>/"
# fault kind -> (nvidia-smi -q -x element, its healthy text, the text the fault shows)
SMI_EDITS = {
    "ecc": ("dram_uncorrectable", "0", "4"),
    "row-remap-failure": ("remapped_row_failure", "No", "Yes"),
    "row-remap-pending": ("remapped_row_pending", "No", "Yes"),
    "throttle": ("clocks_event_reason_hw_thermal_slowdown", "Not Active", "Active"),
    "pcie-degraded": ("current_link_width", "16x", "8x"),
}


def inject(node: Any, kind: str) -> None:
    """Make ``node`` show ``kind`` to node_doctor."""
    if kind in XID_TEXTS:
        code, text = XID_TEXTS[kind]
        node.sh(f'printf "%s" "$1" >> {KERNEL_LOG}', XID_LINE.format(t=4242.5, code=code, text=text))
    elif kind == "gpu-missing":
        node.write("/etc/hpq-rehearse/nvidia-smi.fail",
                   "Unable to determine the device handle for GPU0000:00:06.0: Unknown Error\n")
    elif kind in SMI_EDITS:
        tag, healthy, broken = SMI_EDITS[kind]
        # the first GPU's field in the stand-in's nvidia-smi -q -x answer, changed as the fault shows it
        node.sh(f"sed -i '0,/<{tag}>{healthy}</s//<{tag}>{broken}</' {SMI_XML}")
    elif kind == "nvlink-down":
        node.sh(f"sed -i '{NVLINK_DOWN_SED}' {NVLINK_TXT}")  # the first GPU's Link 1
    elif kind == "fi-info-fail":
        node.write("/etc/hpq-rehearse/fi_info.fail", "")
    elif kind == "efa-missing":
        node.sh("mount -o remount,rw /sys/class && rm -rf /sys/class/infiniband/rdmap0s0 && "
                "mount -o remount,ro /sys/class")
    elif kind == "disk-full":
        # A small volume of its own at /opt/sagemaker, filled: statvfs says what a full EBS volume says.
        node.sh("mount -t tmpfs -o size=1m hpq-full /opt/sagemaker && "
                "(dd if=/dev/zero of=/opt/sagemaker/fill bs=64k 2>/dev/null || true)")
    elif kind == "inodes-full":
        # A small volume of its own at /opt/sagemaker with 16 inodes, each used by an empty file: statvfs says
        # what a volume out of inodes says (f_favail 0) while space is left, as ``df -i`` shows it.
        node.sh("mount -t tmpfs -o size=1m,nr_inodes=16 hpq-inodes /opt/sagemaker && "
                "i=0; while [ $i -lt 64 ] && touch /opt/sagemaker/f$i 2>/dev/null; do i=$((i + 1)); done")
    elif kind == "fsx-readonly":
        # The node's own /fsx mount made read-only (a bind remount changes this mount alone, not the shared
        # file system the other nodes mount): writes fail with EROFS, as on a Lustre client remounted ro.
        node.sh("mount -o remount,bind,ro /fsx")
    elif kind == "fsx-gone":
        node.sh(f"umount -l /fsx; awk '$2 != \"/fsx\"' {MOUNTS_FILE} > {MOUNTS_FILE}.tmp && "
                f"mv {MOUNTS_FILE}.tmp {MOUNTS_FILE}")
    elif kind == "nccl-drift":
        prepare_drift(node, NCCL_DRIFTED)
    else:
        raise UsageError(f"unknown fault kind {kind!r}")


def clear(node: Any, kind: str, worker_type: str) -> None:
    """What a reboot (or a replacement) does to the fault: gone, the node as prepared."""
    if kind in ("disk-full", "inodes-full"):
        node.sh("umount /opt/sagemaker || true")
    elif kind == "fsx-readonly":
        node.sh("mount -o remount,bind,rw /fsx")
    elif kind == "fsx-gone":
        return  # a reboot runs the lifecycle's mount again: not emulated here
    node.sh("rm -f /etc/hpq-rehearse/nvidia-smi.fail /etc/hpq-rehearse/fi_info.fail")
    prepare(node, worker_type)
    if kind == "nccl-drift":
        prepare_drift(node, NCCL_VERSION)


def expected(faults: list[tuple[str, str]]) -> list[dict[str, str]]:
    out = []
    for node, kind in faults:
        k = KINDS[kind]
        out.append({"node": node, "kind": k.finding, "action": k.action, "fault": kind,
                    **({"severity": k.severity} if k.severity else {})})
    return out


def missed(faults: list[tuple[str, str]], findings: list[dict[str, Any]]) -> list[str]:
    """Each injected fault the doctor did not name on its node with its action (and severity, where the kind
    fixes one: an application-level Xid must be information with action none, not a node fault)."""
    out = []
    for want in expected(faults):
        if not any(f.get("node") == want["node"] and f.get("kind") == want["kind"]
                   and f.get("action") == want["action"]
                   and ("severity" not in want or f.get("severity") == want["severity"]) for f in findings):
            extra = f", {want['severity']}" if "severity" in want else ""
            out.append(f"{want['node']}:{want['fault']} ({want['kind']}, {want['action']}{extra})")
    return out


@dataclass
class EnvShell:
    """The controller's shell with the environment the rehearsal's nodes need for the node commands: the
    mount table as the nodes record it (HPQ_PROC_MOUNTS, as the lifecycle reads it: rehearsal/fsx.py)."""

    remote: Any
    env: dict[str, str]

    def run(self, command: str, echo: Any = None, timeout: float | None = None,
            on_stderr_line: Any = None) -> tuple[int, str, str]:
        prefix = "env " + " ".join(f"{k}={v}" for k, v in sorted(self.env.items())) + " "
        return self.remote.run(prefix + command, echo, timeout, on_stderr_line=on_stderr_line)


def emulated_api(plan: Any, cluster_arn: str, nodes: dict[str, Any], faults: list[tuple[str, str]],
                 settle_s: float = 2.0) -> Any:
    """The HyperPod node API for this rehearsal's nodes; a reboot or replacement clears that node's faults."""
    by_host = {n.hostname: n for n in plan.nodes}

    def heal(en: Any) -> None:
        spec = by_host.get(en.hostname.split(".")[0])
        if spec is not None:
            for node_name, kind in faults:
                if node_name == spec.name:
                    clear(nodes[spec.name], kind, spec.instance_type)

    emulated = [EmulatedNode(n.instance_id, n.group, n.instance_type, f"{n.hostname}.{REGION}.compute.internal",
                             n.ip) for n in plan.nodes]
    return EmulatedHyperPodApi(plan.cluster_name, cluster_arn, emulated, settle_s, on_reboot=heal, on_replace=heal)


# The kinds whose finding node_checks rates critical: the only ones the Slurm prolog drains a node for (a warning
# or an informational finding never keeps a job off a node: scripts/node_prolog.py). Drift needs the other nodes
# to compare with, which a prolog on one node does not have.
PROLOG_DRAINS = frozenset({"xid79", "xid48", "gpu-missing", "ecc", "row-remap-failure", "nvlink-down", "efa-missing",
                           "fi-info-fail", "disk-full", "inodes-full", "fsx-gone", "fsx-readonly"})


def prepare_workers(plan: Any, nodes: dict[str, Any]) -> None:
    """Every worker's healthy device tools (its GPUs' nvidia-smi, dmesg, fi_info), as its type has them."""
    for spec in plan.worker_nodes:
        prepare(nodes[spec.name], spec.instance_type)


def inject_all(plan: Any, nodes: dict[str, Any], faults: list[tuple[str, str]], say: Any, who: str = "doctor") -> None:
    """Every worker's healthy device tools, then each fault on its worker."""
    prepare_workers(plan, nodes)
    if any(kind == "nccl-drift" for _, kind in faults):
        for spec in plan.worker_nodes:
            prepare_drift(nodes[spec.name], NCCL_VERSION)
    for name, kind in faults:
        inject(nodes[name], kind)
        say(who, f"fault injected on {name}: {kind} ({KINDS[kind].what})")


def doctor_stage(plan: Any, nodes: dict[str, Any], remote: Any, faults: list[tuple[str, str]], cluster_arn: str,
                 say: Any, timeout_s: int = 900) -> dict[str, Any]:
    """Prepare every worker, inject the faults, run `hpq doctor`'s checks through the validation interface (the
    Slurm backend over SSH to the controller) and HyperPod's view from the emulated API; the ``doctor`` object
    of the rehearsal's result. ``missed`` lists each injected fault the doctor did not name."""
    inject_all(plan, nodes, faults, say)
    backend = SlurmBackend(EnvShell(remote, {"HPQ_PROC_MOUNTS": MOUNTS_FILE}),
                           ClusterFacts(plan.cluster_name, "slurm", plan.worker_type), name="rehearsal")
    result = run_test(backend, TestRequest(DOCTOR, timeout_s=timeout_s), lambda line: say("doctor", line))
    api = emulated_api(plan, cluster_arn, nodes, faults)
    view = doctor_fix.hyperpod_view(api, plan.cluster_name)
    by_host = {n.hostname: n.name for n in plan.nodes}
    findings = [{**f, "host": f["node"], "node": by_host.get(f["node"], f["node"])}
                for f in result.data.get("findings", [])]
    events = doctor_fix.cluster_events(api, plan.cluster_name)  # HyperPod's recent events, beside the findings
    steps = doctor_fix.plan(result.data.get("nodes", []), view, plan.cluster_name)
    return {"outcome": result.outcome, "exit_code": result.exit_code, "message": result.message,
            "findings": findings, "injected": expected(faults), "missed": missed(faults, findings),
            "nodes": [{**n, "host": n["node"], "node": by_host.get(n["node"], n["node"])}
                      for n in result.data.get("nodes", [])],
            "hyperpod": {by_host.get(k, k): v.__dict__ for k, v in view.items()},
            "events": events, "plan": [s.to_dict() for s in steps], "seconds": result.data.get("seconds")}
