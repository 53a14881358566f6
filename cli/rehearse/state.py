"""What a rehearsal created, on disk, so it can be removed: by the run itself or by ``hpq rehearse down``.

The state file is written before each thing is created and updated after, so even a rehearsal
killed with SIGKILL leaves a record of everything it may have left. Teardown is idempotent and
removes, in order: every process in each node's network namespace (the holders, daemons,
lifecycle runs, IMDS servers; the node's mounts go with its mount namespace), the namespaces and
veth links, the FSx stand-in mount, the bridge, the run directory, and the state file itself.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hpq.cli.rehearse import fsx, netns
from hpq.cli.rehearse import node as node_mod

STATE_DIR = Path(os.environ.get("HPQ_REHEARSE_STATE_DIR", "/run/hpq-rehearse"))


@dataclass
class NodeState:
    name: str
    netns: str
    host_iface: str
    holder_pid: int | None = None
    ip: str = ""
    hostname: str = ""
    role: str = ""


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

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.run_id}.json"

    def save(self) -> None:
        from hpq.cli import atomic

        STATE_DIR.mkdir(parents=True, exist_ok=True)
        atomic.write_file(self.path, json.dumps(asdict(self), indent=2) + "\n")

    def node(self, name: str) -> NodeState | None:
        for n in self.nodes:
            if name in (n.name, n.hostname, n.ip):
                return n
        return None

    @classmethod
    def load(cls, path: Path) -> RunState:
        data = json.loads(path.read_text())
        nodes = [NodeState(**n) for n in data.pop("nodes", [])]
        return cls(**data, nodes=nodes)


def all_states() -> list[RunState]:
    if not STATE_DIR.is_dir():
        return []
    out = []
    for p in sorted(STATE_DIR.glob("*.json")):
        try:
            out.append(RunState.load(p))
        except (OSError, ValueError, TypeError):
            continue
    return out


def owner_alive(st: RunState) -> bool:
    """Whether the hpq process that made the rehearsal still runs (then it owns the teardown)."""
    if st.pid == os.getpid():
        return False
    try:
        with open(f"/proc/{st.pid}/cmdline", "rb") as fh:
            cmd = fh.read()
    except OSError:
        return False
    return b"hpq" in cmd and b"rehearse" in cmd


def teardown(st: RunState, keep_logs: bool = True) -> list[str]:
    """Remove everything ``st`` records; returns what could not be removed (empty when clean)."""
    problems: list[str] = []
    for n in st.nodes:
        left = node_mod.stop_namespace_processes(n.netns) if netns.netns_exists(n.netns) else 0
        if n.holder_pid and node_mod.process_alive(n.holder_pid):
            try:
                os.kill(n.holder_pid, 9)
            except ProcessLookupError:
                pass
        if left:
            problems.append(f"{left} process(es) in {n.netns} did not stop")
        netns.delete_netns(n.netns)
        netns.delete_link(n.host_iface)
        if netns.netns_exists(n.netns):
            problems.append(f"network namespace {n.netns} is still there")
    if st.fsx_export:
        fsx.unmount_export(Path(st.fsx_export))
        if fsx.is_mounted(Path(st.fsx_export)):
            problems.append(f"{st.fsx_export} is still mounted")
    if st.bridge:
        netns.delete_link(st.bridge)
        if netns.link_exists(st.bridge):
            problems.append(f"bridge {st.bridge} is still there")
    if st.workdir and os.path.isdir(st.workdir) and not (st.fsx_export and fsx.is_mounted(Path(st.fsx_export))):
        _rmtree(Path(st.workdir))
        if os.path.isdir(st.workdir):
            problems.append(f"{st.workdir} could not be removed")
    if not keep_logs and st.logdir and os.path.isdir(st.logdir):
        shutil.rmtree(st.logdir, ignore_errors=True)
    if not problems:
        st.path.unlink(missing_ok=True)
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

