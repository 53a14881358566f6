"""``hpq rehearse`` end to end, as a user runs it: a subprocess, as root, with real namespaces and daemons.

What is real: network/mount/UTS namespaces and a bridge, Slurm 22.05, MUNGE and OpenSSH from Debian,
torch (gloo) through srun, the deploy code path, the lifecycle bundle that deploy uploaded, the
handlers of custom resources. What is a stand-in (and said so by the rehearsal itself): AWS is an
embedded moto server, IMDS is hpq's IMDSv2 server, FSx is a shared tmpfs behind a mount.lustre
helper, the HyperPod agent's files are written by the rehearsal, and there is no SSM hop.

Each test checks that nothing of its run is left afterwards: no namespace, link, mount, state file or
work directory carrying its run id, and no new slurmd/slurmctld/munged/sshd outside the host's
network namespace. Needs root; CI runs as root (a test that cannot run fails, it is not skipped).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DAEMONS = ("slurmd", "slurmctld", "munged", "sshd")
STATE_DIR = Path("/run/hpq-rehearse")


@pytest.fixture(autouse=True)
def _root():
    if os.geteuid() != 0:
        pytest.fail("hpq rehearse needs root (namespaces, a bridge, mounts); CI runs the suite as root")


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "HPQ_", "SLURM_"))}
    e["HPQ_REHEARSE_LOG_DIR"] = str(tmp_path / "logs")
    return e


def host_netns() -> str:
    return os.readlink("/proc/self/ns/net")


def daemons_outside_host_netns() -> set[tuple[int, str]]:
    out = set()
    host = host_netns()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            if comm in DAEMONS and os.readlink(f"/proc/{pid}/ns/net") != host:
                out.add((int(pid), comm))
        except OSError:
            continue
    return out


def leftovers(run_id: str, daemons_before: set[tuple[int, str]]) -> list[str]:
    found = []
    found += [f"netns {n}" for n in (os.listdir("/run/netns") if os.path.isdir("/run/netns") else []) if run_id in n]
    found += [f"link {n}" for n in os.listdir("/sys/class/net") if run_id in n]
    with open("/proc/self/mounts") as fh:
        found += [f"mount {ln.split()[1]}" for ln in fh if f"hpq-rehearse-{run_id}" in ln]
    found += [f"dir {p}" for p in Path("/tmp").glob(f"hpq-rehearse-{run_id}-*")]
    if (STATE_DIR / f"{run_id}.json").exists():
        found.append(f"state file {run_id}.json")
    found += [f"process {pid} {comm}" for pid, comm in daemons_outside_host_netns() - daemons_before]
    return found


def rehearse(env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpq", "rehearse", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def test_rehearsal_passes_with_its_json_and_leaves_nothing(env):
    before = daemons_outside_host_netns()
    res = rehearse(env, "slurm-gpu", "--workers", "2", "--output", "json")
    assert res.returncode == 0, res.stderr[-4000:]
    r = json.loads(res.stdout)
    assert r["variant"] == "slurm-gpu" and r["result"] == "pass" and r["seconds"] > 0
    assert "EMULATED rendition (moto)" in res.stderr  # the emulation is said, never silent
    nodes = r["nodes"]
    assert [n["role"] for n in nodes] == ["controller", "worker", "worker"]
    assert len({n["ip"] for n in nodes}) == 3 and len({n["instance_id"] for n in nodes}) == 3
    for n in nodes:
        assert n["hostname"] == "ip-" + n["ip"].replace(".", "-")
        assert n["lifecycle_seconds"] > 0 and n["lifecycle_exit_code"] == 0
        assert [s["name"] for s in n["steps"]][:1] == ["identify"] and "slurm" in [s["name"] for s in n["steps"]]
        assert all(s["status"] in ("done", "skipped") and s["seconds"] is not None for s in n["steps"])
    assert r["slurm_nodes_idle"] == 2
    assert {r["slurm_nodes"][n["slurm_node"]] for n in nodes if n["slurm_node"]} == {"idle"}
    nccl = r["nccl"]
    assert nccl["verdict"]["ok"] is True and nccl["remote_exit_code"] == 0
    assert nccl["row_count"] > 0 and nccl["wrong_total"] == 0 and nccl["peak_busbw_gbps"] > 0
    assert r["nanogpt"]["ok"] is True and r["nanogpt"]["exit_status"] == 0 and r["nanogpt"]["nodes"] == 2
    out = r["aws"]["outputs"]
    assert out["FsxDnsName"].startswith(out["FsxFileSystemId"]) and out["LifecycleS3Uri"].startswith("s3://sagemaker-")
    assert r["logs"] is None and not list(Path(env["HPQ_REHEARSE_LOG_DIR"]).glob(f"{r['run_id']}/*"))
    assert leftovers(r["run_id"], before) == []


def test_broken_lifecycle_step_names_node_step_cause_and_log(env):
    """A worker pointed at the wrong slurmctld port (documented HPQ_* settings, on that node only)."""
    before = daemons_outside_host_netns()
    res = rehearse(env, "--workers", "2", "--no-validate", "--output", "json",
                   "--node-env", "worker-2:HPQ_SLURMCTLD_PORT=9", "--node-env", "worker-2:HPQ_SLURM_CONF_WAIT_S=2",
                   "--node-env", "worker-2:HPQ_SERVICE_WAIT_S=2")
    assert res.returncode == 1, res.stderr[-3000:]
    r = json.loads(res.stdout)
    f = r["failure"]
    assert r["result"] == "fail" and f["stage"] == "lifecycle" and f["node"] == "worker-2" and f["step"] == "slurm"
    assert ":9" in f["cause"] and "slurmd has not fetched its config" in f["cause"]
    first = [ln for ln in res.stderr.splitlines() if ln.startswith("hpq: error:")]
    assert first == [f"hpq: error: rehearsal failed at stage lifecycle, node worker-2, step slurm: {f['cause']}"]
    assert f"log: {f['log']}" in res.stderr
    log = Path(f["log"]).read_text()  # kept after teardown, with the lines printed
    assert "step slurm: FAILED" in log and f["last_lines"] and f["last_lines"][-1] in log
    worker2 = next(n for n in r["nodes"] if n["name"] == "worker-2")
    assert {s["name"]: s["status"] for s in worker2["steps"]}["slurm"] == "failed"
    assert leftovers(r["run_id"], before) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_lifecycle_tears_everything_down(env, sig):
    before = daemons_outside_host_netns()
    proc = subprocess.Popen([sys.executable, "-m", "hpq", "rehearse", "--no-validate"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL)
    assert proc.stderr is not None
    seen = ""
    deadline = time.time() + 180
    while "OnCreate" not in seen and time.time() < deadline:  # nodes booted, lifecycles running
        line = proc.stderr.readline()
        if not line:
            break
        seen += line
    assert "OnCreate" in seen, seen[-2000:]
    run_id = re.search(r"\(run ([0-9a-f]{6}),", seen).group(1)
    assert os.path.exists(f"/run/netns/hpq-{run_id}-controller")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err[-2000:]
    assert f"interrupted by {sig.name}" in err
    assert leftovers(run_id, before) == []


def test_keep_shell_and_down(env):
    before = daemons_outside_host_netns()
    res = rehearse(env, "--workers", "1", "--no-validate", "--keep", "--output", "json")
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(res.stdout)
    run_id = r["run_id"]
    try:
        assert r["kept"] is True and os.path.exists(f"/run/netns/hpq-{run_id}-worker-1")
        worker = next(n for n in r["nodes"] if n["name"] == "worker-1")
        shell = subprocess.run([sys.executable, "-m", "hpq", "rehearse", "shell", "worker-1", "--run", run_id],
                               input="hostname; ip -4 -o addr show ens5; cat /etc/hpq/node-info.json; exit\n",
                               capture_output=True, text=True, timeout=60, env=env)
        assert shell.returncode == 0, shell.stderr
        assert worker["hostname"] in shell.stdout and worker["ip"] in shell.stdout
        assert json.loads(shell.stdout[shell.stdout.index("{"):shell.stdout.rindex("}") + 1])["role"] == "worker"
        bad = subprocess.run([sys.executable, "-m", "hpq", "rehearse", "shell", "worker-7", "--run", run_id],
                             capture_output=True, text=True, timeout=60, env=env)
        assert bad.returncode == 2 and "no node 'worker-7'" in bad.stderr
    finally:
        down = subprocess.run([sys.executable, "-m", "hpq", "rehearse", "down", "--run", run_id],
                              capture_output=True, text=True, timeout=120, env=env)
    assert down.returncode == 0 and f"rehearsal {run_id}: removed" in down.stdout, down.stderr
    assert leftovers(run_id, before) == []


def test_eks_variant_runs_the_eks_lifecycle_and_checks_its_manifests(env):
    before = daemons_outside_host_netns()
    res = rehearse(env, "eks-gpu", "--workers", "2", "--output", "json")
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(res.stdout)
    assert r["variant"] == "eks-gpu" and r["result"] == "pass"
    assert "no Kubernetes API server runs" in res.stderr
    assert [n["role"] for n in r["nodes"]] == ["worker", "worker"]  # EKS clusters have no Slurm controller
    for n in r["nodes"]:
        status = {s["name"]: s["status"] for s in n["steps"]}
        assert status["identify"] == status["fsx"] == "done"
        assert status["slurm"] == status["munge"] == "skipped"  # Kubernetes does that part
    m = r["manifests"]
    assert m["ok"] and m["api_server"] is None and {i["test"] for i in m["manifests"]} >= {"nccl-test", "nanogpt"}
    assert all(i["objects"] > 0 and i["status"] == "valid" for i in m["manifests"])
    assert r["nccl"] is None and r["slurm_nodes_idle"] == 0
    assert leftovers(r["run_id"], before) == []


def test_interpreter_under_tmp_stays_visible_on_the_nodes(env):
    """A virtualenv under /tmp (the README's fresh-machine path: `python3 -m venv /tmp/v`) runs the rehearsal:
    the nodes' private /tmp must not hide the interpreter the rehearsal runs on them (it did: `env:
    '/tmp/v/bin/python': No such file or directory` at the first node command)."""
    import shutil
    import tempfile

    venv = Path(tempfile.mkdtemp(prefix="hpq-venv-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                       check=True, timeout=120)
        py = venv / "bin" / "python"
        before = daemons_outside_host_netns()
        res = subprocess.run([str(py), "-m", "hpq", "rehearse", "--workers", "1", "--no-validate", "--output",
                              "json"], capture_output=True, text=True, timeout=600, env=env, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, res.stderr[-3000:]
        r = json.loads(res.stdout)
        assert r["result"] == "pass" and r["slurm_nodes_idle"] == 1
        assert leftovers(r["run_id"], before) == []
    finally:
        shutil.rmtree(venv, ignore_errors=True)
