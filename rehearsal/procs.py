"""Which processes belong to a rehearsal, and stopping them until ``/proc`` shows them gone.

A node's processes are found by namespace, not by name or by a pid list taken once: every process
whose network or mount namespace is one of the node's (``state.node_processes`` says which those
are). That set includes what the lifecycle's service manager started
(slurmd, slurmctld, munged, sshd), what they forked, the IMDS stand-in (``ip netns exec``), every
``nsenter`` the rehearsal ran on the node, and whatever a ``hpq rehearse shell`` left running.
While the rehearsal's own process runs, it is the *child subreaper* of everything it starts
(``prctl(PR_SET_CHILD_SUBREAPER)``, proc(5)/prctl(2)): daemons that detach are re-parented to it,
not to PID 1, so it can reap them itself and their ``/proc`` entries vanish at once.

Stopping is TERM, a bounded wait, KILL, a bounded wait, then a wait until no process of the set
is in ``/proc`` at all (exited *and* reaped: a zombie still shows in ``ps``). The set is searched
again at every turn, so a process forked during the teardown is caught too. A process is known by
(pid, start time) so a recycled pid is never taken for one of ours.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


@dataclass(frozen=True)
class Proc:
    pid: int
    start: int  # /proc/PID/stat field 22 (clock ticks after boot): with the pid, one process for good
    comm: str = ""

    def __str__(self) -> str:
        return f"{self.comm or '?'} (pid {self.pid})"


@dataclass(frozen=True)
class Stat:
    comm: str
    state: str
    ppid: int
    start: int


def stat(pid: int) -> Stat | None:
    """``/proc/PID/stat`` (None when the pid is not in the process table)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode(errors="replace")
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        f = raw[raw.rindex(")") + 2:].split()
        return Stat(comm, f[0], int(f[1]), int(f[19]))
    except (OSError, ValueError, IndexError):
        return None


def identify(pid: int) -> Proc | None:
    st = stat(pid)
    return Proc(pid, st.start, st.comm) if st else None


def exists(p: Proc) -> bool:
    """Still in the process table (running, exiting or a zombie not yet reaped)."""
    st = stat(p.pid)
    return st is not None and st.start == p.start


def running(p: Proc) -> bool:
    """Exists and has not exited (a zombie, ``Z``, or a dead task, ``X``, has)."""
    st = stat(p.pid)
    return st is not None and st.start == p.start and st.state not in ("Z", "X")


def ns_inode(path: str) -> int | None:
    """The inode of a namespace file (``/run/netns/NAME``, ``/proc/PID/ns/mnt``): the namespace's identity."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _ns_of(pid: str, kind: str) -> int | None:
    try:
        link = os.readlink(f"/proc/{pid}/ns/{kind}")  # "net:[4026532281]"
    except OSError:
        return None
    try:
        return int(link[link.index("[") + 1:link.index("]")])
    except ValueError:
        return None


def pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def in_namespaces(net: Iterable[int] = (), mnt: Iterable[int] = ()) -> set[Proc]:
    """Every process whose network namespace is one of ``net`` or mount namespace one of ``mnt``."""
    net, mnt = set(net), set(mnt)
    found: set[Proc] = set()
    if not net and not mnt:
        return found
    me = os.getpid()
    for pid in pids():
        if pid == me:
            continue
        s = str(pid)
        if _ns_of(s, "net") in net or _ns_of(s, "mnt") in mnt:
            p = identify(pid)
            if p is not None:
                found.add(p)
    return found


def descendants(root: int) -> set[Proc]:
    """Every process below ``root`` in the parent tree (with the subreaper set: all it ever started)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, Stat] = {}
    for pid in pids():
        st = stat(pid)
        if st is not None:
            stats[pid] = st
            children.setdefault(st.ppid, []).append(pid)
    out: set[Proc] = set()
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        st = stats[pid]
        out.add(Proc(pid, st.start, st.comm))
        todo += children.get(pid, [])
    return out


def become_subreaper() -> bool:
    """Make this process the reaper of every orphan among its descendants (Linux 3.4+); False if refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap(procs: Iterable[Proc]) -> None:
    """Collect those of ``procs`` that are this process's exited children (their /proc entries go)."""
    me = os.getpid()
    for p in procs:
        st = stat(p.pid)
        if st is None or st.start != p.start or st.ppid != me:
            continue
        try:
            os.waitpid(p.pid, os.WNOHANG)
        except ChildProcessError:
            pass


def stop(find: Callable[[], set[Proc]], term_wait: float = 5.0, kill_wait: float = 5.0,
         gone_wait: float = 10.0, poll: float = 0.05) -> set[Proc]:
    """TERM what ``find`` returns, KILL what still runs after ``term_wait``, then wait until none of it is in
    /proc. ``find`` is asked again every turn (new processes are stopped too). Returns what is still there
    when the waits are over (empty: every process of the set has exited and been reaped)."""
    seen: set[Proc] = set()
    signalled: dict[Proc, int] = {}

    def turn(sig: int) -> set[Proc]:
        seen.update(find())
        reap(seen)
        live = {p for p in seen if running(p)}
        for p in live:
            if signalled.get(p) != sig:
                signalled[p] = sig
                try:
                    os.kill(p.pid, sig)
                except ProcessLookupError:
                    pass
        return live

    for sig, wait in ((signal.SIGTERM, term_wait), (signal.SIGKILL, kill_wait)):
        deadline = time.monotonic() + wait
        while turn(sig) and time.monotonic() < deadline:
            time.sleep(poll)
        if not any(running(p) for p in seen):
            break
    deadline = time.monotonic() + gone_wait
    while True:  # exited; now out of the process table (reaped by us, or by their parent / PID 1)
        turn(signal.SIGKILL)
        left = {p for p in seen if exists(p)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(poll)
