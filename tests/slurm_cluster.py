"""``slurm_cluster`` (the fixture of tests/conftest.py is ``start``): a real two-node Slurm cluster on this machine, configured only by the lifecycle.

What is real: munged, slurmctld and two slurmd (Debian's Slurm 22.05), configless:
the workers have no slurm.conf and fetch it from slurmctld through the
``--conf-server`` drop-in the lifecycle writes; each node runs its own munged with
the key the lifecycle installed (shared through the stand-in /fsx), so a job that
runs proves the keys match. The lifecycle runs as HyperPod starts it: the bundle's root
on_create.sh, from the bundle directory, with hpq-cluster.json next to it (as the S3 stack
writes it) and the documented provisioning_parameters.json (FSx names) in /opt/ml/config.
What is a stand-in: the HyperPod agent (this fixture writes what it would: the controller's
slurm.conf with NodeName lines, resource_config.json in HyperPod's format
(tests/node_samples.py), the vendor unit files in the AMI's form with $SLURMD_OPTIONS),
IMDS (hpq.standins.imds), systemd (hpq's systemctl stand-in, first on each node's PATH, starts the
units' ExecStart), and FSx (``HPQ_MOUNT_CMD`` is tests/node_samples.py's mount.lustre
stand-in: it resolves the FSx name, links the shared directory and records the mount with
an IP NID in ``<root>/proc/mounts``, as the kernel shows it).

How several "nodes" share one host:
- every node has its own root directory ``<base>/<node>`` (``HPQ_ROOT``; jobs find it through
  ``HPQ_SLURM_NODE_ROOT=<base>/%n``) and its own customer address (127.0.0.1, .2, .3: the lifecycle
  matches by instance id, the host certificates carry the address);
- slurmd runs as ``slurmd -N <node>`` with a per-node ``Port=`` (Debian's build
  accepts this; checked by the tests themselves);
- the MUNGE socket and slurmd's ``/run/slurm`` are fixed paths (a configless slurmd
  fetches its config through the *default* munge socket before it knows any
  other), so each node's lifecycle and daemons run in their own mount namespace
  (``unshare -m``) where ``/run/munge`` and ``/run/slurm`` are bind mounts of the
  node's ``<root>/run/...``. Nothing of the host's /run is touched (the fixture only
  creates the two empty mount-point directories if they are missing, and leaves them).

Contract (used by other test modules, e.g. the cluster validation commands):
  cluster.env         dict for subprocess env= of srun/sinfo/sbatch/scontrol (SLURM_CONF
                      points at a client config with this cluster's munge socket)
  cluster.nodes       ["node-1", "node-2"], the compute node names (NODE_CPUS CPUs each, 2 on this host;
                      partition "dev", default, OverSubscribe=YES)
  cluster.run(args, timeout=60) -> subprocess.CompletedProcess (text, stdout/stderr captured)
  cluster.shared_dir  pathlib.Path readable/writable by jobs on both nodes (stands in for /fsx)
  cluster.roots       {"controller"|node: pathlib.Path}, each node's HPQ_ROOT
  cluster.run_lifecycle(node) -> CompletedProcess (runs on_create.sh again for that node)
Jobs run as root, in the node's mount namespace, with the submitting environment.
Scope: session (start ~5 s). Teardown kills lifecycle runs still going (by process group), cancels jobs,
then stops every daemon by PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpq.lifecycle import names
from hpq.standins import hyperpod
from hpq.standins import imds as imds_standin
from hpq.standins.systemctl import pid_alive
from tests import node_samples
from tests.support import free_ports

CLUSTER = "hpq-test"
CONTROLLER_GROUP = "controller-machine"
WORKER_GROUP = "worker-group-1"
NODES = ["node-1", "node-2"]
NODE_IPS = {"controller": "127.0.0.1", "node-1": "127.0.0.2", "node-2": "127.0.0.3"}
INSTANCE_NAMES = {"controller": "controller-machine-1", "node-1": "worker-group-1-1", "node-2": "worker-group-1-2"}
NODE_TYPE = "ml.g5.16xlarge"
CONTROLLER_TYPE = "ml.m5.xlarge"
# CPUs per node (up to 4, never more than the host has: slurmd drains a node with fewer than configured).
NODE_CPUS = max(1, min(os.cpu_count() or 1, 4))
HOST_MOUNT_POINTS = ("/run/munge", "/run/slurm")
HYPERPOD_MUNGE_KEY = bytes(range(256)) * 4  # 1024 bytes, what `mungekey` makes by default (munge 0.5.14+)
STALE_MUNGE_KEY = bytes(reversed(range(256))) * 4
NODE_PYTHON = "/usr/bin/python3"  # the system interpreter, as on a node: no boto3, no hpq installed

NODE_NS = """#!/bin/sh
# node-ns ROOT CMD...: run CMD with /run/munge and /run/slurm bound to ROOT's own (test host only).
root=$1; shift
exec unshare -m --propagation private /bin/sh -c \
  'mount --bind "$0/run/munge" /run/munge && mount --bind "$0/run/slurm" /run/slurm && exec "$@"' "$root" "$@"
