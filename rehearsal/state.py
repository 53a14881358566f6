"""What a rehearsal created, on disk, so it can be removed: by the run itself or by ``hpq rehearse down``.

The state file is written before each thing is created and updated after, so even a rehearsal
killed with SIGKILL leaves a record of everything it may have left. The processes of a node are
the processes in its namespaces (``node_processes``), whoever started them and whatever they are
called. A namespace is known by its inode only while something proves it is still the node's (its
name under /run/netns, the holder process identified by pid and start time, a process already
found in it): the kernel reuses the inode number of a namespace that is gone, so a number kept in
the state file alone could name another rehearsal's namespace.

Teardown is idempotent, verified and bounded (``teardown``): every process of every node is
stopped (TERM, KILL) and waited for until ``/proc`` no longer lists it; then the namespaces, the
veth links, the FSx stand-in mount and the bridge are removed and each removal is checked (the
host's mount table in ``/proc/self/mountinfo``, ``/sys/class/net``); then the run directory and the
state file go. What is still there when the deadline passes is named, one item each.

A state file is input like any other: read bounded (``MAX_STATE_BYTES``), checked field by field
(names must carry the run id, paths must be the run's own), and refused with one line (exit 2)
otherwise, so a damaged or foreign file can never make teardown remove something of someone else's.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import shutil
import subprocess
import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from hpq import atomic
from hpq.errors import UsageError
from hpq.rehearsal import netns, procs
from hpq.standins import fsx

STATE_DIR = Path(os.environ.get("HPQ_REHEARSE_STATE_DIR", "/run/hpq-rehearse"))
MAX_STATE_BYTES = 1 << 20  # a run with 16 workers writes about 6 kB
RUN_ID_RE = re.compile(r"[0-9a-f]{6}")
NODE_NAME_RE = re.compile(r"controller|(?:login|worker)-[1-9][0-9]{0,2}")
ROLES = ("", "controller", "worker", "login")
# Waits of the process stop (seconds): TERM, then KILL, then until reaped. Documented in docs/rehearse.md.
TERM_WAIT, KILL_WAIT, GONE_WAIT = 5.0, 5.0, 10.0
REMOVE_WAIT = 10.0  # links, mounts, directories: removal retried until this passes


class StateError(UsageError):
    """A state file hpq cannot trust (exit 2): it is named, never acted on."""


@dataclass
class NodeState:
    name: str
    netns: str
    host_iface: str
    holder_pid: int | None = None
    ip: str = ""
    hostname: str = ""
    role: str = ""
    holder_start: int | None = None  # the holder's start time (procs.Proc.start): a reused pid is not it


@dataclass
class RunState:
    run_id: str
    variant: str
    pid: int
    started: float
    workdir: str
    logdir: str
    bridge: str = ""
    subnet: str = ""
    fsx_export: str = ""
    keep: bool = False
    finished: bool = False
    ssh_key: str = ""
    nodes: list[NodeState] = field(default_factory=list)
    pid_start: int | None = None  # the owner's start time: a reused pid is not the owner
    cluster_name: str = ""  # hpq-rehearse-<run id>: what `hpq test` finds a kept rehearsal by (rehearsal/backend.py)
    worker_type: str = ""  # the workers' instance type (ml.*), the tests' judge reads it

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.run_id}.json"

    def claim(self) -> bool:
        """Write the first record, exclusively: False when a rehearsal with this run id is already recorded."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return False
        os.close(fd)
        self.save()
        return True

    def save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        atomic.write_file(self.path, json.dumps(asdict(self), indent=2) + "\n", mode=0o600)

    def node(self, name: str) -> NodeState | None:
        for n in self.nodes:
            if name in (n.name, n.hostname, n.ip):
                return n
        return None

    @classmethod
    def load(cls, path: Path) -> RunState:
        """Read and check one state file; StateError (one line naming it) when it cannot be trusted."""
        try:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_STATE_BYTES + 1)
        except OSError as exc:
            raise StateError(f"rehearsal state {path}: cannot read it: {exc.strerror or exc}") from None
        if len(raw) > MAX_STATE_BYTES:
            raise StateError(f"rehearsal state {path}: larger than {MAX_STATE_BYTES} bytes, not one hpq wrote")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise StateError(f"rehearsal state {path}: not JSON ({_short(exc)})") from None
        try:
            st = from_dict(data)
        except ValueError as exc:
            raise StateError(f"rehearsal state {path}: {exc}") from None
        if path.name != f"{st.run_id}.json":
            raise StateError(f"rehearsal state {path}: records run {st.run_id}, but the file is named otherwise")
        return st


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def _typed(data: dict[str, Any], key: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
    value = data[key]
    if value is None and optional:
        return None
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, (int, float)))
    if not ok:
        raise ValueError(f"{key!r} is {type(value).__name__}, expected {getattr(kind, '__name__', kind)}")
    return value


