"""Teardown that is true when it is printed (issue 21, item 6), below the level of a whole rehearsal.

``procs.stop`` must leave no process of its set in the process table when it returns: not
running, not exiting, not a zombie (``ps`` lists zombies, so "still alive" to a user). The trees
here are made to be hard: a process that ignores TERM, one that forks a new child when it gets
TERM (a pid list taken once misses that child: the broken twin shows it), and daemons that detach
(double fork), which go to the subreaper instead of PID 1 and must be reaped by it.

Each case runs in a child interpreter (``harness``), which is the subreaper, so pytest itself
never becomes one. The namespace cases need root (CI runs as root) but start no daemon: they use
``unshare`` and ``sleep`` only, so they need not take the daemons lock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hpq.rehearsal import procs, state

# A process tree that resists: the top ignores TERM and, on TERM, forks one more sleeper; a detached
# daemon (double fork, its parent gone: re-parented to the nearest subreaper) that also ignores TERM.
RESISTANT_TREE = textwrap.dedent("""
    trap 'sleep 300 & echo late $! >&2' TERM
    sh -c 'trap "" TERM; sleep 300 & exec sleep 301' &
    (setsid sh -c 'trap "" TERM; exec sleep 302' &) &
    sleep 0.3
    echo ready
    while :; do sleep 0.05; done
""")

HARNESS = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from hpq.rehearsal import procs
    mode = sys.argv[1]
    subreaper = procs.become_subreaper()
    top = subprocess.Popen(["sh", "-c", sys.argv[2]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    assert top.stdout.readline().strip() == b"ready"
    time.sleep(0.2)
    first = procs.descendants(os.getpid())
    if mode == "once":  # the broken twin: the pids known at the start, never searched again
        left = procs.stop(lambda: set(first), term_wait=1, kill_wait=1, gone_wait=1)
    else:
        left = procs.stop(lambda: procs.descendants(os.getpid()), term_wait=1, kill_wait=2, gone_wait=5)
    # what the process table holds of anything seen, AT THE MOMENT stop returned (zombies included)
    now = [str(p) for p in first | left if procs.exists(p)] + [str(p) for p in procs.descendants(os.getpid())]
    print(json.dumps({"subreaper": subreaper, "seen": [str(p) for p in first], "left": [str(p) for p in left],
                      "in_table": sorted(set(now))}))
""")


def harness(mode: str, tree: str = RESISTANT_TREE) -> dict:
    res = subprocess.run([sys.executable, "-c", HARNESS, mode, tree], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.splitlines()[-1])


def test_stop_leaves_nothing_in_the_process_table_not_even_a_zombie():
    out = harness("search")
    assert out["subreaper"] is True
    assert len(out["seen"]) >= 4, out  # sh, the trap-less sh, sleepers, the detached daemon
    assert out["left"] == [] and out["in_table"] == [], out


def test_broken_twin_a_pid_list_taken_once_misses_what_teardown_forks():
    """The same tree with the set never searched again: the child forked on TERM survives it."""
    out = harness("once")
    assert any(p.startswith("sleep") for p in out["in_table"]), out
    # and the search of the real stop takes the survivors down (they are this harness's descendants)


