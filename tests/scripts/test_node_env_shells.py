"""No transport setting crosses from a CPU node into a GPU job (issue 19).

HyperPod users submit from the controller or a login node, and ``sbatch``/``srun`` carry the
submitter's environment into the job (``--export=ALL``, Slurm's default, srun(1)/sbatch(1)). AWS's
lifecycle (awsome-distributed-ai ``1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config``)
therefore exports no NCCL/FI variable on any node (its only node-wide NCCL settings are an opt-in
Slurm TaskProlog's, ``start_slurm.sh``, which runs on the compute node), and its job scripts set them
(``micro-benchmarks/nccl-tests/slurm/nccl-tests-container.sbatch``). So:

- the lifecycle's ``nccl-env`` step on a controller or login node writes no NCCL_*/FI_*/GLOO_* where
  shells or Slurm read it, and removes what an earlier hpq wrote there (its block, its file, nothing
  else); accelerated workers keep theirs (unchanged);
- every hpq launch removes inherited transport variables the worker does not set: checked with real
  Slurm (tests/slurm_cluster.py), where a submitter's ``NCCL_NET_PLUGIN=none`` must not reach a rank,
  and on its broken twin (tests/faults: the launcher merging as before), where the job's own
  environment check must name it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpq.lifecycle import files, identity, node_env
from tests.faults import FAULTS_DIR
from tests.slurm_cluster import WORKER_GROUP, make_context

# Where login shells, PAM and Slurm (daemons, units, prologs) pick up variables on a node.
SHELL_AND_SLURM_PLACES = (
    "etc/environment", "etc/profile", "etc/profile.d/*", "etc/bash.bashrc", "etc/bashrc", "etc/zsh/*",
    "root/.bashrc", "root/.profile", "root/.bash_profile", "home/*/.bashrc", "home/*/.profile",
    "home/*/.bash_profile", "etc/default/*", "etc/sysconfig/*", "etc/security/pam_env.conf",
    "opt/slurm/etc/**/*", "etc/slurm/**/*", "etc/systemd/system/**/*", "usr/lib/systemd/system/**/*",
    "lib/systemd/system/**/*",
)
TRANSPORT_ASSIGNMENT = re.compile(r"(?:^|[\s;'\"=])(?:export\s+)?((?:NCCL|FI|GLOO)_[A-Z0-9_]*)=", re.M)


def transport_assignments(root: Path) -> dict[str, list[str]]:
    """{file: [variables assigned]} for every place a shell or Slurm reads under ``root``."""
    found: dict[str, list[str]] = {}
    for pattern in SHELL_AND_SLURM_PLACES:
        for path in sorted(root.glob(pattern)):
            if path.is_file():
                names = TRANSPORT_ASSIGNMENT.findall(path.read_text(errors="replace"))
                if names:
                    found[str(path.relative_to(root))] = sorted(set(names))
    return found


# What hpq before issue 19 wrote on a controller (ml.m5.xlarge, default route on ens5), byte for byte.
EARLIER_PROFILE = """# Written by the hpq lifecycle for ml.m5.xlarge (transport tcp, torch backend gloo); replaced on every run.
export GLOO_SOCKET_IFNAME=ens5
export HPQ_TORCH_BACKEND=gloo
export HPQ_TRANSPORT=tcp
export NCCL_NET_PLUGIN=none
export NCCL_SOCKET_IFNAME=ens5
"""
USER_ENVIRONMENT = 'PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"\nLANG=C.UTF-8\n'
EARLIER_ENVIRONMENT = USER_ENVIRONMENT + """
# BEGIN hpq managed: nccl (do not edit; replaced on every lifecycle run)
GLOO_SOCKET_IFNAME=ens5
HPQ_TORCH_BACKEND=gloo
HPQ_TRANSPORT=tcp
NCCL_NET_PLUGIN=none
NCCL_SOCKET_IFNAME=ens5
# END hpq managed: nccl
"""


def node(tmp_path: Path, role: str, instance_type: str, leftovers: bool = True):
    root = tmp_path / "node"
    ctx = make_context(root)
    ctx.node = identity.NodeInfo("c", "i-1", "n", WORKER_GROUP, role, "10.0.0.2", instance_type,
                                 controller_ips=["10.0.0.1"])
    (root / "proc/net").mkdir(parents=True)
    (root / "proc/net/route").write_text("Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\t"
                                         "Window\tIRTT\nens5\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
    (root / "etc/profile.d").mkdir(parents=True)
    (root / "etc/environment").write_text(EARLIER_ENVIRONMENT if leftovers else USER_ENVIRONMENT)
    if leftovers:
        (root / "etc/profile.d/hpq-nccl.sh").write_text(EARLIER_PROFILE)
    return ctx, root


@pytest.mark.parametrize("role", ["controller", "login"])
def test_cpu_submit_nodes_export_nothing_and_remove_what_hpq_wrote_before(tmp_path, role):
    ctx, root = node(tmp_path, role, "ml.m5.xlarge")
    assert transport_assignments(root)  # the scanner sees an earlier hpq's leftovers
    detail = node_env.run(ctx)
    assert "none exported to shells or jobs" in detail, detail
    assert transport_assignments(root) == {}
    assert (root / "etc/environment").read_text() == USER_ENVIRONMENT  # the user's lines, exactly
    assert not (root / "etc/profile.d/hpq-nccl.sh").exists()
    doc = json.loads((root / "etc/hpq/nccl-env.json").read_text())  # hpq's own file, which no shell reads
    assert doc["exported_to_shells"] is False and doc["variables"]["NCCL_NET_PLUGIN"] == "none"
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}
    assert "files unchanged" in node_env.run(ctx)  # a re-run changes nothing
    assert before == {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_gpu_login_node_exports_nothing_either(tmp_path):
    """Jobs are submitted from a login node whatever its type: a g5 login node writes nothing for shells."""
    ctx, root = node(tmp_path, "login", "ml.g5.48xlarge", leftovers=False)
    node_env.run(ctx)
    assert transport_assignments(root) == {} and not (root / "etc/profile.d/hpq-nccl.sh").exists()


@pytest.mark.parametrize("itype,variable", [("ml.g5.16xlarge", "NCCL_NET_PLUGIN"), ("ml.trn1.32xlarge", "FI_PROVIDER")])
def test_accelerated_worker_keeps_its_environment(tmp_path, itype, variable):
    """Broken twin of the controller test (same files, a worker): the worker's own values are written as before
    (profile.d and the /etc/environment block), so the scanner above finds them."""
    ctx, root = node(tmp_path, "worker", itype)
    if variable == "FI_PROVIDER":
        (root / "sys/class/infiniband/rdmap0s6").mkdir(parents=True)
    node_env.run(ctx)
    found = transport_assignments(root)
    assert variable in found["etc/environment"] and variable in found["etc/profile.d/hpq-nccl.sh"]
    assert (root / "etc/environment").read_text().startswith(USER_ENVIRONMENT)
    assert json.loads((root / "etc/hpq/nccl-env.json").read_text())["exported_to_shells"] is True


def test_cleanup_touches_only_what_hpq_wrote(tmp_path):
    """A profile.d file of that name that hpq did not write stays (with a warning); an /etc/environment without
    hpq's block is not rewritten at all (trailing blank lines kept)."""
    ctx, root = node(tmp_path, "controller", "ml.m5.xlarge", leftovers=False)
    theirs = "export NCCL_DEBUG=INFO  # the admin's own\n"
    (root / "etc/profile.d/hpq-nccl.sh").write_text(theirs)
    (root / "etc/environment").write_text(USER_ENVIRONMENT + "\n\n")
    mtime = (root / "etc/environment").stat().st_mtime_ns
    node_env.run(ctx)
    assert (root / "etc/profile.d/hpq-nccl.sh").read_text() == theirs
    assert (root / "etc/environment").read_text() == USER_ENVIRONMENT + "\n\n"
    assert (root / "etc/environment").stat().st_mtime_ns == mtime
    assert files.BEGIN % "nccl" not in (root / "etc/environment").read_text()


