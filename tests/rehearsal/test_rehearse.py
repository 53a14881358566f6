"""``hpq rehearse`` end to end, as a user runs it: a subprocess, as root, with real namespaces and daemons.

What is real: network/mount/UTS namespaces and a bridge, Slurm 22.05, MUNGE and OpenSSH from Debian,
torch (gloo) through srun, the deploy code path, the lifecycle bundle that deploy uploaded, the
handlers of custom resources. What is a stand-in (and said so by the rehearsal itself): AWS is an
embedded moto server, IMDS is hpq's IMDSv2 server, FSx is a shared tmpfs behind a mount.lustre
helper, the HyperPod agent's files are written by the rehearsal, and there is no SSM hop.

Each test checks that nothing of its run is left at the moment the command exits (issue 21: "the
rehearsal's process table at the moment it exits"): while the command runs, a watcher (``Watch``)
records every process of the run, i.e. every descendant of the hpq process and every process in a
network namespace of the run (found by the run id its names carry); right after the command exits,
none of them may be in /proc (running, exiting or a zombie: ``ps`` shows all three), and no
namespace, link, mount, state file or work directory of the run may be there. Only the run's own
processes count, so rehearsals of other runs on the same host (another engineer's, a parallel test)
never fail these checks. Needs root; CI runs as root (a test that cannot run fails, it is not skipped).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hpq.lifecycle import fields
from hpq.rehearsal.run import DEFAULT_NCCL_ARGS
from hpq.rehearsal.stages import progress
from tests.support import CHECKOUT

pytestmark = [pytest.mark.slow, pytest.mark.daemons, pytest.mark.root, pytest.mark.torch]

STATE_DIR = Path("/run/hpq-rehearse")


def _table() -> dict[int, tuple[str, str, int, int]]:
    """pid -> (comm, state, ppid, start time) for every entry of /proc (zombies included), read here, not
    through the code under test."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            raw = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
        except OSError:
            continue
        f = raw[raw.rindex(")") + 2:].split()
        out[int(pid)] = (raw[raw.index("(") + 1:raw.rindex(")")], f[0], int(f[1]), int(f[19]))
    return out