@pytest.mark.root
def test_in_namespaces_finds_a_process_by_its_network_namespace_only(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("needs root (unshare --net); CI runs the suite as root")
    proc = subprocess.Popen(["unshare", "--net", "sleep", "60"])
    try:
        for _ in range(100):
            ino = procs.ns_inode(f"/proc/{proc.pid}/ns/net")
            if ino and ino != procs.ns_inode("/proc/self/ns/net"):
                break
            time.sleep(0.02)
        found = procs.in_namespaces(net={ino})
        assert {p.pid for p in found} == {proc.pid}
        assert procs.in_namespaces(net={procs.ns_inode("/proc/self/ns/net")}) - found  # the host's: others
        left = procs.stop(lambda: procs.in_namespaces(net={ino}), term_wait=2, kill_wait=2, gone_wait=2)
        proc.wait(timeout=5)  # pytest is its parent here: it reaps, and then the entry is gone
        assert left == set() or all(not procs.running(p) for p in left)
        assert procs.stat(proc.pid) is None
    finally:
        proc.kill()
        proc.wait()


def test_a_recycled_pid_is_not_taken_for_the_process_it_was():
    me = procs.identify(os.getpid())
    assert me is not None and procs.exists(me) and procs.running(me)
    other = procs.Proc(me.pid, me.start + 1, me.comm)  # same pid, another start time: another process
    assert not procs.exists(other) and not procs.running(other)


def _state(tmp_path: Path, run_id: str = "abcdef") -> state.RunState:
    work = tmp_path / f"hpq-rehearse-{run_id}-x"
    (work / "nodes").mkdir(parents=True)
    return state.RunState(run_id, "slurm-gpu", 1, 0.0, str(work), str(tmp_path / "logs" / run_id),
                              nodes=[state.NodeState("worker-1", f"hpq-{run_id}-worker-1", f"hpq{run_id}n0")])


@pytest.mark.daemons
@pytest.mark.root
def test_teardown_stops_the_processes_of_a_node_namespace_and_checks_everything_gone(tmp_path, monkeypatch):
    """A node made the way the rehearsal makes one (a named netns, a veth end, a process in it that
    ignores TERM and forks on it): teardown returns [] only when none of it is left."""
    if os.geteuid() != 0:
        pytest.fail("needs root (ip netns, veth); CI runs the suite as root")
    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(state, "TERM_WAIT", 1.0)
    run_id = os.urandom(3).hex()
    st = _state(tmp_path, run_id)
    n = st.nodes[0]
    subprocess.run(["ip", "netns", "add", n.netns], check=True)
    subprocess.run(["ip", "link", "add", n.host_iface, "type", "veth", "peer", "name", n.host_iface + "p",
                    "netns", n.netns], check=True)
    st.save()
    node = subprocess.Popen(["ip", "netns", "exec", n.netns, "sh", "-c", RESISTANT_TREE],
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert node.stdout is not None and node.stdout.readline().strip() == b"ready"
        members = state.node_processes(st)
        assert len(members) >= 4
        problems = state.teardown(st)
        node.wait(timeout=5)  # the top is pytest's child; every other one was re-parented and reaped by PID 1
        assert problems == [], problems
        assert [p for p in members if procs.exists(p) and p.pid != node.pid] == []
        assert not os.path.exists(f"/run/netns/{n.netns}") and not os.path.exists(f"/sys/class/net/{n.host_iface}")
        assert not Path(st.workdir).exists() and not st.path.exists()
        assert state.teardown(st) == []  # idempotent
    finally:
        node.kill()
        subprocess.run(["ip", "netns", "del", n.netns], capture_output=True)
        subprocess.run(["ip", "link", "del", n.host_iface], capture_output=True)


def test_teardown_names_what_it_cannot_remove_and_keeps_the_state_file(tmp_path, monkeypatch):
    """A mount under the run's work directory that is busy is detached lazily; a directory that cannot go
    is named. Twin: a process in the node's namespace that cannot be stopped in time (stop is made to give
    up at once) is named with its pid, and the state file stays for `hpq rehearse down`."""
    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(state, "REMOVE_WAIT", 0.5)
    st = _state(tmp_path)
    st.save()
    ghost = procs.Proc(os.getpid(), procs.identify(os.getpid()).start, "slurmd")
    monkeypatch.setattr(state.procs, "stop", lambda *a, **k: {ghost})
    problems = state.teardown(st)
    assert problems and problems[0].startswith(f"process slurmd (pid {os.getpid()}): still running")
    assert any("kept: something of the run still uses it" in p for p in problems)
    assert st.path.exists() and Path(st.workdir).exists()


def test_a_run_id_is_claimed_once_so_concurrent_rehearsals_never_share_one(tmp_path, monkeypatch):
    """Two rehearsals that drew the same run id: the second's claim fails (it draws again), the first's
    record is untouched."""
    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "state")
    first, second = _state(tmp_path), _state(tmp_path / "b")
    assert first.claim() is True
    assert second.claim() is False
    assert state.RunState.load(first.path) == first


def test_a_rehearsal_whose_teardown_leaves_something_fails_and_says_what(tmp_path, monkeypatch):
    """The checks passed but teardown could not remove everything: exit 1, result fail, the failure names
    stage teardown and each item, and the "removed" line is not printed. Twin: a clean teardown passes."""
    import io

    from hpq.rehearsal import report, run
    from hpq.rehearsal.stages import network

    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(run.procs, "become_subreaper", lambda: True)  # pytest must not become one
    for left in (["process slurmd (pid 4242): still running after TERM and KILL (state D)"], []):
        seen: list = []
        monkeypatch.setattr(state, "teardown", lambda st, seen=seen, left=left, **kw: seen.append(kw) or list(left))
        err = io.StringIO()
        r = run.Rehearsal(run.Options(), run.Progress(err))

        def stages(r=r) -> None:
            r.state = _state(tmp_path / r.run_id, r.run_id)
            r.state.save()
            network.push_teardown(r.stack, r.state, r.say, str(tmp_path / "logs"))  # as stage network does

        monkeypatch.setattr(r, "_stages", stages)
        result, code = r.execute()
        assert seen == [{"own_children": True}]  # the run tears down its own descendants too
        if left:
            assert code == 1 and result["result"] == "fail" and result["teardown"]["ok"] is False
            assert result["failure"]["stage"] == "teardown" and left[0] in result["failure"]["cause"]
            assert "removed" not in err.getvalue() and "left behind: " + left[0] in err.getvalue()
            text = io.StringIO()
            report.emit(result, "table", out=io.StringIO(), err=text)
            assert text.getvalue().startswith("hpq: error: rehearsal failed at stage teardown: left behind: process")
        else:
            assert code == 0 and result["result"] == "pass" and result["teardown"] == {
                "ok": True, "left": [], "seconds": result["teardown"]["seconds"]}
            assert "every process, mount, namespace, link and temp directory removed" in err.getvalue()


def test_the_suites_exit_check_catches_a_process_left_behind(tmp_path):
    """The check tests/rehearsal/test_rehearse.py makes of every rehearsal can fail: a command that exits while a
    detached child of it still runs (what a teardown that reports done too early looks like) is caught,
    and that child only, not the processes of anything else on the host."""
    from tests.rehearsal.test_rehearse import leftovers, watched

    res = watched(["sh", "-c", "setsid sleep 30 </dev/null >/dev/null 2>&1 & sleep 0.5; echo started"],
                  dict(os.environ), run_id="f0f0f0")
    left = leftovers("f0f0f0", res)
    for (pid, start), comm in res.watch.seen.items():  # stop the sleeper: by its pid and start time only
        p = procs.Proc(pid, start, comm)
        if procs.running(p):
            os.kill(pid, 9)
    assert res.stdout.strip() == "started"
    assert len(left) == 1 and left[0].startswith("process sleep (pid "), left
