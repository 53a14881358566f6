"""The rehearsal's teardown stack, its orchestration and single stages with their explicit inputs (no daemons).

What is real: signals (os.kill on this process), the stages' code, the NCCL report parser on real nccl-tests and
run-nccl-test output (tests/data/nccl, see its README for where each file comes from). Stand-ins: the
controller's shell answers ``scontrol -o show nodes`` with lines in scontrol's one-line format (slurm
scontrol(1), ``-o``/``--oneliner``; the same fields tests/fake_fabric.py prints).
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from hpq.rehearsal import plan, state
from hpq.rehearsal import run as run_mod
from hpq.rehearsal.stages import progress, slurm
from hpq.rehearsal.stages.base import Failure
from hpq.rehearsal.teardown import Interrupted, TeardownStack, signals_raise
from hpq.scripts import nccl_report
from tests.support import CHECKOUT

NCCL_DATA = Path(CHECKOUT) / "tests" / "data" / "nccl"

# ---------------------------------------------------------------------------- the teardown stack


def _recorder(stack: TeardownStack, done: list[str], *names: str, **kw) -> None:
    for name in names:
        stack.push(name, lambda name=name: done.append(name), **kw)


def test_undos_run_newest_first_once():
    stack, done = TeardownStack(), []
    _recorder(stack, done, "bridge", "moto", "node-1", "node-2")
    assert stack.close(failed=False) == []
    assert done == ["node-2", "node-1", "moto", "bridge"]
    assert stack.close(failed=True) == [] and len(done) == 4  # a second close undoes nothing twice


def test_a_failing_undo_is_reported_and_the_others_still_run():
    stack, done = TeardownStack(), []
    _recorder(stack, done, "first")
    stack.push("broken", lambda: 1 / 0)
    stack.push("leaky", lambda: ["mount /tmp/x: still mounted"])
    _recorder(stack, done, "last")
    problems = stack.close(failed=True)
    assert done == ["last", "first"]
    assert problems == ["mount /tmp/x: still mounted", "broken: ZeroDivisionError: division by zero"]


def test_undos_run_when_a_stage_raises():
    stack, done = TeardownStack(), []
    with pytest.raises(RuntimeError):
        try:
            _recorder(stack, done, "a", "b")
            raise RuntimeError("stage failed")
        finally:
            stack.close(failed=True)
    assert done == ["b", "a"]


def test_a_signal_mid_stage_still_unwinds_everything_and_one_during_unwinding_waits():
    """SIGTERM while a stage runs becomes Interrupted; the stack unwinds whole. A second SIGTERM sent by an undo
    is held back until the last undo has run (broken twin: the same undo without the stack's mask is cut off)."""
    stack, done = TeardownStack(), []
    _recorder(stack, done, "bridge")
    stack.push("signalled", lambda: os.kill(os.getpid(), signal.SIGTERM) or done.append("signalled"))
    _recorder(stack, done, "node")
    with pytest.raises(Interrupted) as first, signals_raise():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # never reached: the handler raises in the main thread
        finally:
            with pytest.raises(Interrupted) as second:  # delivered once the mask is lifted
                stack.close(failed=True)
            assert done == ["node", "signalled", "bridge"]
            assert second.value.signum == signal.SIGTERM
    assert first.value.signum == signal.SIGTERM
    twin, cut = [], False
    with signals_raise():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            twin.append("after")
        except Interrupted:
            cut = True
    assert cut and twin == []


def test_a_signal_during_unwinding_waits_with_other_threads_alive():
    """The rehearsal has other threads (SSH transports, progress): the kernel hands a process-directed signal to
    any thread that does not block it, and Python runs the handler in the main thread anyway, so a mask on the
    main thread alone does not hold it back (the full suite, with server threads alive, showed it). The undos
    still all run, and the signal comes after them."""
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, daemon=True)
    helper.start()
    try:
        stack, done = TeardownStack(), []
        _recorder(stack, done, "bridge")
        # the undo goes on for a while after the signal: time enough for a handler that was not held back to run
        stack.push("signalled", lambda: os.kill(os.getpid(), signal.SIGTERM) or time.sleep(0.3)
                   or done.append("signalled"))
        _recorder(stack, done, "node")
        with signals_raise(), pytest.raises(Interrupted):
            stack.close(failed=True)
        assert done == ["node", "signalled", "bridge"]
    finally:
        stop.set()
        helper.join()


