"""Argument checks shared by the node commands (run-nccl-test, run-nccom-test, run-nanogpt).

A bad argument is one line on stderr and exit 2 before anything is launched: salloc, srun and
mpirun are expensive places to learn that ``-e inf`` or ``-n 0`` meant nothing. Standard library
only (nodes run these with the system python3).
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Optional

MAX_NODES = 6758  # sagemaker ClusterInstanceCount: no cluster has more nodes
MAX_PER_NODE = 1024  # processes per node: far above any instance's GPUs or NeuronCores
# An instance type as EC2 or HyperPod names it (p5.48xlarge, ml.g5.16xlarge). Unknown but well-formed
# types are allowed: a type newer than the catalog is judged without an expectation.
INSTANCE_TYPE_RE = re.compile(r"(ml\.)?[a-z]+[0-9][a-z0-9-]*\.([0-9]*xlarge|large|medium|small|micro|nano|metal[-a-z0-9]*)")
# NCCL's logging levels (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/logging.html);
# the one list, also for hpq eks (manifests/render.py).
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
_SIZE_RE = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGT]?)")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr (``<prog>: error: ...``) and exit 2, no usage dump."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, "%s: error: %s (see --help)\n" % (self.prog, message))


def byte_size(text: str) -> int:
    """nccl-tests style sizes in bytes: 8, 128K, 1M, 16G, 1.5G (powers of 1024, a whole number of bytes)."""
    t = str(text).strip().upper()
    if t.endswith("B"):
        t = t[:-1]
    m = _SIZE_RE.fullmatch(t)
    if not m:
        raise argparse.ArgumentTypeError("not a size: %r (use e.g. 8, 1M, 16G)" % text)
    number, unit = m.group(1), m.group(3)
    value = float(number) * _UNITS[unit]
    if value != int(value):
        raise argparse.ArgumentTypeError("not a whole number of bytes: %r" % text)
    if value <= 0:
        raise argparse.ArgumentTypeError("size must be positive: %r" % text)
    if value > 1 << 50:
        raise argparse.ArgumentTypeError("size too large: %r (at most 1024T)" % text)
    return int(value)


def count(lo: int, hi: int, what: str):
    """An argparse type: a whole number from ``lo`` to ``hi``."""

    def convert(text: str) -> int:
        if not re.fullmatch(r"[0-9]{1,9}", str(text).strip()):
            raise argparse.ArgumentTypeError("%s must be a whole number, got %r" % (what, text))
        value = int(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError("%s must be %d to %d, got %d" % (what, lo, hi, value))
        return value

    return convert


def positive(text: str) -> float:
    """A positive, finite number (seconds, TFLOP/s, MB): nan and inf would slip past a plain ``<= 0``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError("must be a positive finite number, got %r" % text)
    return value


def instance_type(text: str) -> str:
    if not INSTANCE_TYPE_RE.fullmatch(text):
        raise argparse.ArgumentTypeError("not an instance type: %r (e.g. ml.p5.48xlarge)" % text)
    return text


def add_nodes_argument(ap: argparse.ArgumentParser) -> None:
    """The positional NODES every node command takes first (each names its per-node count itself)."""
    ap.add_argument("nodes", nargs="?", type=count(1, MAX_NODES, "NODES"), default=None,
                    help="nodes (default: the allocation's, else 2)")


def check_size_range(ap: argparse.ArgumentParser, minbytes: str, maxbytes: str) -> None:
    """-b and -e are sizes, the first at most the second (otherwise no size would run)."""
    try:
        lo, hi = byte_size(minbytes), byte_size(maxbytes)
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    if lo > hi:
        ap.error("-b %s is larger than -e %s: no message size would run" % (minbytes, maxbytes))


def check_nccl_debug(ap: argparse.ArgumentParser, value: Optional[str]) -> None:
    """--nccl-debug, when given, must be a level NCCL knows."""
    if value is not None and value.upper() not in NCCL_DEBUG_LEVELS:
        ap.error("--nccl-debug %r: use one of %s" % (value, ", ".join(NCCL_DEBUG_LEVELS)))