# ---------------------------------------------------------------------------- real Slurm


def efa_probe_root(tmp_path: Path) -> Path:
    """A node root whose probe finds one EFA device, so the worker environment is the catalog's EFA one."""
    root = tmp_path / "efa-node"
    (root / "sys/class/infiniband/rdmap16s27").mkdir(parents=True)
    return root


def run_leaky_submit(cluster, tmp_path: Path, fault: bool) -> tuple[subprocess.CompletedProcess, dict]:
    """run-nccl-test as the lifecycle installed it on the controller, submitted from an environment that
    carries what a CPU controller used to export (plus a user's own setting), the ranks on two real slurmd."""
    from tests.scripts.test_scripts_slurm import command

    exe, env = command(cluster, "run-nccl-test")
    env.update(HPQ_ROOT=str(efa_probe_root(tmp_path)), NCCL_NET_PLUGIN="none", NCCL_P2P_DISABLE="1",
               FI_EFA_USE_DEVICE_RDMA="0", HPQ_RESULTS_DIR=str(tmp_path / "results"))
    if fault:  # tests/faults/sitecustomize.py: child_env merges the inherited variables as before issue 19
        env.update(PYTHONPATH=str(FAULTS_DIR), HPQ_TEST_FAULT_INHERIT_ENV="1")
    res = subprocess.run([exe, "2", "1", "--python", sys.executable, "-e", "64K", "-n", "2", "-w", "1",
                          "--instance-type", "ml.p4d.24xlarge", "--expect", "none"],
                         env=env, cwd=str(cluster.shared_dir), capture_output=True, text=True, timeout=300)
    docs = sorted((tmp_path / "results").glob("nccl-test-*.json"))
    return res, json.loads(docs[-1].read_text()) if docs else {}