"""

def agent_slurm_conf(base: Path, ctl_root: Path, ctl_port: int, node_ports: dict[str, int]) -> str:
    """What the HyperPod agent would write on the controller (no enable_configless: the lifecycle adds it): the
    rehearsal's agent stand-in (standins/hyperpod.py), with this one host's ports and per-node paths
    (%n: the Slurm node name) and an agent value the lifecycle must keep when it merges configless in."""
    settings: dict[str, str | None] = {
        "SlurmctldPort": str(ctl_port),
        "SlurmdPort": None,  # every node has its own Port= below
        "SlurmdUser": "root",
        "StateSaveLocation": f"{ctl_root}/var/spool/slurmctld",
        "SlurmctldPidFile": f"{ctl_root}/run/slurmctld.pid",
        "SlurmctldLogFile": f"{ctl_root}/var/log/slurmctld.log",
        "SlurmdSpoolDir": f"{base}/%n/var/spool/slurmd",
        "SlurmdPidFile": f"{base}/%n/run/slurmd.pid",
        "SlurmdLogFile": f"{base}/%n/var/log/slurmd.log",
        "SlurmctldParameters": "idle_on_node_suspend",
        "SlurmdTimeout": "60",
    }
    nodes = [f"NodeName={node} NodeAddr=127.0.0.1 Port={port} CPUs={NODE_CPUS} RealMemory=500 State=UNKNOWN"
             for node, port in node_ports.items()]
    partition = ["PartitionName=dev Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"]
    return hyperpod.agent_slurm_conf(CLUSTER, f"{socket.gethostname()}(127.0.0.1)", nodes, partition, settings,
                                     source="tests/slurm_cluster.py")


def resource_config() -> dict:
    """resource_config.json in HyperPod's format (tests/node_samples.py) for this one-host cluster."""
    nodes = {INSTANCE_NAMES[n]: (INSTANCE_IDS[n], NODE_IPS[n], f"172.16.0.{i + 10}")
             for i, n in enumerate(["controller"] + NODES)}
    rc = node_samples.slurm_resource_config(nodes, controller_ip=NODE_IPS["controller"])
    rc["ClusterConfig"]["ClusterName"] = CLUSTER
    for group in rc["InstanceGroups"]:
        group["InstanceType"] = CONTROLLER_TYPE if group["Name"] == CONTROLLER_GROUP else NODE_TYPE
    return rc


def cluster_config() -> dict:
    """hpq-cluster.json as the S3 stack writes it next to the bundle."""
    return dict(node_samples.hpq_cluster_config(cluster=CLUSTER), controller_group=CONTROLLER_GROUP,
                login_group=None, worker_groups=[WORKER_GROUP])


INSTANCE_IDS = {"controller": "i-0c0000000000000c0", "node-1": "i-0a000000000000001", "node-2": "i-0a000000000000002"}


