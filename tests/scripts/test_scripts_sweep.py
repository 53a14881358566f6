"""run-nccl-test --sweep through its two launch paths, on a stand-in cluster whose link speeds we set.

Stand-ins (tests/fake_fabric.py): srun, mpirun + nccl-tests (their real output lines and refusals),
scontrol and sinfo for a cluster of N nodes; a pair runs at its slower node's speed. Real: the
launcher, the worker probe and transport function (on a fake node root), the schedule, the
per-pair processes, timeouts and process-group kills, the parser, the statistics, the files and
the exit codes. The real srun-per-pair launch with gloo is in test_scripts_slurm.py.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from hpq.scripts import nccl_sweep
from hpq.scripts.sweep import FAILED, OK, TIMEOUT, WRONG, PairResult
from tests import fake_fabric

DATA = Path(__file__).parents[1] / "data" / "nccl"


def run_sweep(args: list[str], env: dict, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpq.scripts.run_nccl_test", "--sweep", *args], env=env,
                          cwd=str(cwd), capture_output=True, text=True, timeout=timeout)


def fake_binary(tmp_path: Path) -> str:
    exe = tmp_path / "all_reduce_perf"  # mpirun (the stand-in) plays it; run directly it would fail
    exe.write_text("#!/bin/sh\nexit 98\n")
    exe.chmod(0o755)
    return str(exe)


def overlapping(records: list[dict]) -> list[tuple[dict, dict]]:
    ends = {tuple(r["hosts"]): r for r in records if r["event"] == "end"}
    spans = [(r, ends[tuple(r["hosts"])]) for r in records if r["event"] == "start"]
    return [(a[0], b[0]) for i, a in enumerate(spans) for b in spans[i + 1:]
            if a[0]["start"] < b[1]["end"] and b[0]["start"] < a[1]["end"]]


def test_nccl_tests_sweep_names_the_slow_node(tmp_path):
    """4 p5 nodes over EFA, node-3's link at a fifth of the others: nccl-tests pairs through mpirun name it."""
    speeds = {"node-1": 390.0, "node-2": 400.0, "node-3": 80.0, "node-4": 395.0}
    env = fake_fabric.cluster_env(tmp_path, speeds)
    res = run_sweep(["--binary", fake_binary(tmp_path), "--instance-type", "p5.48xlarge", "--output", "json"], env,
                    tmp_path)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(res.stdout)  # stdout is the JSON object alone; progress went to stderr
    assert "# round 1/3" in res.stderr and "SLOW node-3" in res.stderr
    assert doc["slow_nodes"] == ["node-3"] and doc["mode"] == "nccl-tests" and doc["transport"] == "efa-rdma"
    assert doc["size_bytes"] == 256 << 20 and doc["rounds"] == 3 and len(doc["pairs"]) == 6
    assert {frozenset(p["nodes"]) for p in doc["pairs"]} == {frozenset((a, b)) for a in speeds for b in speeds
                                                               if a < b}
    assert doc["scores"]["node-3"] == 80.0 and doc["scores"]["node-1"] == 390.0
    assert {n["name"]: n["partners"] for n in doc["nodes"]} == dict.fromkeys(speeds, 3)
    assert [len(doc["evidence"]["node-3"])] == [3]
    assert doc["actions"]["node-3"][0] == ('scontrol update NodeName=node-3 State=DRAIN '
                                           'Reason="hpq sweep: 80.00 GB/s vs median 390.00"')
    assert doc["actions"]["node-3"][1] == "sbatch --exclude=node-3"
    # each pair: mpirun with a two-host hostfile, every GPU of both (8 per p5), one 256 MB size
    calls = [c for c in fake_fabric.calls(tmp_path) if c["event"] == "start"]
    assert len(calls) == 6 and all(c["tool"] == "mpirun" and len(c["hosts"]) == 2 and c["np"] == 16 for c in calls)
    argv = calls[0]["argv"]
    assert argv[argv.index("-b") + 1] == argv[argv.index("-e") + 1] == str(256 << 20)
    assert "--allow-run-as-root" in argv and "FI_PROVIDER" in calls[0]["exported"]
    assert calls[0]["env"]["FI_EFA_USE_DEVICE_RDMA"] == "1"
    # pairs of a round ran at the same time, and never two pairs on one node at once
    both = overlapping(fake_fabric.calls(tmp_path))
    assert both, "the pairs of a round did not overlap"
    assert all(not set(a["hosts"]) & set(b["hosts"]) for a, b in both)
    saved = json.loads(Path(doc["result"]).read_text())
    assert saved["slow_nodes"] == ["node-3"] and Path(doc["pairs"][0]["log"]).exists()
    assert Path(doc["pairs"][0]["log"]).with_suffix(".hosts").read_text() == "".join(
        f"{h} slots=8\n" for h in doc["pairs"][0]["nodes"])