@pytest.mark.slow
def test_real_slurm_controller_exports_nothing_worker_keeps_its_own(slurm_cluster):
    """The whole lifecycle (on_create.sh, every step, slurmctld/slurmd started) on a controller (ml.m5.xlarge)
    and a worker (ml.g5.16xlarge, TCP): nothing for shells or Slurm on the controller, the worker's own values
    on the worker."""
    assert transport_assignments(slurm_cluster.roots["controller"]) == {}
    worker = transport_assignments(slurm_cluster.roots["node-1"])
    assert "NCCL_NET_PLUGIN" in worker["etc/environment"] and "NCCL_NET_PLUGIN" in worker["etc/profile.d/hpq-nccl.sh"]


@pytest.mark.slow
def test_real_srun_ranks_get_the_worker_environment_not_the_submitters(slurm_cluster, tmp_path):
    """srun passes the launching process's environment to the tasks (--export=ALL); run-nccl-test removes the
    submitter's NCCL_NET_PLUGIN=none and NCCL_P2P_DISABLE=1 first, so each rank's own hpq-env block (printed on
    node-1 and node-2 by real Slurm tasks) is p4d's EFA environment, and the check agrees."""
    res, doc = run_leaky_submit(slurm_cluster, tmp_path, fault=False)
    # The ranks talk gloo over this host's sockets, not EFA: the verdict's transport check fails that, as it
    # must on a real p4d (issue 19); the environment check, this test's subject, passes.
    assert res.returncode == 1 and "the log says torch.distributed backend gloo: TCP sockets, not EFA" in res.stdout, \
        res.stdout[-3000:] + res.stderr[-3000:]
    assert "transport environment is not the worker type's" not in res.stdout
    blocks = [ln for ln in res.stdout.splitlines() if ln.startswith("hpq-env: ")]
    assert "hpq-env: node-1 FI_EFA_USE_DEVICE_RDMA=1" in blocks and "hpq-env: node-2 FI_PROVIDER=efa" in blocks
    assert not [ln for ln in blocks if "NCCL_NET_PLUGIN" in ln or "NCCL_P2P_DISABLE" in ln], blocks
    check = doc["environment_check"]
    assert check["ok"] is True and sorted(check["effective"]) == ["node-1", "node-2"]