def _object(data: Any, cls: type, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not an object")
    names = {f.name for f in fields(cls)}
    unknown = sorted(str(k) for k in data if k not in names)
    if unknown:
        raise ValueError(f"{what} has unknown field(s) {', '.join(repr(u[:40]) for u in unknown[:3])}")
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    missing = sorted(required - set(data))
    if missing:
        raise ValueError(f"{what} lacks {', '.join(missing)}")
    return data


def _count(data: dict[str, Any], key: str) -> int | None:
    value = _typed(data, key, int, optional=True)
    if value is not None and not 0 < value < 1 << 63:
        raise ValueError(f"{key!r} {value} is out of range")
    return value


def _node_from(data: Any, run_id: str) -> NodeState:
    d = dict(_object(data, NodeState, "a node"))
    for key in ("name", "netns", "host_iface", "ip", "hostname", "role"):
        if key in d:
            _typed(d, key, str)
    for key in ("holder_pid", "holder_start"):
        if key in d:
            _count(d, key)
    n = NodeState(**d)
    if not NODE_NAME_RE.fullmatch(n.name):
        raise ValueError(f"node name {n.name[:40]!r} is not one a rehearsal gives")
    if n.netns != f"hpq-{run_id}-{n.name}":
        raise ValueError(f"node {n.name}: namespace {n.netns[:40]!r} is not hpq-{run_id}-{n.name}")
    if not re.fullmatch(rf"hpq{run_id}n[0-9]{{1,3}}", n.host_iface):
        raise ValueError(f"node {n.name}: link {n.host_iface[:40]!r} is not one of run {run_id}")
    if n.role not in ROLES:
        raise ValueError(f"node {n.name}: role {n.role[:40]!r}")
    if n.ip:
        try:
            ipaddress.IPv4Address(n.ip)
        except ValueError:
            raise ValueError(f"node {n.name}: address {n.ip[:40]!r}") from None
    if not re.fullmatch(r"(ip-[0-9]{1,3}(-[0-9]{1,3}){3})?", n.hostname):
        raise ValueError(f"node {n.name}: hostname {n.hostname[:40]!r}")
    return n


def _own_path(value: str, key: str, ok: bool) -> str:
    if value and (not ok or not os.path.isabs(value) or os.path.normpath(value) != value or "\0" in value):
        raise ValueError(f"{key} {value[:80]!r} is not a path of this run")
    return value


def from_dict(data: Any) -> RunState:
    """A RunState from parsed JSON; ValueError (saying which field) for anything a rehearsal never writes."""
    d = dict(_object(data, RunState, "the state"))
    run_id = _typed(d, "run_id", str)
    if not RUN_ID_RE.fullmatch(run_id):
        raise ValueError(f"run id {run_id[:40]!r} is not 6 hex digits")
    for key in ("variant", "workdir", "logdir", "bridge", "subnet", "fsx_export", "ssh_key", "cluster_name",
                "worker_type"):
        if key in d:
            _typed(d, key, str)
    for key in ("keep", "finished"):
        if key in d:
            _typed(d, key, bool)
    if _count(d, "pid") is None:
        raise ValueError("'pid' is null")
    if "pid_start" in d:
        _count(d, "pid_start")
    started = _typed(d, "started", (int, float))
    if not math.isfinite(started):
        raise ValueError(f"'started' {started} is not a time")
    nodes = _typed(d, "nodes", list) if "nodes" in d else []
    if len(nodes) > 64:
        raise ValueError(f"{len(nodes)} nodes, more than a rehearsal makes")
    d["nodes"] = [_node_from(n, run_id) for n in nodes]
    st = RunState(**d)
    if len({n.name for n in st.nodes}) != len(st.nodes):
        raise ValueError("a node name appears twice")
    workdir_ok = os.path.basename(st.workdir).startswith(f"hpq-rehearse-{run_id}-")
    _own_path(st.workdir, "workdir", workdir_ok)
    _own_path(st.logdir, "logdir", os.path.basename(st.logdir) == run_id)
    _own_path(st.fsx_export, "fsx_export", bool(st.workdir) and st.fsx_export == os.path.join(st.workdir, "fsx"))
    _own_path(st.ssh_key, "ssh_key", bool(st.workdir) and st.ssh_key.startswith(st.workdir + "/"))
    if st.cluster_name not in ("", f"hpq-rehearse-{run_id}"):
        raise ValueError(f"cluster name {st.cluster_name[:40]!r} is not hpq-rehearse-{run_id}")
    if st.worker_type and not re.fullmatch(r"ml\.[a-z0-9-]+\.[0-9a-z]+", st.worker_type):
        raise ValueError(f"worker type {st.worker_type[:40]!r} is not an instance type")
    if st.bridge not in ("", f"hpqbr-{run_id}"):
        raise ValueError(f"bridge {st.bridge[:40]!r} is not hpqbr-{run_id}")
    if st.subnet:
        try:
            ipaddress.IPv4Network(st.subnet)
        except ValueError:
            raise ValueError(f"subnet {st.subnet[:40]!r}") from None
    return st


def all_states(errors: list[str] | None = None) -> list[RunState]:
    """Every recorded rehearsal; files that cannot be trusted are skipped and described in ``errors``."""
    if not STATE_DIR.is_dir():
        return []
    out = []
    for p in sorted(STATE_DIR.glob("*.json")):
        try:
            out.append(RunState.load(p))
        except StateError as exc:
            if errors is not None:
                errors.append(str(exc))
    return out


def owner_alive(st: RunState) -> bool:
    """Whether the hpq process that made the rehearsal still runs (then it owns the teardown)."""
    if st.pid == os.getpid():
        return False
    me = procs.stat(st.pid)
    if me is None or me.state in ("Z", "X") or (st.pid_start is not None and me.start != st.pid_start):
        return False
    try:
        with open(f"/proc/{st.pid}/cmdline", "rb") as fh:
            cmd = fh.read()
    except OSError:
        return False
    return b"hpq" in cmd and b"rehearse" in cmd


def node_processes(st: RunState) -> set[procs.Proc]:
    """The processes of ``st``'s nodes now: those in a node's network namespace (by its name, or the holder's)
    and those in the mount namespace of any of them (the node's root)."""
    net: set[int] = set()
    for n in st.nodes:
        ino = procs.ns_inode(f"/run/netns/{n.netns}")
        if ino:
            net.add(ino)
        h = holder(n)
        if h is not None:
            ino = procs.ns_inode(f"/proc/{h.pid}/ns/net")
            if ino:
                net.add(ino)
    found = procs.in_namespaces(net=net)
    mnt = {ino for ino in (procs.ns_inode(f"/proc/{p.pid}/ns/mnt") for p in found) if ino}
    mnt.discard(procs.ns_inode("/proc/self/ns/mnt") or -1)  # `ip netns exec` and nsenter children may share ours
    mnt.discard(procs.ns_inode("/proc/1/ns/mnt") or -1)
    return found | procs.in_namespaces(mnt=mnt)


def holder(n: NodeState) -> procs.Proc | None:
    """The node's holder process, only if that pid is still the one the run started."""
    if not n.holder_pid:
        return None
    p = procs.identify(n.holder_pid)
    if p is None or (n.holder_start is not None and p.start != n.holder_start):
        return None
    if n.holder_start is None:  # an old record: trust the pid only inside the node's netns
        ino = procs.ns_inode(f"/run/netns/{n.netns}")
        if not ino or procs.ns_inode(f"/proc/{p.pid}/ns/net") != ino:
            return None
    return p


def teardown(st: RunState, keep_logs: bool = True, own_children: bool = False) -> list[str]:
    """Remove everything ``st`` records and check that it is gone; returns what is still there (empty: all gone).

    ``own_children``: also every descendant of this process (the rehearsal itself tearing down, as the
    subreaper of everything it started)."""
    problems: list[str] = []
    holders = {h for h in (holder(n) for n in st.nodes) if h is not None}

    def find() -> set[procs.Proc]:
        found = node_processes(st) | {h for h in holders if procs.exists(h)}
        if own_children:
            found |= procs.descendants(os.getpid())
        return found

    left = procs.stop(find, TERM_WAIT, KILL_WAIT, GONE_WAIT)
    for p in sorted(left, key=lambda p: p.pid):
        st_ = procs.stat(p.pid)
        how = (f"exited, but its parent (pid {st_.ppid}) has not reaped it" if st_ and st_.state == "Z"
               else f"still running after TERM and KILL (state {st_.state if st_ else '?'})")
        problems.append(f"process {p}: {how}")

    deadline = time.monotonic() + REMOVE_WAIT
    while True:
        remaining = _remove_rest(st, keep_logs, processes_left=bool(left))
        if not remaining or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    problems += remaining
    if not problems:
        st.path.unlink(missing_ok=True)
    return problems


def _mount_points() -> list[str]:
    """Mount points of this mount namespace (proc(5) mountinfo, field 5, octal escapes decoded)."""
    out = []
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) > 4:
                    out.append(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]),
                                      parts[4]).decode(errors="replace"))
    except OSError:
        pass
    return out