class Watch:
    """Every process of one run, sampled while its command runs: descendants of the command's process and
    processes in the run's network namespaces. ``finish()``, called as soon as the command has exited, says
    which of them are still in the process table, and which processes are in one of the run's namespaces."""

    def __init__(self, run_id: str = "", interval: float = 0.1):
        self.run_id, self.interval = run_id, interval
        self.seen: dict[tuple[int, int], str] = {}  # (pid, start) -> comm
        self.net: set[str] = set()  # "net:[inode]" of the run's namespaces
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.root = 0

    def _find_run_id(self) -> None:
        for path in STATE_DIR.glob("*.json"):
            try:
                if json.loads(path.read_text()).get("pid") == self.root:
                    self.run_id = path.stem
            except (OSError, ValueError, AttributeError):
                continue

    def sample(self) -> None:
        if not self.run_id and self.root:
            self._find_run_id()
        if self.run_id and os.path.isdir("/run/netns"):
            for name in os.listdir("/run/netns"):
                if name.startswith(f"hpq-{self.run_id}-"):
                    try:
                        self.net.add(f"net:[{os.stat(f'/run/netns/{name}').st_ino}]")
                    except OSError:
                        pass
        table = _table()
        children: dict[int, list[int]] = {}
        for pid, (_, _, ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        todo = list(children.get(self.root, [])) if self.root else []
        while todo:
            pid = todo.pop()
            self.seen[(pid, table[pid][3])] = table[pid][0]
            todo += children.get(pid, [])
        for pid, (comm, _, _, start) in table.items():
            if self.net and self._net(pid) in self.net:
                self.seen[(pid, start)] = comm

    @staticmethod
    def _net(pid: int) -> str | None:
        try:
            return os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            return None

    def start(self, proc: subprocess.Popen) -> Watch:
        self.root = proc.pid
        self.sample()

        def loop() -> None:
            while not self._stop.is_set():
                self.sample()
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def finish(self) -> list[str]:
        """What of the run is in the process table now (call it the moment the command has exited)."""
        table = _table()
        self._stop.set()
        left = [f"process {comm} (pid {pid}, state {table[pid][1]}, parent {table[pid][2]})"
                for (pid, start), comm in sorted(self.seen.items()) if pid in table and table[pid][3] == start]
        left += [f"process {c} (pid {pid}) in a namespace of the run" for pid, (c, *_) in table.items()
                 if self.net and self._net(pid) in self.net and f"(pid {pid}," not in " ".join(left)]
        if self._thread is not None:
            self._thread.join(timeout=5)
        return left


def watched(argv: list[str], env: dict, run_id: str = "", timeout: float = 600,
            input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` under a Watch; the result carries ``left_at_exit`` and ``watch``."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
    watch = Watch(run_id).start(proc)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    finally:
        left = watch.finish()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    res = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    res.left_at_exit, res.watch = left, watch  # type: ignore[attr-defined]
    return res


def leftovers(run_id: str, res: subprocess.CompletedProcess) -> list[str]:
    """What of run ``run_id`` is there after ``res`` (the run, or `down` for a kept one) exited: its processes
    as the process table held them at that moment, then its namespaces, links, mounts, dirs, state file."""
    found = list(res.left_at_exit)  # type: ignore[attr-defined]
    if not res.watch.seen:  # type: ignore[attr-defined]
        found.append("the watch saw no process of the run: it could not have seen one left")
    found += [f"netns {n}" for n in (os.listdir("/run/netns") if os.path.isdir("/run/netns") else []) if run_id in n]
    found += [f"link {n}" for n in os.listdir("/sys/class/net") if run_id in n]
    with open("/proc/self/mountinfo") as fh:
        found += [f"mount {ln.split()[4]}" for ln in fh if f"hpq-rehearse-{run_id}" in ln or f"hpq-{run_id}-" in ln]
    found += [f"dir {p}" for p in Path("/tmp").glob(f"hpq-rehearse-{run_id}-*")]
    if (STATE_DIR / f"{run_id}.json").exists():
        found.append(f"state file {run_id}.json")
    return found


def run_down(env: dict, run_id: str) -> subprocess.CompletedProcess:
    """`hpq rehearse down --run RUN_ID` under a Watch of that run's namespaces."""
    return watched([sys.executable, "-m", "hpq", "rehearse", "down", "--run", run_id or "none"], env, run_id,
                   timeout=120)


def rehearse(env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return watched([sys.executable, "-m", "hpq", "rehearse", *args], env, timeout=timeout)


def assert_progress_while_testing(stderr: str) -> None:
    """The NCCL and nanoGPT stages show their rows and iterations as they come, and say something at least every
    QUIET_S seconds (issue 25 item 6: they were silent for most of their time)."""
    said = [(float(m.group(1)), m.group(2), m.group(3)) for m in
            re.finditer(r"^\[\s*([0-9.]+)s\] (nccl|nanogpt|ssh): (.*)$", stderr, re.MULTILINE)]
    assert [m for _, who, m in said if who == "nccl" and "busbw" in m and "(out of place)" in m], said
    assert [m for _, who, m in said if who == "nanogpt" and m.startswith("iter ")], said
    times = [t for t, _, _ in said]
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) < progress.QUIET_S + 2, said


def test_rehearsal_passes_with_its_json_and_leaves_nothing(env):
    """The default rehearsal, with --observability: the metrics path from every node to the AMP stand-in is
    judged too (assert_observed)."""
    res = rehearse(env, "slurm-gpu", "--nodes", "2", "--observability", "--output", "json")
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
        for s in n["steps"]:  # a GPU worker's observability step runs hpq's GPU writer too: nothing left out
            assert s["status"] in ("done", "skipped") and s["seconds"] is not None, s
    assert r["slurm_nodes_idle"] == 2
    assert {r["slurm_nodes"][n["slurm_node"]] for n in nodes if n["slurm_node"]} == {"idle"}
    nccl = r["nccl"]
    assert nccl["verdict"]["ok"] is True and nccl["remote_exit_code"] == 0
    assert nccl["row_count"] > 0 and nccl["wrong_total"] == 0 and nccl["peak_busbw_gbps"] > 0
    assert r["nanogpt"]["ok"] is True and r["nanogpt"]["exit_status"] == 0 and r["nanogpt"]["nodes"] == 2
    assert_progress_while_testing(res.stderr)
    assert r["without_fsx"] is False and r["nanogpt"]["log"].startswith("/fsx/hpq-results/")
    # With /fsx the key pair is shared there (no Slurm job) and host keys are vouched for by the cluster CA.
    assert r["ssh"]["key_jobs"] == []
    assert [(h["to"], h["hostname"], h["ok"]) for h in r["ssh"]["hops"]] == [
        (n["hostname"], n["hostname"], True) for n in nodes if n["role"] == "worker"]
    out = r["aws"]["outputs"]
    assert out["FsxDnsName"].startswith(out["FsxFileSystemId"]) and out["LifecycleS3Uri"].startswith("s3://sagemaker-")
    assert r["logs"] is None and not list(Path(env["HPQ_REHEARSE_LOG_DIR"]).glob(f"{r['run_id']}/*"))
    assert r["teardown"]["ok"] is True and r["teardown"]["left"] == []
    # the daemons ran (the watch saw them: it could have caught one left) and none is in /proc at exit
    assert {"slurmd", "slurmctld", "munged", "sshd"} <= set(res.watch.seen.values()), res.watch.seen
    assert leftovers(r["run_id"], res) == []
    assert_observed(r, res)


def assert_observed(r: dict, res: subprocess.CompletedProcess) -> None:
    """Issue 24 item 5: every node's series in the stand-in AMP within 60 s of Slurm idle, hpq observe's check,
    and every dashboard panel whose metrics exist here drawing data; the SigV4 check held (an unsigned query
    refused) and the nodes' writes arrived signed. The agents and exporters really ran on the nodes."""
    o = r["observe"]
    assert o["verdict"] == "PASS", o.get("reason")
    assert re.fullmatch(r"ws-[0-9a-f-]{36}", o["workspace"]["id"])
    assert fields.AMP_REMOTE_WRITE_URL.fullmatch(o["workspace"]["remote_write_url"])
    assert [n["node"] for n in o["nodes"]] == [n["name"] for n in r["nodes"]]
    for n in o["nodes"]:
        assert n["expected"] and len(set(n["present"]) & set(n["expected"])) >= 0.95 * len(n["expected"]), n
    assert all(v["present"] for v in o["cluster_series"].values()), o["cluster_series"]
    assert o["reached_after_s"] is not None and o["reached_after_s"] <= 60
    d = o["dashboards"]
    assert d["without_data"] == [] and d["with_data"] >= 12, d
    # the node's own exporters, the controller's Slurm writer and the validation results published on the nodes
    assert {"cluster: CPU busy", "slurm: Nodes by state", "hpq-results: Latest verdict per node and test",
            "hpq-results: nanoGPT tokens per second"} <= set(d["drew"]), d["drew"]
    # the GPU workers' DCGM fields, from hpq's GPU writer over the nodes' nvidia-smi (the real H100 capture)
    workers = [n for n in o["nodes"] if {m["name"]: m["role"] for m in r["nodes"]}[n["node"]] == "worker"]
    assert len(workers) == 2
    for n in workers:
        assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_POWER_USAGE"} <= set(n["present"]), n
    assert {"gpu: GPU utilization", "gpu: SM clock", "gpu: Power draw", "gpu: GPU temperature"} <= set(d["drew"])
    assert o["sigv4"]["unsigned_query_refused"] is True and o["sigv4"]["signed_writes_relayed"] > 0
    assert {"node_exporter", "prometheus"} <= set(res.watch.seen.values()), res.watch.seen


def test_observability_fails_and_names_every_node_whose_metrics_never_arrive(env):
    """The broken twin of assert_observed: node_exporter's pin made wrong on every node (HPQ_OBSERVABILITY_SHA256,
    the documented override, which replaces the mirror's pins too): the lifecycle refuses both downloads before
    unpacking, nothing is scraped or written, and the rehearsal FAILs at stage observe naming each node silent,
    after waiting out the 60 s; nothing is left behind."""
    res = rehearse(env, "--no-validate", "--observability", "--node-env",
                   "HPQ_OBSERVABILITY_SHA256=node_exporter=" + "0" * 64, "--output", "json")
    assert res.returncode == 1, res.stderr[-3000:]
    r = json.loads(res.stdout)
    assert r["failure"]["stage"] == "observe" and r["result"] == "fail"
    o = r["observe"]
    assert o["verdict"] == "FAIL" and "below 95%" in o["reason"]
    assert [n["share"] for n in o["nodes"]] == [0.0] * len(r["nodes"])
    assert all("nothing from this node" in cause for n in o["nodes"] for cause in n["missing"].values())
    assert o["reached_after_s"] is None and o["sigv4"]["signed_writes_relayed"] == 0
    assert re.search(r"observability done with a warning .*not installed: node_exporter", res.stderr)
    assert leftovers(r["run_id"], res) == []


def on_node(env: dict, run_id: str, node: str, script: str) -> str:
    """``script`` in a login shell on a kept rehearsal's node (``hpq rehearse shell``); its output."""
    res = subprocess.run([sys.executable, "-m", "hpq", "rehearse", "shell", node, "--run", run_id],
                         input=script + "\nexit 0\n", capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_cluster_without_fsx_runs_the_no_fsx_path_on_every_node(env):
    """--without-fsx: the deployed filesystem is deleted before the nodes boot (as when a user deleted it), so no
    filesystem carries the cluster's tag. Every node's fsx step warns and the run goes on; each node keeps the
    MUNGE key HyperPod gave it; the controller hands the SSH key to the workers through one Slurm job, which
    the rehearsal waits for before it hops from the controller to each worker as ubuntu; the validation keeps
    its results in the user's home. On the kept cluster: `hpq test nccl CLUSTER` finds the rehearsal by its
    cluster's name (no AWS) and runs and judges what the rehearsal's own nccl stage ran, to the same verdict; an
    ssh hop of our own; and a second training run that resumes from the checkpoint only rank 0's node holds
    (sent to the other rank)."""
    res = rehearse(env, "--without-fsx", "--keep", "--output", "json")
    assert res.returncode == 0, res.stderr[-4000:]
    r = json.loads(res.stdout)
    run_id = r["run_id"]
    try:
        assert r["result"] == "pass" and r["without_fsx"] is True and r["slurm_nodes_idle"] == 2
        fs_id = r["aws"]["outputs"]["FsxFileSystemId"]
        assert any(f"{fs_id} deleted after the deploy (--without-fsx)" in n for n in r["aws"]["notes"])
        keys, steps = set(), {}
        for n in r["nodes"]:
            steps[n["name"]] = {s["name"]: s for s in n["steps"]}
            fsx, munge = steps[n["name"]]["fsx"], steps[n["name"]]["munge"]
            assert fsx["status"] == "warning", fsx
            assert fsx["detail"].startswith(f"no FSx filesystem found (tag hpq:cluster-name={r['cluster']['name']})")
            assert steps[n["name"]]["host-certs"]["status"] == "warning"  # no place for the cluster host CA
            assert munge["status"] == "done" and "(no shared filesystem to compare keys through)" in munge["detail"]
            keys.add(re.search(r"kept this node's key (sha256:[0-9a-f]+)", munge["detail"]).group(1))
            assert steps[n["name"]]["slurm"]["status"] == steps[n["name"]]["ssh-keys"]["status"] == "done"
        assert len(keys) == 1  # HyperPod's one key, kept on every node: Slurm's MUNGE credentials verify
        queued = re.search(r"queued Slurm job (\d+) to install it on 2 worker", steps["controller"]["ssh-keys"]["detail"])
        assert queued, steps["controller"]["ssh-keys"]
        assert [(j["id"], j["state"]) for j in r["ssh"]["key_jobs"]] == [(queued.group(1), "COMPLETED")]
        workers = [n for n in r["nodes"] if n["role"] == "worker"]
        assert [(h["to"], h["hostname"], h["key"], h["ok"]) for h in r["ssh"]["hops"]] == [
            (w["hostname"], w["hostname"], "/home/ubuntu/.ssh/id_ed25519_hpq", True) for w in workers]
        assert r["nccl"]["verdict"]["ok"] is True and r["nccl"]["wrong_total"] == 0
        nano = r["nanogpt"]
        assert nano["ok"] is True and nano["nodes"] == 2
        assert nano["log"].startswith("/home/ubuntu/hpq-results/") and nano["ckpt_dir"] == "/home/ubuntu/hpq-results/nanogpt/tiny"

        own = r["nccl"]
        tested = subprocess.run([sys.executable, "-m", "hpq", "test", "nccl", r["cluster"]["name"], "2", "--extra",
                                 DEFAULT_NCCL_ARGS, "--output", "json"], capture_output=True, text=True, timeout=600,
                                env=env)
        assert tested.returncode == 0, tested.stderr[-3000:]
        t = json.loads(tested.stdout)
        assert (t["backend"], t["cluster"], t["instance_type"]) == ("rehearsal", r["cluster"]["name"],
                                                                   r["worker_instance_type"])
        assert t["command"] == own["command"] == f"run-nccl-test 2 {DEFAULT_NCCL_ARGS} --expect none"
        assert t["outcome"] == own["outcome"] == "PASS" and t["remote_exit_code"] == own["remote_exit_code"] == 0
        assert {k: c["outcome"] for k, c in t["verdict"]["checks"].items()} == {
            k: c["outcome"] for k, c in own["verdict"]["checks"].items()}
        assert [row["size_bytes"] for row in t["rows"]] == [row["size_bytes"] for row in own["rows"]]
        assert t["wrong_total"] == 0 and sorted(t["rank_hosts"]) == sorted(own["rank_hosts"])

        # `--nodelist` (the pair `hpq doctor --fix` runs after a repair) through the real salloc/srun: the two
        # named workers, in the given order, and nothing else.
        pinned = [w["hostname"] for w in reversed(workers)]
        pair = on_node(env, run_id, "controller", "su - ubuntu -c 'run-nccl-test 2 --nodelist "
                       + ",".join(pinned) + " -e 1M -n 2 -w 1 --expect none'")
        assert re.search(r"^\+ salloc -N 2 .*-w " + re.escape(",".join(pinned)) + " ", pair, re.M), pair[-3000:]
        assert re.search(r"^PASS: ", pair, re.M), pair[-3000:]
        ranks = [ln for ln in pair.splitlines() if ln.startswith("#  Rank ")]
        assert ranks and all(any(h in ln for ln in ranks) for h in pinned), pair[-3000:]

        target = workers[-1]["hostname"]
        hop = on_node(env, run_id, "controller", "su - ubuntu -c 'ssh-keygen -lf ~/.ssh/id_ed25519_hpq.pub; "
                      f"ssh -n -o BatchMode=yes {target} \"hostname; ssh-keygen -lf ~/.ssh/id_ed25519_hpq.pub; "
                      "mountpoint /fsx 2>&1\"'")
        prints = re.findall(r"SHA256:\S+", hop)
        assert f"\n{target}\n" in hop and len(prints) == 2 and prints[0] == prints[1], hop
        assert "/fsx is not a mountpoint" in hop or "No such file or directory" in hop

        train = on_node(env, run_id, "controller", "su - ubuntu -c 'run-nanogpt 2 --model tiny --iters 30 "
                        "--batch-size 4 --ckpt-every 10 --log-every 5'")
        rank0 = re.search(r"ranks on: 0=(\S+), 1=(\S+)", train)
        assert rank0 and "# PASS: " in train and "# exit status 0" in train, train[-3000:]
        assert "resumed from /home/ubuntu/hpq-results/nanogpt/tiny/ckpt-00000020.pt at iteration 20" in train
        by_host = {n["hostname"]: n["name"] for n in workers}
        held = {h: on_node(env, run_id, by_host[h], "ls /home/ubuntu/hpq-results/nanogpt/tiny 2>&1")
                for h in rank0.groups()}
        assert "ckpt-00000030.pt" in held[rank0.group(1)]
        assert "No such file or directory" in held[rank0.group(2)]  # not shared: rank 1 got rank 0's checkpoint
    finally:
        down = run_down(env, run_id)
    assert down.returncode == 0, down.stderr
    assert leftovers(run_id, down) == []  # `down` returned: nothing of the kept run is in the process table


def test_broken_lifecycle_step_names_node_step_cause_and_log(env):
    """A worker pointed at the wrong slurmctld port (documented HPQ_* settings, on that node only)."""
    res = rehearse(env, "--nodes", "2", "--no-validate", "--output", "json",
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
    assert leftovers(r["run_id"], res) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_lifecycle_tears_everything_down(env, sig):
    # As a terminal's foreground job has it: SIGINT at its default. A test run started in the background of a
    # non-interactive shell inherits SIGINT ignored (POSIX), and Python then leaves it ignored.
    proc = subprocess.Popen([sys.executable, "-m", "hpq", "rehearse", "--no-validate"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    watch = Watch().start(proc)
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
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        res = subprocess.CompletedProcess(proc.args, proc.returncode)
        res.left_at_exit, res.watch = watch.finish(), watch  # type: ignore[attr-defined]
    assert proc.returncode == 128 + sig, err[-2000:]
    assert f"interrupted by {sig.name}" in err
    assert "every process, mount, namespace, link and temp directory removed" in err
    assert leftovers(run_id, res) == []


def test_keep_shell_and_down(env):
    res = rehearse(env, "--nodes", "1", "--no-validate", "--keep", "--output", "json")
    # A kept rehearsal outlives a failed assertion: take its run id first so `down` always runs.
    found = re.search(r"\(run ([0-9a-f]+)", res.stderr)
    run_id = found.group(1) if found else ""
    try:
        assert res.returncode == 0, res.stderr[-3000:]
        r = json.loads(res.stdout)
        assert r["run_id"] == run_id
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
        down = run_down(env, run_id)
    assert down.returncode == 0 and f"rehearsal {run_id}: removed" in down.stdout, down.stderr
    # the kept run's daemons were alive when down started (the watch saw them), none is when it returns
    assert {"slurmd", "slurmctld", "munged", "sshd"} <= set(down.watch.seen.values()), down.watch.seen
    assert leftovers(run_id, down) == []


def test_eks_variant_runs_the_eks_lifecycle_and_checks_its_manifests(env):
    res = rehearse(env, "eks-gpu", "--nodes", "2", "--output", "json")
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
    assert leftovers(r["run_id"], res) == []


def test_interpreter_under_tmp_stays_visible_on_the_nodes(env):
    """A virtualenv under /tmp (the README's fresh-machine path: `python3 -m venv /tmp/v`) runs the rehearsal:
    the nodes' private /tmp must not hide the interpreter the rehearsal runs on them (it did: `env:
    '/tmp/v/bin/python': No such file or directory` at the first node command)."""
    import shutil
    import site
    import sysconfig
    import tempfile

    venv = Path(tempfile.mkdtemp(prefix="hpq-venv-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        py = venv / "bin" / "python"
        # This environment's packages (hpq, boto3, torch, ...) reach the new one through a .pth that adds our
        # site directories, their own .pth files included (hpq's editable install, coverage's start hook).
        # --system-site-packages would not do: from inside a virtualenv it reaches the base interpreter's.
        purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        ours = [d for d in site.getsitepackages() + [sysconfig.get_path("purelib")] if os.path.isdir(d)]
        Path(purelib, "hpq-test-parent.pth").write_text(
            "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dict.fromkeys(ours)) + "\n")
        res = watched([str(py), "-m", "hpq", "rehearse", "--nodes", "1", "--no-validate", "--output", "json"], env)
        assert res.returncode == 0, res.stderr[-3000:]
        r = json.loads(res.stdout)
        assert r["result"] == "pass" and r["slurm_nodes_idle"] == 1
        assert leftovers(r["run_id"], res) == []
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def test_login_node_registers_with_slurm_and_no_fsx_key_job_skips_it(env):
    """--login: the login node (NodeType Login, no PartitionNames in the API-driven model) runs slurmd and shows
    idle in `scontrol show nodes` though no partition lists it (sinfo would not show it: the rehearsal failed
    there). Without FSx the controller's key job names the workers exactly; the login node, outside every
    partition, cannot run a job, and the ssh-keys step says so as a warning instead of failing the node."""
    res = rehearse(env, "--nodes", "1", "--login", "--without-fsx", "--no-validate", "--output", "json")
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(res.stdout)
    login = next(n for n in r["nodes"] if n["role"] == "login")
    assert r["result"] == "pass" and r["slurm_nodes"][login["slurm_node"]] == "idle"
    ctl = next(n for n in r["nodes"] if n["role"] == "controller")
    keys = {s["name"]: s for s in ctl["steps"]}["ssh-keys"]
    assert keys["status"] == "warning" and "not reached" in keys["detail"]
    assert leftovers(r["run_id"], res) == []


def test_two_rehearsals_at_once_on_one_host(env):
    """Rehearsals may run side by side (docs/rehearse.md, "Two rehearsals at once"): every name carries the run
    id, the /24s differ, each passes, and each one's leftover check, looking at its own run only, is clean
    although the other's daemons ran (or still run) next to it."""
    results: dict[int, subprocess.CompletedProcess] = {}

    def one(i: int) -> None:
        results[i] = rehearse(env, "--nodes", "1", "--no-validate", "--output", "json")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=900)
    runs = []
    for res in results.values():
        assert res.returncode == 0, res.stderr[-3000:]
        runs.append(json.loads(res.stdout))
    assert len(runs) == 2 and runs[0]["run_id"] != runs[1]["run_id"]
    assert runs[0]["network"]["subnet"] != runs[1]["network"]["subnet"]
    assert runs[0]["network"]["bridge"] != runs[1]["network"]["bridge"]
    for r, res in zip(runs, results.values(), strict=True):
        assert r["result"] == "pass" and r["teardown"]["ok"] is True
        assert leftovers(r["run_id"], res) == []


def test_p5_rehearsal_checks_the_jobs_environment_on_the_workers(env):
    """--instance-type ml.p5.48xlarge: the workers show p5's 32 EFA devices, the job's ranks print their own
    transport environment inside the job, and the rehearsal's `environment` object says it is p5's (EFA RDMA,
    no NCCL_NET_PLUGIN=none from the controller). Its broken twin is the next test. With --observability: each
    worker's 8 GPUs (with NVLink) and 32 EFA devices reach the AMP stand-in through hpq's GPU and EFA writers, and
    the GPU and EFA dashboards' panels draw them."""
    res = rehearse(env, "--instance-type", "ml.p5.48xlarge", "--observability", "--output", "json")
    assert res.returncode == 0, res.stderr[-4000:]
    r = json.loads(res.stdout)
    e = r["environment"]
    assert e["ok"] is True and e["problems"] == [] and e["message"].startswith("PASS")
    workers = sorted(n["slurm_node"] for n in r["nodes"] if n["role"] == "worker")
    assert sorted(e["effective"]) == workers
    for seen in e["effective"].values():
        assert seen["FI_PROVIDER"] == "efa" and seen["FI_EFA_USE_DEVICE_RDMA"] == "1"
        assert seen["HPQ_TRANSPORT"] == "efa-rdma" and "NCCL_NET_PLUGIN" not in seen
    assert e["expected"]["HPQ_TRANSPORT"] == "efa-rdma" and r["nccl"]["verdict"]["ok"] is True
    o = r["observe"]
    assert o["verdict"] == "PASS", o.get("reason")
    roles = {n["name"]: n["role"] for n in r["nodes"]}
    for n in (n for n in o["nodes"] if roles[n["node"]] == "worker"):
        assert n["missing"] == {} and {"DCGM_FI_DEV_XID_ERRORS", "node_amazonefa_info"} <= set(n["present"]), n
        assert n["optional"] and all(n["optional"].values()), n  # the sick-link counters, shown
    assert {"efa: Bytes received per device", "efa: Retransmit timeouts (path changes)", "efa: EFA devices per node",
            "gpu: NVLink errors", "gpu: GPU utilization"} <= set(o["dashboards"]["drew"]), o["dashboards"]
    assert o["dashboards"]["without_data"] == []
    assert leftovers(r["run_id"], res) == []


def test_a_controller_that_leaks_into_jobs_fails_the_rehearsal(env):
    """Broken twin: the same p5 rehearsal with the controller exporting NCCL_NET_PLUGIN=none to login shells and
    the launcher merging it as before issue 19 (tests/rehearse_leak.py, tests/faults). The ranks really get it
    through srun, and the rehearsal fails at the nccl stage naming the variable and its source."""
    res = watched([sys.executable, "-m", "tests.rehearse_leak", "ml.p5.48xlarge"], {**env, "PYTHONPATH": CHECKOUT})
    assert res.returncode == 1, res.stderr[-4000:]
    r = json.loads(res.stdout)
    e = r["environment"]
    assert r["result"] == "fail" and r["failure"]["stage"] == "nccl"
    assert e["ok"] is False and all(v.get("NCCL_NET_PLUGIN") == "none" for v in e["effective"].values())
    assert any(p.startswith("NCCL_NET_PLUGIN=none is set in the job but `hpq nccl-env ml.p5.48xlarge` does not set "
                            "it; inherited from the environment the job was launched from") for p in e["problems"])
    assert leftovers(r["run_id"], res) == []