def write_units(root: Path, node: str, ctl_conf: str) -> None:
    """Vendor units as packages would install them; the lifecycle must not edit these."""
    d = root / "lib/systemd/system"
    d.mkdir(parents=True, exist_ok=True)
    (d / "munge.service").write_text(
        "[Unit]\nDescription=MUNGE (test vendor unit)\n\n[Service]\nType=simple\n"
        f"ExecStart=/usr/sbin/munged -F --key-file={root}/etc/munge/munge.key --pid-file=/run/munge/munged.pid "
        f"--log-file={root}/var/log/munge/munged.log --seed-file={root}/var/lib/munge/munged.seed\n")
    if node == "controller":
        (d / "slurmctld.service").write_text(
            "[Unit]\nDescription=Slurm controller (test vendor unit)\n\n[Service]\nType=simple\n"
            f"ExecStart=/usr/sbin/slurmctld -D -f {ctl_conf}\n")
    else:
        # The AMI's form (tests/node_samples.AMI_SLURMD_UNIT: /etc/systemd/system, $SLURMD_OPTIONS in ExecStart)
        # with Debian's binary and, for one host, -N; without the ExecStartPre that deletes a local slurm.conf
        # (the systemctl stand-in runs ExecStart only, and that path is the host's).
        unit = node_samples.AMI_SLURMD_UNIT.replace("ExecStartPre=-/usr/bin/rm -f /opt/slurm/etc/slurm.conf\n", "")
        unit = unit.replace("/opt/slurm/sbin/slurmd -D $SLURMD_OPTIONS", f"/usr/sbin/slurmd -D -s -N {node} $SLURMD_OPTIONS")
        assert f"-N {node} $SLURMD_OPTIONS" in unit
        (root / "etc/systemd/system").mkdir(parents=True, exist_ok=True)
        (root / "etc/systemd/system/slurmd.service").write_text(unit)


