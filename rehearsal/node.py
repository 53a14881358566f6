"""A rehearsal node: its own network, mount and UTS namespaces and a private root filesystem.

The node's root is an overlay of the host's ``/`` (read-only lower layer) with the node's own
upper directory, so the node sees the host's installed software (Slurm, MUNGE, OpenSSH,
Python) while everything it writes (``/etc``, ``/var``, ``/opt``, ``/home``, ``/usr/local``)
stays its own and disappears with it. ``/run``, ``/dev/shm`` are fresh tmpfs, ``/tmp`` is a
directory of the run (HyperPod stages the lifecycle there), ``/proc`` and ``/sys`` are mounted
for the node's namespaces. The root is switched with ``pivot_root`` so nothing of the host's
mount tree stays reachable.

EFA_DEVICES: a worker of a type with EFA interfaces sees that many EFA devices where the transport
probe looks (``/sys/class/infiniband/<dev>/device/driver`` -> ``efa``, as the EFA kernel driver
shows them; ``lifecycle/transport.count_efa_devices``), so the lifecycle and the worker probe choose
the type's own transport (p5: EFA RDMA) as on an instance. No traffic goes over them: gloo runs on
the bridge. ``fi_info`` is not installed here, so the probe leaves the catalog's RDMA as it is.

A *holder* process (``sleep infinity``) keeps the mount and UTS namespaces alive; every
command that runs "on the node" enters them with ``nsenter``. Teardown needs no unmounting:
when the last process of the namespace is gone, the kernel drops its mounts; which processes
those are, and stopping them, is ``procs`` and ``state.teardown``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from hpq.errors import OperationFailed
from hpq.rehearsal.plan import NodeSpec
from hpq.scripts import efa_metrics

NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# $1 node dir, $2 hostname, $3 FSx export on the host ("" for none), $4 "1" for a data volume at
# /opt/sagemaker (where HyperPod mounts the instance group's EBS volume), $5 the instance type's EFA
# devices (see EFA_DEVICES), then host directories under
# /tmp that stay visible (see host_tmp_dirs), each through an overlay of its own. Runs in fresh mount+UTS namespaces inside the
# node's network namespace; prints "ready" once the node's root is in place.
# What ports/1/hw_counters holds on an EFA device: the 18 port counters of AWS's real scrape of its EFA exporter
# (tests/observability/data/exporters/efa_exporter_sample.txt, from awsome-distributed-ai's EFA exporter README),
# plus the five network counters newer EFA drivers add there (retransmits and the sick-link events hpq's doctor
# and alerts read). The device-level counters (alloc_pd_err, cmds_err...) are not port counters.
EFA_PORT_COUNTERS = ("lifespan", "rdma_read_bytes", "rdma_read_resp_bytes", "rdma_read_wr_err", "rdma_read_wrs",
                     "rdma_write_bytes", "rdma_write_recv_bytes", "rdma_write_wr_err", "rdma_write_wrs", "recv_bytes",
                     "recv_wrs", "rx_bytes", "rx_drops", "rx_pkts", "send_bytes", "send_wrs", "tx_bytes", "tx_pkts",
                     "retrans_bytes", "retrans_pkts", "retrans_timeout_events", "unresponsive_remote_events",
                     "impaired_remote_conn_events")
assert set(EFA_PORT_COUNTERS) <= set(efa_metrics.COUNTERS)

NODE_INIT = r"""set -eu
d=$1; host=$2; fsx=$3; ebs=$4; efa=$5; r=$d/root
shift 5
mount -t overlay hpq-node -o "lowerdir=/,upperdir=$d/upper,workdir=$d/work" "$r"
mount -t proc proc "$r/proc"
mount -t sysfs sysfs "$r/sys"
if [ "$efa" -gt 0 ]; then
    # /sys/class as the kernel shows it (each class bound back in), plus infiniband/rdmap<N>s0 whose
    # device/driver is "efa" and whose ports/1/hw_counters hold the EFA driver's port counters, all 0: what the
    # EFA driver shows on an instance with EFA interfaces, before any traffic.
    mkdir -p "$d/sysclass"
    mount --bind "$r/sys/class" "$d/sysclass"
    mount -t tmpfs -o mode=755,nosuid,nodev,noexec hpq-sysclass "$r/sys/class"
    for c in "$d/sysclass"/*; do
        mkdir "$r/sys/class/${c##*/}"
        mount --bind "$c" "$r/sys/class/${c##*/}"
    done
    mkdir -p "$r/sys/class/.hpq-rehearse/bus/pci/drivers/efa" "$r/sys/class/infiniband"
    i=0
    while [ "$i" -lt "$efa" ]; do
        mkdir -p "$r/sys/class/infiniband/rdmap${i}s0/device"
        ln -s /sys/class/.hpq-rehearse/bus/pci/drivers/efa "$r/sys/class/infiniband/rdmap${i}s0/device/driver"
        mkdir -p "$r/sys/class/infiniband/rdmap${i}s0/ports/1/hw_counters"
        for c in @EFA_COUNTERS@; do
            echo 0 > "$r/sys/class/infiniband/rdmap${i}s0/ports/1/hw_counters/$c"
        done
        i=$((i + 1))
    done
    mount -o remount,ro "$r/sys/class"