def _remove_rest(st: RunState, keep_logs: bool, processes_left: bool) -> list[str]:
    """One pass over namespaces, links, mounts and directories; what is still there afterwards."""
    problems: list[str] = []
    for n in st.nodes:
        if processes_left:  # the name is how a later `hpq rehearse down` finds what is left in it
            continue
        netns.delete_netns(n.netns)
        netns.delete_link(n.host_iface)
        if netns.netns_exists(n.netns):
            problems.append(f"network namespace {n.netns} is still there")
        if netns.link_exists(n.host_iface):
            problems.append(f"link {n.host_iface} (node {n.name}) is still there")
    if st.fsx_export:
        fsx.unmount_export(Path(st.fsx_export))
    if st.bridge:
        netns.delete_link(st.bridge)
        if netns.link_exists(st.bridge):
            problems.append(f"bridge {st.bridge} is still there")
    ours = [m for m in _mount_points() if (st.workdir and (m == st.workdir or m.startswith(st.workdir + "/")))
            or any(m == f"/run/netns/{n.netns}" for n in st.nodes)]
    for m in ours:
        subprocess.run(["umount", "-l", m], capture_output=True, timeout=30)
    ours = [m for m in _mount_points() if m in ours]
    problems += [f"mount {m} is still there" for m in ours]
    if st.workdir and os.path.lexists(st.workdir) and not ours and not processes_left:
        _rmtree(Path(st.workdir))
        if os.path.lexists(st.workdir):
            problems.append(f"directory {st.workdir} could not be removed")
    elif st.workdir and os.path.lexists(st.workdir):
        problems.append(f"directory {st.workdir} kept: something of the run still uses it")
    if not keep_logs and st.logdir and os.path.isdir(st.logdir):
        shutil.rmtree(st.logdir, ignore_errors=True)
    return problems


def _rmtree(path: Path) -> None:
    # Overlay work dirs hold a root-only 000 "work" directory: make everything removable first.
    for attempt in range(3):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        for dirpath, dirnames, _ in os.walk(path):
            for d in dirnames:
                try:
                    os.chmod(os.path.join(dirpath, d), 0o700)
                except OSError:
                    pass
        time.sleep(0.1 * (attempt + 1))