@dataclass
class SlurmCluster:
    base: Path
    env: dict
    nodes: list[str]
    shared_dir: Path
    roots: dict[str, Path]
    lifecycle_env: dict[str, dict[str, str]] = field(default_factory=dict)
    on_create: Path = Path()
    node_ns: Path = Path()

    def run(self, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(args, env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=str(self.shared_dir))

    def run_lifecycle(self, node: str, timeout: float = 180) -> subprocess.CompletedProcess:
        proc = self.start_lifecycle(node)
        try:
            out, _ = proc.communicate(timeout=timeout)
        finally:
            kill_group(proc)  # on a timeout, the python under on_create.sh must not live on
        return subprocess.CompletedProcess(proc.args, proc.returncode, out)

    def start_lifecycle(self, node: str) -> subprocess.Popen:
        """The bundle's root on_create.sh, started from the bundle directory as HyperPod does, in its own
        process group, so ``kill_group`` stops all of it (not the daemons it started: the systemctl
        stand-in gives each its own session; they are stopped by PID file)."""
        return subprocess.Popen([str(self.node_ns), str(self.roots[node]), "bash", self.on_create.name],
                                cwd=str(self.on_create.parent), env=self.lifecycle_env[node],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def node_states(self) -> dict[str, str]:
        res = self.run(["sinfo", "-h", "-N", "-o", "%N %T"])
        return dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)

    def wait_idle(self, timeout: float = 60) -> dict[str, str]:
        deadline = time.time() + timeout
        states: dict[str, str] = {}
        while time.time() < deadline:
            states = self.node_states()
            if all(states.get(n) == "idle" for n in self.nodes):
                return states
            time.sleep(0.5)
        raise AssertionError(f"nodes not idle after {timeout}s: {states}")

    def daemon_pids(self) -> list[tuple[str, int]]:
        out = []
        for node, root in self.roots.items():
            for pf in sorted((root / "run/hpq/services").glob("*.pid")):
                try:
                    out.append((node + "/" + pf.stem, int(pf.read_text().strip())))
                except ValueError:
                    pass
        return out


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group a ``start_lifecycle`` process leads, if it still runs, and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()


def _stop(pids: list[tuple[str, int]]) -> None:
    """SIGTERM by PID, slurmd first, then slurmctld, munged last; SIGKILL what is left after 5 s, and wait (up to
    10 s in all) until it has exited."""
    order = {"slurmd.service": 0, "slurmctld.service": 1, "munge.service": 2}
    waves: dict[int, list[int]] = {}
    for name, pid in pids:
        waves.setdefault(order.get(name.split("/")[1], 3), []).append(pid)
    for wave in sorted(waves):
        t0 = time.time()
        for pid in waves[wave]:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        alive = list(waves[wave])
        while alive and time.time() - t0 < 5:
            time.sleep(0.05)
            alive = [p for p in alive if pid_alive(p)]
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while alive and time.time() - t0 < 10:  # gone before the next test starts, not merely signalled
            time.sleep(0.05)
            alive = [p for p in alive if pid_alive(p)]


def _check_host() -> None:
    if os.geteuid() != 0:  # a skip would count as passing: say it, loudly (deselect with -m "not slow")
        pytest.fail("the real-Slurm fixture needs root (daemons, mount namespaces); CI runs as root: run as root, "
                    "or leave the real-daemon tests out with -m 'not slow'")
    missing = [b for b in ("munged", "slurmctld", "slurmd", "srun", "sinfo", "unshare", "ssh-keygen")
               if not shutil.which(b, path="/usr/sbin:/usr/bin:/sbin:/bin")]
    if missing:
        pytest.fail(f"missing binaries {', '.join(missing)}: run dev/test.sh (apt-get install slurm* munge)")


build_bundle = node_samples.build_bundle


def start(tmp_path_factory):
    """A running configless Slurm cluster (controller + node-1 + node-2) set up by the lifecycle. See module doc."""
    _check_host()
    base = tmp_path_factory.mktemp("slurm")
    # Mount points for the per-node bind mounts. Left in place at teardown: removing a directory that is
    # a mount point in another namespace would detach a concurrent session's mounts.
    for p in HOST_MOUNT_POINTS:
        os.makedirs(p, mode=0o755, exist_ok=True)
    shared = base / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    ctl_port, *ports = free_ports(1 + len(NODES))
    node_ports = dict(zip(NODES, ports, strict=True))
    roots = {name: base / name for name in ["controller"] + NODES}
    for name, root in roots.items():
        for sub in ("run/munge", "run/slurm", "var/log/munge", "var/lib/munge", "var/spool"):
            (root / sub).mkdir(parents=True)  # what the packages create
            (root / sub).chmod(0o755)
        # The MUNGE key the image brought: the same on the controller and node-1 (HyperPod's), a stale
        # one on node-2, so the lifecycle keeps the first and replaces the second.
        (root / "etc/munge").mkdir(parents=True, mode=0o700)
        (root / "etc/munge/munge.key").write_bytes(STALE_MUNGE_KEY if name == "node-2" else HYPERPOD_MUNGE_KEY)
        (root / "etc/munge/munge.key").chmod(0o400)
        (root / "opt/ml/config").mkdir(parents=True)
        (root / "opt/ml/config/resource_config.json").write_text(json.dumps(resource_config(), indent=1))
        # The documented legacy file where HyperPod keeps it, here only for the FSx names.
        pp = dict(node_samples.provisioning_parameters(), controller_group=CONTROLLER_GROUP, login_group=None,
                  worker_groups=[{"instance_group_name": WORKER_GROUP, "partition_name": "dev"}])
        (root / names.NODE_PROVISIONING_PARAMETERS.lstrip("/")).write_text(json.dumps(pp, indent=1))
    ctl_conf = roots["controller"] / "opt/slurm/etc/slurm.conf"
    ctl_conf.parent.mkdir(parents=True)
    ctl_conf.write_text(agent_slurm_conf(base, roots["controller"], ctl_port, node_ports))
    for name, root in roots.items():
        write_units(root, name, str(ctl_conf))
    (base / "bin").mkdir()
    node_ns = base / "bin/node-ns"
    node_ns.write_text(NODE_NS)
    node_ns.chmod(0o755)
    fake_mount = base / "bin/fake-mount"
    node_samples.write_fake_mount(fake_mount, shared=shared)
    modprobe = base / "bin/modprobe"
    node_samples.write_recorder(modprobe)  # no Lustre modules on this host
    on_create = build_bundle(base / "bundle")
    (on_create.parent / names.HPQ_CLUSTER_CONFIG).write_text(json.dumps(cluster_config(), indent=1))

    imds = imds_standin.start({name: imds_standin.Metadata.of(
        node_samples.imds_answers(iid, NODE_TYPE[3:] if name in NODES else CONTROLLER_TYPE[3:]))
        for name, iid in INSTANCE_IDS.items()})
    client_conf = base / "client/slurm.conf"
    client_conf.parent.mkdir()
    munge_socket = roots["controller"] / "run/munge/munge.socket.2"
    client_conf.write_text(f"Include {ctl_conf}\nAuthInfo=socket={munge_socket}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPQ_"))}
    env["SLURM_CONF"] = str(client_conf)
    lifecycle_env = {}
    for name, root in roots.items():
        lifecycle_env[name] = dict(
            env, HPQ_ROOT=str(root), HPQ_IMDS_URL=imds.node_url(name),
            HPQ_SLURM_PREFIX="/usr", HPQ_SLURM_CONF_DIR="/opt/slurm/etc", HPQ_SLURMCTLD_PORT=str(ctl_port),
            PATH=os.path.dirname(node_samples.systemctl_standin_for(root)) + os.pathsep + env.get("PATH", ""),
            HPQ_MOUNT_CMD=str(fake_mount), HPQ_MODPROBE_CMD=str(modprobe),
            HPQ_FAIL_LOG_WAIT_S="0",  # no CloudWatch agent here: a failing run need not wait for one
            HPQ_SLURM_NODE_ROOT=f"{base}/%n", HPQ_DEFAULT_USER="root",
            HPQ_MUNGE_USER="root", HPQ_SERVICE_WAIT_S="60", HPQ_SHARED_WAIT_S="30", HPQ_SLURM_CONF_WAIT_S="30",
            HPQ_PYTHON=NODE_PYTHON if os.path.exists(NODE_PYTHON) else sys.executable)
        lifecycle_env[name].pop("SLURM_CONF")
    cluster = SlurmCluster(base=base, env=env, nodes=list(NODES), shared_dir=shared, roots=roots,
                           lifecycle_env=lifecycle_env, on_create=on_create, node_ns=node_ns)
    procs: dict[str, subprocess.Popen] = {}
    try:
        # All nodes at once, as HyperPod does: workers wait for the controller's MUNGE key on the shared
        # directory and keep slurmd trying until slurmctld serves the config.
        # The controller starts last, so the waiting paths are what gets exercised.
        for name in NODES:
            procs[name] = cluster.start_lifecycle(name)
        time.sleep(1.0)
        procs["controller"] = cluster.start_lifecycle("controller")
        for name, proc in procs.items():
            out, _ = proc.communicate(timeout=180)
            (base / f"lifecycle-{name}.out").write_text(out)
            if proc.returncode != 0:
                raise AssertionError(f"lifecycle on {name} failed ({proc.returncode}):\n{out[-4000:]}")
        cluster.wait_idle(60)
        yield cluster
    finally:
        # A lifecycle still running (setup failed or timed out) would go on to start daemons: stop it first.
        for proc in procs.values():
            kill_group(proc)
        try:
            cluster.run(["scancel", "--user", "root"], timeout=30)
        except subprocess.SubprocessError:
            pass
        _stop(cluster.daemon_pids())
        imds_standin.stop(imds)


# ---------------------------------------------------------------------------- unit-test helpers


def write_node_files(root: Path, params: dict | None = None) -> Path:
    """A node root with resource_config.json (HyperPod's) and, next to it, hpq-cluster.json (or ``params``)."""
    (root / "opt/ml/config").mkdir(parents=True, exist_ok=True)
    (root / "opt/ml/config/resource_config.json").write_text(json.dumps(resource_config()))
    if params is not None and "workload_manager" in params:
        p = root.parent / (root.name + "-provisioning_parameters.json")
    else:
        p = root.parent / (root.name + "-" + names.HPQ_CLUSTER_CONFIG)
    p.write_text(json.dumps(params if params is not None else cluster_config()))
    return p


def make_context(root: Path, **env: str):
    """A lifecycle Context for ``root`` with HPQ_* settings (logger propagates to pytest's caplog)."""
    import logging

    from hpq.lifecycle import context

    settings = context.Settings.from_env(
        {"HPQ_ROOT": str(root), "HPQ_SYSTEMCTL_CMD": node_samples.systemctl_standin_for(root), **env})
    return context.Context(settings, logging.getLogger("hpq-test.lifecycle"))
