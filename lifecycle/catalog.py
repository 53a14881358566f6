"""The instance catalog: every per-instance-type fact hpq relies on, written once.

Templates (allowed values, EFA counts), quota checks, Kubernetes manifests, the
transport decision and test verdicts all read this table. It ships to nodes with
the lifecycle code, so it uses the standard library only (Python >= 3.8).

Sources: EC2/SageMaker instance documentation and seed 004's measured table.
Where a value could not be confirmed against a primary source, the entry says so
in ``unconfirmed`` (field names), and ``note`` explains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

GPU = "gpu"
TRAINIUM = "trainium"
CPU = "cpu"


@dataclass(frozen=True)
class InstanceType:
    name: str
    accelerator: str  # GPU, TRAINIUM or CPU
    accelerator_model: str
    accelerator_count: int
    efa_interfaces: int
    efa_device_rdma: bool
    network_gbps: float
    expected_busbw_gbps: Optional[float] = None
    vcpus: int = 0
    memory_gib: int = 0
    unconfirmed: Tuple[str, ...] = ()
    note: str = ""

    @property
    def has_efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def family(self) -> str:
        return self.name.split(".")[1]

    @property
    def is_accelerated(self) -> bool:
        return self.accelerator != CPU


def _g(name, model, count, efa, gbps, vcpus, mem, busbw=None, unconfirmed=(), note=""):
    return InstanceType(name, GPU, model, count, efa, False, gbps, busbw, vcpus, mem, tuple(unconfirmed), note)


def _cpu(name, gbps, vcpus, mem):
    return InstanceType(name, CPU, "", 0, 0, False, gbps, None, vcpus, mem)


_ENTRIES: List[InstanceType] = [
    # --- g5: NVIDIA A10G, EFA without device RDMA -------------------------------------------------
    _g("ml.g5.xlarge", "A10G", 1, 0, 10, 4, 16),
    _g("ml.g5.2xlarge", "A10G", 1, 0, 10, 8, 32),
    _g("ml.g5.4xlarge", "A10G", 1, 0, 25, 16, 64),
    _g("ml.g5.8xlarge", "A10G", 1, 1, 25, 32, 128, unconfirmed=("efa_interfaces",)),
    _g("ml.g5.12xlarge", "A10G", 4, 1, 40, 48, 192, unconfirmed=("efa_interfaces",)),
    _g(
        "ml.g5.16xlarge", "A10G", 1, 0, 25, 64, 256, busbw=3.0,
        unconfirmed=("efa_interfaces",),
        note="EC2 lists one EFA interface for g5.16xlarge; on HyperPod seed 004 measured it as TCP-only "
        "(3.02 GB/s peak), so hpq treats it as non-EFA. A node probe that finds an EFA device overrides this.",
    ),
    _g("ml.g5.24xlarge", "A10G", 4, 1, 50, 96, 384, unconfirmed=("efa_interfaces",)),
    _g("ml.g5.48xlarge", "A10G", 8, 1, 100, 192, 768, busbw=12.0),
    # --- g6: NVIDIA L4 ------------------------------------------------------------------------------
    _g("ml.g6.8xlarge", "L4", 1, 1, 25, 32, 128, unconfirmed=("efa_interfaces",)),
    _g("ml.g6.12xlarge", "L4", 4, 1, 40, 48, 192, unconfirmed=("efa_interfaces",)),
    _g("ml.g6.16xlarge", "L4", 1, 1, 25, 64, 256, unconfirmed=("efa_interfaces",)),
    _g("ml.g6.24xlarge", "L4", 4, 1, 50, 96, 384, unconfirmed=("efa_interfaces",)),
    _g("ml.g6.48xlarge", "L4", 8, 1, 100, 192, 768, unconfirmed=("efa_interfaces",)),
    # --- g6e: NVIDIA L40S ---------------------------------------------------------------------------
    _g("ml.g6e.8xlarge", "L40S", 1, 1, 25, 32, 256, unconfirmed=("efa_interfaces",)),
    _g("ml.g6e.12xlarge", "L40S", 4, 1, 100, 48, 384, unconfirmed=("efa_interfaces",)),
    _g("ml.g6e.16xlarge", "L40S", 1, 1, 35, 64, 512, unconfirmed=("efa_interfaces",)),
    _g("ml.g6e.24xlarge", "L40S", 4, 2, 200, 96, 768, unconfirmed=("efa_interfaces",)),
    _g("ml.g6e.48xlarge", "L40S", 8, 4, 400, 192, 1536),
    # --- p4d/p4de: NVIDIA A100, EFA with device RDMA ---------------------------------------------
    InstanceType("ml.p4d.24xlarge", GPU, "A100-40GB", 8, 4, True, 400, 300.0, 96, 1152),
    InstanceType("ml.p4de.24xlarge", GPU, "A100-80GB", 8, 4, True, 400, 300.0, 96, 1152,
                 unconfirmed=("expected_busbw_gbps",), note="busbw assumed equal to p4d (same network)."),
    # --- p5 family: NVIDIA H100/H200, EFA with device RDMA -----------------------------------------
    InstanceType("ml.p5.48xlarge", GPU, "H100", 8, 32, True, 3200, 400.0, 192, 2048),
    InstanceType("ml.p5e.48xlarge", GPU, "H200", 8, 32, True, 3200, 400.0, 192, 2048,
                 unconfirmed=("expected_busbw_gbps",), note="busbw assumed equal to p5 (same network)."),
    InstanceType("ml.p5en.48xlarge", GPU, "H200", 8, 16, True, 3200, 400.0, 192, 2048,
                 unconfirmed=("expected_busbw_gbps",), note="busbw assumed equal to p5 (EFAv3, same 3200 Gbps)."),
    # --- Trainium --------------------------------------------------------------------------------
    InstanceType("ml.trn1.32xlarge", TRAINIUM, "Trainium", 16, 8, True, 800, None, 128, 512,
                 note="seed 004 measured 37 GB/s nccom all-reduce peak at 128 MB on 2 nodes; no target set."),
    InstanceType("ml.trn1n.32xlarge", TRAINIUM, "Trainium", 16, 16, True, 1600, None, 128, 512),
    InstanceType("ml.trn2.48xlarge", TRAINIUM, "Trainium2", 16, 16, True, 3200, None, 192, 2048,
                 unconfirmed=("efa_interfaces",)),
    # --- controller / login nodes ----------------------------------------------------------------
    _cpu("ml.m5.large", 10, 2, 8),
    _cpu("ml.m5.xlarge", 10, 4, 16),
    _cpu("ml.m5.2xlarge", 10, 8, 32),
    _cpu("ml.m5.4xlarge", 10, 16, 64),
    _cpu("ml.m5.8xlarge", 10, 32, 128),
    _cpu("ml.m5.12xlarge", 12, 48, 192),
    _cpu("ml.m5.16xlarge", 20, 64, 256),
    _cpu("ml.m5.24xlarge", 25, 96, 384),
    _cpu("ml.c5.large", 10, 2, 4),
    _cpu("ml.c5.xlarge", 10, 4, 8),
    _cpu("ml.c5.2xlarge", 10, 8, 16),
    _cpu("ml.c5.4xlarge", 10, 16, 32),
    _cpu("ml.c5.9xlarge", 12, 36, 72),
    _cpu("ml.c5.12xlarge", 12, 48, 96),
    _cpu("ml.c5.18xlarge", 25, 72, 144),
    _cpu("ml.c5.24xlarge", 25, 96, 192),
]

CATALOG: Dict[str, InstanceType] = {entry.name: entry for entry in _ENTRIES}


class UnknownInstanceType(ValueError):
    """Raised with a message that lists close matches, for one-line CLI errors."""


def normalize(name: str) -> str:
    """Accept both ``p5.48xlarge`` and ``ml.p5.48xlarge``."""
    name = name.strip()
    return name if name.startswith("ml.") else "ml." + name


def lookup(name: str) -> InstanceType:
    key = normalize(name)
    try:
        return CATALOG[key]
    except KeyError:
        family = key.split(".")[1] if key.count(".") >= 2 else ""
        near = [n for n in CATALOG if family and n.split(".")[1] == family]
        hint = ("; known %s sizes: %s" % (family, ", ".join(near))) if near else ""
        raise UnknownInstanceType("unknown instance type %r%s" % (name, hint)) from None


def names(kinds: Iterable[str] = (GPU, TRAINIUM, CPU)) -> List[str]:
    """Instance type names of the given accelerator kinds, in catalog order."""
    wanted = set(kinds)
    return [e.name for e in _ENTRIES if e.accelerator in wanted]


def gpu_types() -> List[str]:
    return names([GPU])


def trainium_types() -> List[str]:
    return names([TRAINIUM])


def controller_types() -> List[str]:
    return names([CPU])