def test_healthy_cluster_names_none(tmp_path):
    speeds = {f"node-{i}": bw for i, bw in enumerate([401.0, 388.0, 395.0, 410.0, 392.0], 1)}
    env = fake_fabric.cluster_env(tmp_path, speeds, seconds=0.1)
    res = run_sweep(["--binary", fake_binary(tmp_path), "--instance-type", "p5.48xlarge"], env, tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "PASS: no slow node among 5" in res.stdout and "SLOW" not in res.stdout
    table = [line.split() for line in res.stdout.splitlines() if line.startswith("node-")]
    assert len(table) == 5 and all(row[2:] == ["4", "ok"] for row in table)


def test_builtin_sweep_srun_pairs_with_a_hung_node(tmp_path):
    """Built-in benchmark: srun -N 2 -w A,B per pair, each with its own rendezvous; node-2 never answers, so its
    pairs time out (stopped, not waited for) and are the evidence that names it."""
    speeds = {f"node-{i}": 3.0 for i in range(1, 6)}
    env = fake_fabric.cluster_env(tmp_path, speeds, efa=False, hang=["node-2"])
    env["MASTER_ADDR"] = "10.9.9.9"  # left over in the user's shell: a pair must not rendezvous there
    res = run_sweep(["--builtin", "--python", sys.executable, "--instance-type", "g5.16xlarge", "--pair-timeout",
                     "2", "--output", "json"], env, tmp_path)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["slow_nodes"] == ["node-2"] and doc["mode"] == "built-in" and doc["transport"] == "tcp"
    assert doc["size_bytes"] == 1 << 20 and doc["rounds"] == 5  # the probed worker has no GPU: gloo's size
    timed_out = [p for p in doc["pairs"] if p["status"] == TIMEOUT]
    assert len(timed_out) == 4 and all("node-2" in p["nodes"] for p in timed_out)
    assert all(p["seconds"] < 2 + 11 for p in timed_out)
    assert doc["failed_pairs"] == 4 and doc["scores"]["node-2"] == 0.0
    assert all(doc["scores"][n] == 3.0 for n in speeds if n != "node-2")
    starts = [c for c in fake_fabric.calls(tmp_path) if c["event"] == "start"]
    assert len(starts) == 10 and all(c["tool"] == "srun" for c in starts)
    for c in starts:
        argv = c["argv"]
        assert argv[argv.index("-N") + 1] == "2" and argv[argv.index("-w") + 1] == ",".join(c["hosts"])
        assert argv[argv.index("--ntasks-per-node") + 1] == "1"  # g5.16xlarge: 1 GPU
        # srun --time: Slurm's own backstop, the pair timeout in whole minutes plus one
        assert c["time_limit"] == "2" and c["MASTER_ADDR"] is None  # each rank derives it from the step
    ports = [c["MASTER_PORT"] for c in starts]
    assert len(set(ports)) == len(ports), "two pairs shared a rendezvous port"
    assert "TIMEOUT after" in res.stderr and "node-2" in res.stderr
    # the hung stand-ins were stopped with their process groups
    hung = [c["pid"] for c in starts if "node-2" in c["hosts"]]
    assert len(hung) == 4 and not any(Path(f"/proc/{pid}").exists() for pid in hung)


def test_pairs_at_once_runs_each_pair_alone_and_keeps_a_throttled_figure(tmp_path):
    """--pairs-at-once 1 (what the rehearsal passes: its nodes share CPUs): no two pairs overlap, the verdict is
    the same. node-3's link at 30 Mbit/s (0.00375 GB/s) prints as busbw 0.00; its score comes from the time
    column instead, so the evidence and the drain reason show the figure, not a zero."""
    speeds = {"node-1": 0.45, "node-2": 0.5, "node-3": 0.00375, "node-4": 0.48}
    env = fake_fabric.cluster_env(tmp_path, speeds, efa=False, seconds=0.2)
    res = run_sweep(["--builtin", "--python", sys.executable, "--instance-type", "g5.16xlarge", "--pairs-at-once",
                     "1", "--output", "json"], env, tmp_path)
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["slow_nodes"] == ["node-3"] and len(doc["pairs"]) == 6
    assert abs(doc["scores"]["node-3"] - 0.00375) < 0.00375 * 0.01
    for p in doc["pairs"]:  # a pair at its slower node's speed; to 1% where the printed busbw was 0.00
        slower = min(speeds[n] for n in p["nodes"])
        assert abs(p["busbw_gbps"] - slower) <= slower * 0.01, p
    assert 'Reason="hpq sweep: 0.0037 GB/s vs median 0.45"' in doc["actions"]["node-3"][0]
    assert "node-3 + node-4: 0.0037 GB/s" in res.stderr  # live progress, two significant digits
    starts = [c for c in fake_fabric.calls(tmp_path) if c["event"] == "start"]
    assert len(starts) == 6 and overlapping(fake_fabric.calls(tmp_path)) == []


def test_pairs_at_once_a_waiting_pair_respects_the_budget(tmp_path):
    """A pair that waits for a slot starts only while the budget has a pair timeout (or 30 s) left."""
    env = fake_fabric.cluster_env(tmp_path, {f"node-{i}": 10.0 for i in range(1, 5)}, seconds=1.5)
    res = run_sweep(["--binary", fake_binary(tmp_path), "--instance-type", "p4d.24xlarge", "--budget", "2",
                     "--pair-timeout", "2", "--pairs-at-once", "1", "--output", "json"], env, tmp_path)
    doc = json.loads(res.stdout)
    assert [p["status"] for p in doc["pairs"]] == ["ok"] + ["skipped"] * 5, doc["pairs"]
    assert len(fake_fabric.calls(tmp_path)) == 2  # one pair, start and end


def test_budget_stops_starting_rounds(tmp_path):
    speeds = {f"node-{i}": 10.0 for i in range(1, 5)}
    env = fake_fabric.cluster_env(tmp_path, speeds, seconds=1.5)
    res = run_sweep(["--binary", fake_binary(tmp_path), "--instance-type", "p4d.24xlarge", "--budget", "3",
                     "--pair-timeout", "2", "--output", "json"], env, tmp_path)
    doc = json.loads(res.stdout)
    assert [p["status"] for p in doc["pairs"]].count("skipped") == 4
    assert all(p["status"] == "ok" for p in doc["pairs"] if p["round"] == 1)
    assert res.returncode == 0 and any("budget" in n for n in doc["notes"])
    assert len(fake_fabric.calls(tmp_path)) == 4  # two pairs, start and end


def test_default_nodes_come_from_sinfo_and_salloc(tmp_path):
    """Outside an allocation with no NODES: every idle node, through salloc (the stand-in refuses, exit 99)."""
    env = fake_fabric.cluster_env(tmp_path, {f"node-{i}": 1.0 for i in range(1, 7)})
    for k in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST"):
        env.pop(k)
    res = run_sweep(["--output", "json"], env, tmp_path)
    assert res.returncode == 99 and res.stdout == ""
    assert "+ salloc -N 6 -J hpq-nccl-test --exclusive" in res.stderr
    res = run_sweep(["--dry-run"], env, tmp_path)
    assert res.returncode == 0 and "would run: salloc -N 6" in res.stdout


def test_dry_run_lists_every_pair(tmp_path):
    env = fake_fabric.cluster_env(tmp_path, {f"node-{i}": 1.0 for i in range(1, 4)}, efa=False)
    res = run_sweep(["--builtin", "--python", sys.executable, "--dry-run"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stdout.splitlines() if line.startswith("would run round")]
    assert len(lines) == 3  # 3 nodes: 3 rounds of one pair, one node sits out each
    for line in lines:
        argv = shlex.split(line.split(": ", 1)[1])
        assert argv[:5] == ["srun", "-N", "2", "--ntasks-per-node", "1"] and "-w" in argv
    assert not (tmp_path / "record").exists()


def test_bad_usage_is_one_line_exit_2(tmp_path):
    env = fake_fabric.cluster_env(tmp_path, {"node-1": 1.0, "node-2": 1.0})
    for args in (["1"], ["--launcher", "local"], ["--op", "all_gather"], ["--sweep-size", "lots"],
                 ["--pair-timeout", "0"], ["--pairs-at-once", "0"], ["--expect", "none"]):
        res = run_sweep(args, env, tmp_path)
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "run-nccl-test: error:" in res.stderr, res.stderr
    res = subprocess.run([sys.executable, "-m", "hpq.scripts.run_nccl_test", "--output", "json"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "only goes with --sweep" in res.stderr
    res = subprocess.run([sys.executable, "-m", "hpq.scripts.run_nccl_test", "--pairs-at-once", "1"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--pairs-at-once only goes with --sweep" in res.stderr
    # an allocation of one node: the sweep has nothing to pair (exit 1, one line)
    env["SLURM_JOB_NODELIST"] = "node-1"
    res = run_sweep([], env, tmp_path)
    assert res.returncode == 1 and "needs at least 2 nodes" in res.stderr and "Traceback" not in res.stderr


def test_pair_status_from_log(tmp_path):
    """Evidence from one pair's log and exit status: ok, wrong data, a crash with or without rows."""
    good = (DATA / "h200x2_nccl_baseline_allreduce.txt").read_text()
    cases = [(good, 0, OK), (good.replace("    0.00      0    10.12", "    0.00      3    10.12", 1), 0, WRONG),
             (good, 3, FAILED), ("node-1: Test NCCL failure common.cu:1279 'unhandled system error'\n", 1, FAILED),
             ("", 0, FAILED)]
    for i, (text, rc, want) in enumerate(cases):
        log = tmp_path / f"{i}.log"
        log.write_text(text)
        res = nccl_sweep.judge_pair(PairResult(1, ("a", "b"), OK, exit_status=rc), str(log))
        assert res.status == want, (i, res)
    res = nccl_sweep.judge_pair(PairResult(1, ("a", "b"), OK, exit_status=0), str(tmp_path / "0.log"))
    assert res.busbw_gbps == 349.95


def test_pair_logs_that_cannot_be_a_measurement(tmp_path):
    """Broken twins of a healthy pair log (the real 2x H200 log): an impossible busbw, a log cut before its summary,
    a second run appended. Each is a failed pair (evidence against its nodes), never a score; the network the
    log names is kept for the sweep's transport check."""
    good = (DATA / "h200x2_nccl_baseline_allreduce.txt").read_text()
    row = next(ln for ln in good.splitlines() if ln.lstrip().startswith("1073741824 "))
    busbw = row.split()[7]
    cases = {
        "inf": (good.replace(row, row.replace(" " + busbw + " ", " inf ", 1)), "impossible values"),
        "nan #wrong": (good.replace(row, row[:row.rstrip().rindex(" ")] + " nan"), "impossible values"),
        "cut": (good[:good.index("Avg bus bandwidth")].rsplit("\n", 3)[0] + "\n", "before its summary"),
        "appended": (good + good[:good.index(row)], "before its summary"),
        "two runs": (good + good, "holds 2 runs"),
    }
    for name, (text, note) in cases.items():
        log = tmp_path / "pair.log"
        log.write_text(text)
        res = nccl_sweep.judge_pair(PairResult(1, ("a", "b"), OK, exit_status=0), str(log))
        assert res.status == FAILED and note in res.note, (name, res)
    log.write_text("h:1:2 [0] NCCL INFO Using network Socket\n" + good)
    res = nccl_sweep.judge_pair(PairResult(1, ("a", "b"), OK, exit_status=0), str(log))
    assert res.status == OK and res.transport == "socket"


def test_ctrl_c_stops_running_pairs(tmp_path):
    import signal
    import time

    env = fake_fabric.cluster_env(tmp_path, {f"node-{i}": 5.0 for i in range(1, 5)}, hang=["node-1", "node-2"])
    proc = subprocess.Popen([sys.executable, "-m", "hpq.scripts.run_nccl_test", "--sweep", "--binary",
                             fake_binary(tmp_path), "--instance-type", "p4d.24xlarge"], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(fake_fabric.calls(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    pids = [c["pid"] for c in fake_fabric.calls(tmp_path) if c["event"] == "start"]
    assert pids and not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_stand_in_prints_what_nccl_tests_2_19_6_prints():
    """The stand-in's nccl-tests lines against a real all_reduce_perf 2.19.6 log (tests/data/nccl): the same
    fixed lines, the same column layout of a result row, rank lines of the same form."""
    import re

    real = (DATA / "h100x1_nccl-tests_all_reduce_perf.txt").read_text().splitlines()
    mine = fake_fabric.nccl_tests_output(["node-1", "node-2"], 8, ["-b", "268435456", "-e", "268435456", "-n", "20",
                                                                    "-w", "1"], 300.0, 0, {}).splitlines()
    assert mine[:2] == real[:2]
    header = [i for i, line in enumerate(real) if line.startswith("#       size")][0]
    assert mine[mine.index(real[header]) - 1: mine.index(real[header]) + 2] == real[header - 1: header + 2]

    def ends(line: str) -> list[int]:
        return [m.end() for m in re.finditer(r"\S+", line)]

    assert ends(next(x for x in mine if not x.startswith("#"))) == ends(real[header + 2])
    rank = re.compile(r"^#  Rank +\d+ Group +\d+ Pid +\d+ on +\S+ device +\d+ \[[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\] ")
    assert rank.match(real[5]) and sum(1 for x in mine if rank.match(x)) == 16
    masked = [re.sub(r"\d+(\.\d+)?", "N", x) for x in real if x.startswith(("# Out of", "# Avg", "# Collective"))]
    assert masked == [re.sub(r"\d+(\.\d+)?", "N", x) for x in mine if x.startswith(("# Out of", "# Avg",
                                                                                        "# Collective"))]
