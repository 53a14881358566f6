"""Which instance type this node is, and the transport environment that follows from it.

The environment comes from ``hpq.lifecycle.transport.node_environment`` (the same function
the lifecycle scripts use at boot), fed with this node's own probe. ``python3 -m
hpq.scripts.nodeinfo`` prints it as JSON so a launcher on the controller can ask a worker
(``srun -N1 -n1``) what *its* environment is: the controller itself is a CPU instance.

Instance type, first found wins: ``--instance-type``/``HPQ_INSTANCE_TYPE``, the node-info
JSON the lifecycle writes (``names.NODE_INFO``, key ``instance_type``), IMDSv2 (then v1).
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Dict, Optional, Tuple

from hpq.lifecycle import catalog, names, transport

IMDS_DEFAULT = "http://169.254.169.254"


def _imds_base() -> str:
    return os.environ.get("HPQ_IMDS_ENDPOINT", IMDS_DEFAULT).rstrip("/")


def imds_instance_type(timeout: float = 1.0) -> Optional[str]:
    """EC2 instance type from IMDS: token first (HyperPod enforces IMDSv2), then plain GET."""
    if os.environ.get("HPQ_IMDS_ENDPOINT", None) == "off":
        return None
    base = _imds_base()
    headers = {}
    try:
        req = urllib.request.Request(base + "/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            headers["X-aws-ec2-metadata-token"] = resp.read().decode().strip()
    except (OSError, urllib.error.URLError, ValueError):
        pass
    try:
        req = urllib.request.Request(base + "/latest/meta-data/instance-type", headers=headers)
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            value = resp.read().decode().strip()
            return value or None
    except (OSError, urllib.error.URLError, ValueError):
        return None


def node_info_path() -> str:
    """names.NODE_INFO, under HPQ_ROOT when set (as the lifecycle resolves it); HPQ_NODE_INFO overrides."""
    explicit = os.environ.get("HPQ_NODE_INFO")
    if explicit:
        return explicit
    return on_node(names.NODE_INFO)


def on_node(path: str) -> str:
    """A node path under HPQ_ROOT when set (as the lifecycle resolves it)."""
    return os.path.join(os.environ.get("HPQ_ROOT", "/"), path.lstrip("/"))


def fsx_record() -> Dict[str, object]:
    """The lifecycle's record of this node's FSx mount (names.FSX_RECORD under HPQ_ROOT): mount_point and
    mount_table; {} when the lifecycle mounted none (or the record is unreadable)."""
    try:
        with open(on_node(names.FSX_RECORD)) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def fsx_to_check(given: Optional[str]) -> Tuple[Optional[str], str]:
    """(the shared file system to check or None, the mount table to read it in): ``--fsx`` when given ('' for
    none), else where the lifecycle mounted FSx; the table from HPQ_PROC_MOUNTS, else the lifecycle's record,
    else the kernel's."""
    record = fsx_record()
    if given is not None:
        fsx = given or None
    else:
        point = record.get("mount_point")
        fsx = point if isinstance(point, str) and point else None
    table = record.get("mount_table")
    mounts = os.environ.get("HPQ_PROC_MOUNTS") or (table if isinstance(table, str) and table else "/proc/mounts")
    return fsx, mounts


def read_node_info() -> Dict[str, object]:
    """The node-info JSON the lifecycle's identify step wrote (cluster_name, slurm_node_name, instance_type...);
    {} when it is missing or not a JSON object (a node the lifecycle did not set up)."""
    try:
        with open(node_info_path()) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def resolve_instance_type(override: Optional[str] = None, use_imds: bool = True) -> Optional[str]:
    """The node's instance type, or None when nothing says (e.g. a laptop or a CI box)."""
    for value in (override, os.environ.get("HPQ_INSTANCE_TYPE")):
        if value:
            return catalog.normalize(value)
    value = read_node_info().get("instance_type")
    if isinstance(value, str) and value:
        return catalog.normalize(value)
    if use_imds:
        value = imds_instance_type()
        if value:
            return catalog.normalize(value)
    return None


def environment_for(instance_type: Optional[str]) -> Dict[str, object]:
    """JSON-able description of the transport environment for this node."""
    if not instance_type:
        return {"instance_type": None, "transport": None, "torch_backend": None, "variables": {},
                "path_prepend": [], "notes": ["instance type unknown: no transport environment applied"]}
    try:
        # HPQ_ROOT: the same root convention as the lifecycle (tests point it at a fake /sys and /proc).
        env = transport.node_environment(instance_type, transport.probe_node(os.environ.get("HPQ_ROOT", "/")))
    except catalog.UnknownInstanceType as exc:
        return {"instance_type": instance_type, "transport": None, "torch_backend": None, "variables": {},
                "path_prepend": [], "notes": [str(exc)]}
    return {"instance_type": env.instance_type, "transport": env.transport, "torch_backend": env.torch_backend,
            "variables": dict(env.variables), "path_prepend": list(env.path_prepend), "notes": list(env.notes)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m hpq.scripts.nodeinfo",
                                 description="Print this node's instance type and transport environment as JSON.")
    ap.add_argument("--instance-type", default=None)
    ap.add_argument("--no-imds", action="store_true", help="do not ask the instance metadata service")
    args = ap.parse_args(argv)
    itype = resolve_instance_type(args.instance_type, use_imds=not args.no_imds)
    info = environment_for(itype)
    info["gpus"] = count_gpus()
    json.dump(info, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def count_gpus() -> int:
    """NVIDIA GPUs on this node (from /proc/driver/nvidia, else nvidia-smi); 0 when none."""
    path = "/proc/driver/nvidia/gpus"
    try:
        n = len(os.listdir(path))
        if n:
            return n
    except OSError:
        pass
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30,
                             universal_newlines=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


if __name__ == "__main__":
    sys.exit(main())
