"""Rank, world size and rendezvous for the torch programs, from whatever launched them.

No torchrun on the nodes: the programs read Slurm's variables (``srun``), OpenMPI's, or the
plain ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` that hpq's local launcher sets, and rendezvous
over ``env://``. Inside a Slurm step every rank derives the same master address (the first
node of the job, by its Slurm ``NodeAddr``) and port (from the job id), so the launcher
needs to know nothing before the allocation exists. Standard library only.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import List, Optional


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def _first(*names: str) -> Optional[str]:
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            return v
    return None


def scontrol() -> Optional[str]:
    return shutil.which("scontrol")


def expand_hostlist(nodelist: str) -> List[str]:
    """``node[1-2]`` -> ``['node1', 'node2']`` via ``scontrol show hostnames`` (Slurm's own expander)."""
    exe = scontrol()
    if exe:
        try:
            out = subprocess.run([exe, "show", "hostnames", nodelist], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
            hosts = out.stdout.split()
            if out.returncode == 0 and hosts:
                return hosts
        except (OSError, subprocess.SubprocessError):
            pass
    if "[" not in nodelist:
        return [h for h in nodelist.split(",") if h]
    raise RuntimeError("cannot expand Slurm node list %r: scontrol not available" % nodelist)


def node_addr(host: str) -> str:
    """The address Slurm reaches ``host`` at (``NodeAddr``); the name itself when unknown."""
    exe = scontrol()
    if exe:
        try:
            out = subprocess.run([exe, "-o", "show", "node", host], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, universal_newlines=True, timeout=30).stdout
            for tok in out.split():
                if tok.startswith("NodeAddr="):
                    addr = tok.split("=", 1)[1]
                    if addr and addr != "(null)":
                        return addr
        except (OSError, subprocess.SubprocessError):
            pass
    return host


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_for_job(job_id: str) -> int:
    """Deterministic rendezvous port for a Slurm job, so all ranks agree without talking."""
    try:
        jid = int(str(job_id).split("_")[0])
    except ValueError:
        jid = sum(ord(c) for c in str(job_id))
    step = _first("SLURM_STEP_ID") or "0"
    try:
        jid = jid * 7 + int(step)
    except ValueError:
        pass
    return 20000 + jid % 20000


def dist_info() -> DistInfo:
    """Read the launcher's variables; raise RuntimeError with a hint when none are there."""
    rank = _first("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
    world = _first("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    if rank is None or world is None:
        rank, world = "0", "1"
    local = _first("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK") or "0"
    local_world = _first("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE")
    if local_world and "(" in local_world:  # Slurm writes e.g. "2(x2)"
        local_world = local_world.split("(")[0]
    addr = _first("MASTER_ADDR")
    port = _first("MASTER_PORT")
    job = _first("SLURM_JOB_ID")
    if addr is None:
        nodelist = _first("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
        addr = node_addr(expand_hostlist(nodelist)[0]) if nodelist else "127.0.0.1"
    if port is None:
        port = str(port_for_job(job)) if job else "29500"
    return DistInfo(int(rank), int(world), int(local), int(local_world or 1), addr, int(port))


def import_torch():
    """torch, or a one-line explanation of how to get it on this node."""
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.stderr.write(
            "error: PyTorch is not installed for %s. The hpq torch programs need it on every node "
            "(HyperPod DLAMIs ship it in a conda/venv: pass --python /path/to/python or set HPQ_PYTHON).\n"
            % sys.executable)
        raise SystemExit(2) from None
    return torch


def choose_backend(torch, requested: Optional[str] = None) -> str:
    """nccl on GPUs, gloo on CPU; the transport function may ask for gloo (TCP-only GPU nodes)."""
    want = requested or os.environ.get("HPQ_TORCH_BACKEND") or ""
    if want in ("nccl", "gloo"):
        if want == "nccl" and not torch.cuda.is_available():
            return "gloo"
        return want
    return "nccl" if torch.cuda.is_available() else "gloo"


def unused_neuron_devices(torch, dev_root: str = "/dev") -> int:
    """Neuron devices this process leaves idle: a Trainium node (``/dev/neuronN``, or the transport's
    ``HPQ_TORCH_BACKEND=xla``) training on the host CPUs. 0 when there are none or a GPU trains.

    hpq's programs have no torch-neuronx/XLA path, so on Trainium they train with gloo on the CPUs;
    the result must say so rather than read as a Trainium pass.
    """
    if torch.cuda.is_available():
        return 0
    found = len(glob.glob(os.path.join(dev_root, "neuron[0-9]*")))
    if found:
        return found
    return -1 if os.environ.get("HPQ_TORCH_BACKEND") == "xla" else 0


def exit_after_teardown(rc: int) -> None:
    """Leave the process without running interpreter teardown once the process group is destroyed.

    With torch 2.13's gloo backend a rank can abort at interpreter exit ("terminate called without an
    active exception") while objects that still reference the destroyed group are collected, turning a
    passing run into exit 134. Flushing and ``os._exit`` keeps the exit code the run earned.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
