"""What a rehearsal needs from this machine, checked before anything is created.

Missing pieces are one usage error (exit 2) naming the Debian packages (or pip extras) to install.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

from hpq.errors import UsageError
from hpq.rehearsal.node import NODE_PATH

SEARCH = NODE_PATH  # where the nodes find their programs: the prerequisites are looked up there
# executable -> Debian package that ships it
BINARIES = {
    "ip": "iproute2", "tc": "iproute2", "unshare": "util-linux", "nsenter": "util-linux", "pivot_root": "util-linux",
    "mount": "mount", "getent": "libc-bin", "useradd": "passwd", "usermod": "passwd", "ps": "procps",
    "ssh-keygen": "openssh-client", "sshd": "openssh-server",
}
SLURM_BINARIES = {
    "slurmctld": "slurmctld", "slurmd": "slurmd", "sinfo": "slurm-client", "srun": "slurm-client",
    "sbatch": "slurm-client", "salloc": "slurm-client", "scontrol": "slurm-client",
    "munged": "munge", "munge": "munge", "unmunge": "munge",
}


def missing_binaries(slurm: bool) -> dict[str, str]:
    wanted = dict(BINARIES)
    if slurm:
        wanted.update(SLURM_BINARIES)
    return {b: pkg for b, pkg in wanted.items() if not shutil.which(b, path=SEARCH)}


def check(variant: str, validate: bool = True) -> None:
    if not sys.platform.startswith("linux"):
        raise UsageError("hpq rehearse needs Linux (network, mount and UTS namespaces)")
    if os.geteuid() != 0:
        raise UsageError("hpq rehearse needs root (it creates network namespaces, a bridge and mounts); "
                         "run it with sudo")
    slurm = variant.startswith("slurm")
    missing = missing_binaries(slurm)
    if missing:
        pkgs = sorted(set(missing.values()))
        raise UsageError(f"missing {', '.join(sorted(missing))}: install the Debian packages with "
                         f"`apt-get install {' '.join(pkgs)}`")
    with open("/proc/filesystems") as fh:
        if not any(line.split()[-1] == "overlay" for line in fh if line.strip()):
            raise UsageError("the kernel has no overlay filesystem (modprobe overlay), which every node's root needs")
    # awscli: the nodes find FSx by tag through this environment's aws CLI (their python3 has no boto3).
    # pip arguments, quoted for every shell (zsh expands an unquoted [rehearse]).
    extra = "'hyperpod-quickstart[rehearse]'"
    wanted_py = {"moto": extra, "awscli": extra}
    if slurm and validate:
        wanted_py["torch"] = "'torch==2.13.0'"  # the version dev/constraints.txt pins (a CPU build will do)
        wanted_py["numpy"] = extra  # torch's object collectives need it
    if not slurm:
        wanted_py["kubernetes_validate"] = extra
    missing_py = [why for mod, why in wanted_py.items() if importlib.util.find_spec(mod) is None]
    if missing_py:
        raise UsageError(f"missing Python packages in {sys.executable}: pip install {' '.join(sorted(set(missing_py)))}")
    if not slurm:  # the Helm stack's layer is part of what an EKS deploy uploads
        from hpq.aws import layer

        layer.helm_layer()  # LayerMissing (a UsageError) names the pip command