def test_keep_skips_removals_runs_collections_and_the_kept_alternative():
    stack, done = TeardownStack(), []
    stack.push("state", lambda: done.append("removed"), when_kept=lambda: done.append("marked kept"))
    _recorder(stack, done, "moto")
    _recorder(stack, done, "logs", kept_too=True)
    _recorder(stack, done, "results", kept_too=True, only_if_failed=True)
    _recorder(stack, done, "passing logs", only_if_passed=True)
    stack.close(failed=False, keep=True)
    assert done == ["logs", "marked kept"]
    stack, done = TeardownStack(), []
    stack.push("state", lambda: done.append("removed"), when_kept=lambda: done.append("marked kept"))
    _recorder(stack, done, "results", kept_too=True, only_if_failed=True)
    _recorder(stack, done, "passing logs", only_if_passed=True)
    stack.close(failed=True)
    assert done == ["results", "removed"]


# ---------------------------------------------------------------------------- the orchestration


@pytest.fixture
def rehearsal(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(run_mod.procs, "become_subreaper", lambda: True)  # pytest must not become one
    err = io.StringIO()
    return run_mod.Rehearsal(run_mod.Options(), run_mod.Progress(err)), err


def test_a_failing_stage_is_attributed_its_findings_kept_and_the_undos_run(rehearsal):
    r, err = rehearsal
    done: list[str] = []

    def stages() -> None:
        r._stage("network", lambda: r.stack.push("bridge", lambda: done.append("bridge")))
        r._stage("aws", lambda: r.stack.push("moto", lambda: done.append("moto")))

        def nccl() -> None:
            raise Failure("nccl", "FAIL: 0 GB/s", node="controller", found={"nccl": {"outcome": "FAIL"}})
        r._stage("nccl", nccl)

    r._stages = stages
    result, code = r.execute()
    assert code == 1 and result["result"] == "fail" and done == ["moto", "bridge"]
    assert result["failure"]["stage"] == "nccl" and result["failure"]["node"] == "controller"
    assert result["nccl"] == {"outcome": "FAIL"} and result["nanogpt"] is None
    assert list(result["stages"]) == ["network", "aws", "nccl"]


def test_sigterm_mid_stage_exits_143_names_the_stage_and_unwinds(rehearsal):
    r, err = rehearsal
    done: list[str] = []

    def stages() -> None:
        r._stage("network", lambda: r.stack.push("bridge", lambda: done.append("bridge")))
        r._stage("lifecycle", lambda: os.kill(os.getpid(), signal.SIGTERM) or time.sleep(5))

    r._stages = stages
    before = signal.getsignal(signal.SIGTERM)
    result, code = r.execute()
    assert code == 128 + signal.SIGTERM and done == ["bridge"]
    assert result["failure"]["stage"] == "lifecycle" and result["failure"]["cause"] == "interrupted by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is given back


# ---------------------------------------------------------------------------- stage: slurm, its explicit input


class _Controller:
    """The controller's login shell as the stage uses it (validation.slurm.SshShell.run's signature)."""

    def __init__(self, answers: list[str]):
        self.answers, self.commands = answers, []

    def run(self, command, echo=None, timeout=None, on_stderr_line=None):
        self.commands.append(command)
        return 0, self.answers[min(len(self.commands), len(self.answers)) - 1], ""


class _Node:
    def __init__(self, root: Path):
        self.root = root

    def host_path(self, path: str) -> Path:
        return self.root / path.lstrip("/")


def _scontrol(states: dict[str, str]) -> str:
    return "".join(f"NodeName={n} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 NodeAddr={n} NodeHostName={n} "
                   f"State={s} Partitions=dev\n" for n, s in states.items())


def _plan() -> plan.Plan:
    p = plan.new_plan("a1b2c3", "slurm-gpu", 2, "ml.g5.xlarge", False, "10.201.7.0/24")
    plan.add_nodes(p, [("controller", plan.CONTROLLER, "ml.m5.xlarge", 1),
                           ("worker", plan.WORKER, "ml.g5.xlarge", 2)])
    return p


def test_slurm_stage_waits_for_every_worker_idle(tmp_path):
    p = _plan()
    w1, w2 = (n.hostname for n in p.worker_nodes)
    shell = _Controller([_scontrol({w1: "IDLE+CLOUD", w2: "DOWN*"}), _scontrol({w1: "IDLE", w2: "IDLE+CLOUD"})])
    said: list[tuple[str, str]] = []
    out = slurm.wait_slurm(slurm.SlurmInput(p, shell, _Node(tmp_path), 10), lambda who, m: said.append((who, m)))
    assert out.idle == [w1, w2] and len(shell.commands) == 2
    assert said == [("slurm", f"scontrol over SSH on the controller: 2/2 nodes idle ({w1}, {w2})")]


def test_slurm_stage_failure_names_the_node_state_and_controller_log(tmp_path):
    """Twin of the above: one worker stays down past the timeout."""
    p = _plan()
    w1, w2 = (n.hostname for n in p.worker_nodes)
    log = tmp_path / "var/log/slurm/slurmctld.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"error: Node {w2} not responding\n")
    shell = _Controller([_scontrol({w1: "IDLE", w2: "DOWN*"})])
    with pytest.raises(Failure) as exc:
        slurm.wait_slurm(slurm.SlurmInput(p, shell, _Node(tmp_path), 0.6), lambda who, m: None)
    f = exc.value
    assert (f.stage, f.node, f.log) == ("slurm", "controller", str(log))
    assert f"{w2} down" in f.cause and f.last_lines == [f"error: Node {w2} not responding"]
    assert f.found["slurm_nodes_idle"] == 1


# ---------------------------------------------------------------------------- progress of the long stages


def test_every_bandwidth_row_of_real_logs_is_a_progress_line_and_nothing_else_is():
    for name in ("h100x1_run-nccl-test_builtin.txt", "aws_2x_p5_eks_all_reduce_perf.txt",
                 "seed004_slurm_2x_g5.16xlarge_excerpt.txt"):
        text = (NCCL_DATA / name).read_text()
        rows = nccl_report.parse_text(text).rows
        said = [s for s in map(progress.nccl_row, text.splitlines()) if s]
        assert len(said) == len(rows) > 0, name
        last = rows[-1]
        assert said[-1].endswith(f"busbw {last.out_of_place.busbw_gbps:.2f} GB/s (out of place)")
    assert progress.nccl_row("#  size count type redop root time algbw busbw") is None
    assert progress.nccl_row("# Avg bus bandwidth    : 1.2") is None


def test_nanogpt_iterations_are_progress_lines():
    assert progress.nanogpt_iteration("iter 10: loss 3.1000 | 12.3 ms/iter | 1k tok/s") == \
        "iter 10: loss 3.1000 | 12.3 ms/iter | 1k tok/s"
    assert progress.nanogpt_iteration("0: iter 5: loss 4.1") == "iter 5: loss 4.1"  # srun --label
    assert progress.nanogpt_iteration("# result: /fsx/hpq-results/x.json") is None


def test_watch_says_at_most_one_line_a_second_and_never_stays_quiet():
    """A burst of 40 rows in 2 s gives about 2-3 lines, the newest; 2.5 s without rows give a still-running line."""
    said: list[tuple[float, str]] = []
    t0 = time.monotonic()
    with progress.Watch(lambda who, m: said.append((time.monotonic() - t0, m)), "nccl", progress.nccl_row,
                        every=1.0, quiet=1.0) as watch:
        for i in range(40):
            watch.on_line(f"  {1024 * (i + 1)}  {256 * (i + 1)}  float  sum  -1  10.0  0.50  0.60  0  10.0  0.5  0.6  0")
            time.sleep(0.05)
        burst = time.monotonic() - t0
        time.sleep(2.5)
    times = [t for t, _ in said]
    assert all(b - a >= 0.95 for a, b in zip(times, times[1:], strict=False)), said
    rows = [m for _, m in said if "busbw" in m]
    assert 2 <= len(rows) <= burst + 2 and rows[-1].startswith("40 KB:")  # the last row is never lost
    assert any(m.startswith("still running") for _, m in said)


def test_watch_is_silent_for_lines_it_does_not_pick():
    said: list[str] = []
    with progress.Watch(lambda who, m: said.append(m), "nccl", progress.nccl_row, every=0.1, quiet=60) as watch:
        for _ in range(5):
            watch.on_line("NCCL INFO Channel 00/02 : 0 1")
            time.sleep(0.05)
    assert said == []


def test_concurrent_lines_do_not_interleave():
    said: list[str] = []
    with progress.Watch(lambda who, m: said.append(m), "nanogpt", progress.nanogpt_iteration, every=0.0,
                        quiet=60) as watch:
        threads = [threading.Thread(target=lambda i=i: watch.on_line(f"iter {i}: loss 1")) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(said) == sorted(f"iter {i}: loss 1" for i in range(20))