fi
if mountpoint -q /sys/fs/cgroup; then mount --rbind /sys/fs/cgroup "$r/sys/fs/cgroup"; fi
mount --rbind /dev "$r/dev"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$r/dev/shm"
mount -t tmpfs -o mode=755,nosuid,nodev run "$r/run"
mount --bind "$d/tmp" "$r/tmp"
i=0
for keep in "$@"; do  # an overlay like /'s: the node may chmod its copy, the host's directory never changes
    i=$((i + 1))
    mkdir -p "$r$keep" "$d/keep/$i/upper" "$d/keep/$i/work"
    mount -t overlay hpq-keep -o "lowerdir=$keep,upperdir=$d/keep/$i/upper,workdir=$d/keep/$i/work" "$r$keep"
done
if [ -n "$fsx" ]; then
    mkdir -p "$r/run/hpq-rehearse/fsx-export"
    mount --bind "$fsx" "$r/run/hpq-rehearse/fsx-export"
fi
if [ "$ebs" = 1 ]; then
    mkdir -p "$d/ebs" "$r/opt/sagemaker"
    mount --bind "$d/ebs" "$r/opt/sagemaker"
fi
hostname "$host"
cd "$r"
pivot_root . .
umount -l .
cd /
echo ready
exec sleep infinity
""".replace("@EFA_COUNTERS@", " ".join(sorted(EFA_PORT_COUNTERS)))


class NodeError(OperationFailed):
    pass


def host_aws_cli() -> str | None:
    """The aws CLI the nodes run (the fsx step's fallback when boto3 is missing): hpq's environment's, else PATH's."""
    import shutil
    import sys

    aws = os.path.join(os.path.dirname(sys.executable), "aws")
    return aws if os.path.exists(aws) else shutil.which("aws")


def host_tmp_dirs(paths: list[str] | None = None) -> list[str]:
    """Host directories under /tmp that the node must still see through its private /tmp.

    The rehearsal runs host Python on the node (the service manager, the validation), so the
    interpreter's environment and hpq's own source must stay reachable: a virtualenv or a checkout
    under /tmp (``python3 -m venv /tmp/v``, ``git clone . /tmp/c``) would otherwise vanish behind the
    node's /tmp. Each is kept as its top directory under /tmp.
    """
    if paths is None:
        import sys

        import hpq

        paths = [sys.prefix, sys.base_prefix, os.path.realpath(sys.executable),
                 os.path.dirname(os.path.dirname(os.path.realpath(hpq.__file__)))]
        paths += [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)]
        paths += [p for p in sys.path if p]  # site directories added by .pth files or PYTHONPATH
        aws = host_aws_cli()  # may live in another environment under /tmp (found on PATH)
        paths += [aws, os.path.realpath(aws)] if aws else []
    tops = set()
    for path in paths:
        parts = Path(os.path.abspath(path)).parts
        if len(parts) >= 3 and parts[:2] == ("/", "tmp"):
            tops.add(str(Path(*parts[:3])))
    return sorted(tops)


@dataclass
class Node:
    spec: NodeSpec
    dir: Path  # <run dir>/nodes/<name> on the host
    holder_pid: int | None = None

    @property
    def upper(self) -> Path:
        """Everything the node wrote, seen from the host (node path /x is upper/x once written)."""
        return self.dir / "upper"

    def host_path(self, node_path: str) -> Path:
        return self.upper / node_path.lstrip("/")

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    # ------------------------------------------------------------------ lifecycle of the namespaces

    def create(self, fsx_export: str | None, data_volume: bool = True, timeout: float = 30.0,
               efa_devices: int = 0) -> None:
        """Namespaces and root; ``efa_devices`` EFA devices in the node's /sys/class/infiniband (EFA_DEVICES)."""
        for sub in ("upper", "work", "root", "tmp", "logs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir / "tmp", 0o1777)
        # Not `ip netns exec`: it remounts /sys for the namespace and so drops the host's cgroup mounts,
        # which slurmd needs to see (its cgroup plugin initializes even with proctrack/linuxproc).
        argv = ["unshare", "--mount", "--uts", "--propagation", "private",
                "nsenter", f"--net=/run/netns/{self.spec.netns}", "/bin/sh", "-c", NODE_INIT, "node-init", str(self.dir), self.spec.hostname, fsx_export or "",
                "1" if data_volume else "0", str(max(0, int(efa_devices))), *host_tmp_dirs()]
        log = open(self.log_dir / "node-init.log", "wb")  # noqa: SIM115 - the holder keeps it open
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        assert proc.stdout is not None
        deadline = time.time() + timeout
        line = b""
        while time.time() < deadline:
            line = proc.stdout.readline()
            if line.strip() == b"ready" or not line:
                break
        if line.strip() != b"ready":
            proc.kill()
            proc.wait()
            text = (self.log_dir / "node-init.log").read_text(errors="replace").strip()
            raise NodeError(f"node {self.spec.name}: its root filesystem could not be set up: {text[-400:]}")
        proc.stdout.close()
        self.holder_pid = proc.pid
        self._holder = proc

    def nsenter(self) -> list[str]:
        if not self.holder_pid:
            raise NodeError(f"node {self.spec.name} is not running")
        return ["nsenter", "--target", str(self.holder_pid), "--mount", "--uts", "--net", "--root", "--wd"]

    def command(self, argv: list[str], env: dict[str, str] | None = None) -> list[str]:
        """``argv`` as run on the node: its namespaces, its root, a clean environment."""
        base = {"PATH": NODE_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root", "LOGNAME": "root"}
        base.update(env or {})
        return self.nsenter() + ["env", "-i"] + [f"{k}={v}" for k, v in sorted(base.items())] + argv

    def run(self, argv: list[str], env: dict[str, str] | None = None, input: bytes | str | None = None,
            timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess:
        data = input.encode() if isinstance(input, str) else input
        res = subprocess.run(self.command(argv, env), input=data, capture_output=True, timeout=timeout)
        if check and res.returncode != 0:
            raise NodeError(f"node {self.spec.name}: `{shlex.join(argv)}` failed ({res.returncode}): "
                            f"{(res.stderr or res.stdout).decode(errors='replace').strip()[-400:]}")
        return res

    def sh(self, script: str, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.run(["/bin/sh", "-c", script, "sh", *args], **kw)

    def write(self, path: str, data: bytes | str, mode: int = 0o644, owner: str = "root:root") -> None:
        """Write a file on the node (through its namespaces, so the overlay sees a normal write)."""
        self.sh('set -e; mkdir -p "$(dirname "$1")"; umask 077; cat > "$1"; chmod "$2" "$1"; chown "$3" "$1"',
                path, oct(mode)[2:], owner, input=data)