@pytest.mark.slow
def test_real_srun_leak_fails_the_job(slurm_cluster, tmp_path):
    """Broken twin: the same submit with the launcher merging as before issue 19 (tests/faults). Real srun carries
    NCCL_NET_PLUGIN=none into the ranks, and run-nccl-test fails naming it and where it came from."""
    res, doc = run_leaky_submit(slurm_cluster, tmp_path, fault=True)
    assert res.returncode == 1, res.stdout[-3000:]
    assert "hpq-env: node-1 NCCL_NET_PLUGIN=none" in res.stdout and "hpq-env: node-2 NCCL_P2P_DISABLE=1" in res.stdout
    headline = next(ln for ln in res.stdout.splitlines() if ln.startswith(("PASS: ", "FAIL: ", "INCONCLUSIVE: ")))
    assert headline.startswith("FAIL: ") and "environment difference" in headline, headline
    assert "NCCL_NET_PLUGIN=none is set in the job but `hpq nccl-env ml.p4d.24xlarge` does not set it; inherited " \
           "from the environment the job was launched from" in res.stdout
    assert doc["environment_check"]["ok"] is False and doc["verdict"]["ok"] is False



@pytest.mark.slow
def test_documented_sbatch_pattern_keeps_the_submitters_transport_out(slurm_cluster, tmp_path):
    """docs/validation.md's sbatch script, submitted with NCCL_NET_PLUGIN=none and FI_PROVIDER=tcp in the
    submitting environment: the srun step on both workers has the worker's own settings (g5.16xlarge, TCP: its
    NCCL_SOCKET_IFNAME, no FI_PROVIDER) and PATH. Broken twin: the same script without the --export line; the
    submitter's FI_PROVIDER=tcp reaches the step (Slurm's default --export=ALL)."""
    base = slurm_cluster.roots["node-1"].parent
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)

    def submit(export_line: str, name: str) -> dict[str, dict[str, str]]:
        script = tmp_path / f"{name}.sbatch"
        # the fixture's nodes keep their root under BASE/<node>; on a cluster the path is /etc/profile.d/...
        script.write_text(
            "#!/bin/bash\n#SBATCH --nodes=2\n" + export_line +
            f". {base}/$SLURMD_NODENAME/etc/profile.d/hpq-nccl.sh\nexport SLURM_EXPORT_ENV=ALL\n"
            f"srun sh -c 'env | grep -E \"^(NCCL|FI|GLOO)_|^PATH=\" > {out}/{name}.$SLURMD_NODENAME'\n")
        env = dict(slurm_cluster.env, NCCL_NET_PLUGIN="none", FI_PROVIDER="tcp", NCCL_SOCKET_IFNAME="eth9")
        res = subprocess.run(["sbatch", "--wait", "-o", str(out / f"{name}.log"), str(script)], env=env,
                             capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
        assert res.returncode == 0, res.stdout + res.stderr + (out / f"{name}.log").read_text(errors="replace")
        return {n: dict(ln.split("=", 1) for ln in (out / f"{name}.{n}").read_text().splitlines())
                for n in ("node-1", "node-2")}

    worker = json.loads((slurm_cluster.roots["node-1"] / "etc/hpq/nccl-env.json").read_text())["variables"]
    steps = submit("#SBATCH --export=PATH,HOME,USER,LANG\n", "documented")
    for seen in steps.values():
        assert "FI_PROVIDER" not in seen and seen["NCCL_SOCKET_IFNAME"] == worker["NCCL_SOCKET_IFNAME"] != "eth9"
        assert seen["PATH"]
    leaky = submit("", "default-export")
    assert {seen.get("FI_PROVIDER") for seen in leaky.values()} == {"tcp"}
