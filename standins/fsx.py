"""The FSx for Lustre stand-in: one shared directory and a ``mount.lustre`` that mounts it.

The filesystem itself is created through moto's FSx API from the real Storage template
(the rehearsal's ``aws.Realizer``), so the lifecycle finds it by its exact ``hpq:cluster-name`` tag and reads
its DNSName and MountName from DescribeFileSystems. What backs it here is a tmpfs on the host
whose *source* is the Lustre NID spec ``<ip>@tcp:/<mountname>``: every node's ``/fsx`` is a
bind mount of it, so the kernel's mount table on a node shows the IP NID, as it does on a
node where ``mount.lustre`` resolved the DNS name before mount(2) (lustre-release
lustre/utils/mount_lustre.c, convert_hostnames). What differs from a real Lustre client:
the kernel's filesystem type column says ``tmpfs``, not ``lustre`` (only the kernel's Lustre
module can register that type), so ``mount.lustre`` also writes the node's mount table as a
Lustre client's kernel would show it (``<ip>@tcp:/<mountname> /fsx lustre rw,...``) to
``MOUNTS_FILE``, which the lifecycle reads through its documented ``HPQ_PROC_MOUNTS`` setting.

``mount.lustre`` is installed in every node at /usr/sbin (mount(8) runs ``/sbin/mount.<type>``),
so the lifecycle's plain ``mount -t lustre -o ... <dns>@tcp:/<mountname> /fsx`` goes through
mount(8) as on a real node. It resolves the DNS name through the node's resolver (/etc/hosts,
the VPC DNS stand-in), refuses a spec that is not this filesystem's NID and mount name
(ENOENT, as a wrong fsname fails), and bind-mounts the shared directory.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from hpq.errors import OperationFailed

FSX_EXPORT = "/run/hpq-rehearse/fsx-export"  # inside the node: the shared tmpfs, bound before pivot_root
SOURCE_FILE = "/run/hpq-rehearse/fsx-source"
# The node's mount table as a Lustre client's kernel would show it (the /fsx line typed lustre): seeded
# from the kernel's at boot, rewritten by mount.lustre after each mount; the lifecycle reads it through
# its documented HPQ_PROC_MOUNTS setting (lifecycle/context.py).
MOUNTS_FILE = "/run/hpq-rehearse/mounts"
LUSTRE_OPTIONS = "rw,relatime,flock,lazystatfs"

MOUNT_LUSTRE = r"""#!/bin/sh
# mount.lustre stand-in (hpq rehearse): mount(8) runs it as: mount.lustre SPEC DIR [-sfnv] [-o OPTIONS]
spec=$1; dir=$2
case "$spec" in
    *@tcp:/*) ;;
    *) echo "mount.lustre: $spec is not a NID:/fsname specification" >&2; exit 22 ;;
esac
host=${spec%%@tcp:/*}
fsname=${spec#*@tcp:/}
addr=$(getent ahostsv4 "$host" | awk 'NR == 1 { print $1 }')
if [ -z "$addr" ]; then
    echo "mount.lustre: cannot resolve $host to a NID" >&2
    exit 22
fi
want=$(cat __SOURCE_FILE__ 2>/dev/null)
if [ "$addr@tcp:/$fsname" != "$want" ]; then
    echo "mount.lustre: mount $addr@tcp:/$fsname at $dir failed: No such file or directory" >&2
    exit 2
fi
mkdir -p "$dir"
mount --bind __EXPORT__ "$dir" || exit 32
awk -v dir="$(cd "$dir" && pwd -P)" -v opts=__OPTIONS__ \
    '$2 == dir && $3 == "tmpfs" { $3 = "lustre"; $4 = opts } { print }' /proc/self/mounts > __MOUNTS__.tmp
mv __MOUNTS__.tmp __MOUNTS__
""".replace("__SOURCE_FILE__", SOURCE_FILE).replace("__EXPORT__", FSX_EXPORT).replace(
    "__MOUNTS__", MOUNTS_FILE).replace("__OPTIONS__", LUSTRE_OPTIONS)


class FsxError(OperationFailed):
    pass


SEED_MOUNTS = f"mkdir -p {MOUNTS_FILE.rsplit('/', 1)[0]} && cat /proc/self/mounts > {MOUNTS_FILE}"


def nid_source(ip: str, mount_name: str) -> str:
    return f"{ip}@tcp:/{mount_name}"


def mount_export(path: Path, source: str, size: str = "4g") -> None:
    """The shared tmpfs on the host, named by its NID spec; root-owned 0755 like a new Lustre root."""
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"mode=755,size={size}", source, str(path)],
                         capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise FsxError(f"cannot mount the FSx stand-in at {path}: {res.stderr.strip()}")


def is_mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mounts") as fh:
        return any(line.split()[1] == target for line in fh if len(line.split()) > 1)


def unmount_export(path: Path) -> None:
    if is_mounted(path):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
