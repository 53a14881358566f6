"""The instance catalog: every per-instance-type fact hpq relies on, written once.

Templates (allowed values, EFA counts), quota checks, Kubernetes manifests, the
transport decision and test verdicts all read this table. It ships to nodes with
the lifecycle code, so it uses the standard library only (Python >= 3.8).

Sources: EC2/SageMaker instance documentation and the measured runs ("seed 004", docs/design.md).
Where a value could not be confirmed against a primary source, the entry says so
in ``unconfirmed`` (field names), and ``note`` explains.

The all-reduce bus bandwidth a healthy cluster reaches is kept apart from the
hardware facts, at the end of this module (``busbw_table``, ``expected_busbw``):
one figure for one node (NVLink / NeuronLink / PCIe inside the instance) and
figures per node count for several nodes (network-bound), each with the
publication it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

GPU = "gpu"
TRAINIUM = "trainium"
CPU = "cpu"


# NeuronCores per Neuron device as processes see them: 2 on trn1/trn1n; trn2 has 8 physical cores, 4 logical ones
# with the default logical-core setting LNC=2 (AWS Neuron docs, "Developer Guide for Training with PyTorch
# NeuronX": "On Trn2, each Trainium accelerator has 8 NeuronCores (default 4 Logical NeuronCores)";
# https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-features/logical-neuroncore-config.html).
NEURON_CORES_PER_DEVICE = {"trn1": 2, "trn1n": 2, "trn2": 4}


@dataclass(frozen=True)
class InstanceType:
    name: str
    accelerator: str  # GPU, TRAINIUM or CPU
    accelerator_model: str
    accelerator_count: int
    efa_interfaces: int
    efa_device_rdma: bool
    network_gbps: float
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

    @property
    def neuron_cores(self) -> int:
        """NeuronCores a node of this type offers to processes (0 on GPU and CPU types)."""
        if self.accelerator != TRAINIUM:
            return 0
        return self.accelerator_count * NEURON_CORES_PER_DEVICE.get(self.family, 2)


def _g(name, model, count, efa, gbps, vcpus, mem, unconfirmed=(), note=""):
    return InstanceType(name, GPU, model, count, efa, False, gbps, vcpus, mem, tuple(unconfirmed), note)


def _cpu(name, gbps, vcpus, mem):
    return InstanceType(name, CPU, "", 0, 0, False, gbps, vcpus, mem)


_ENTRIES: List[InstanceType] = [
    # --- g5: NVIDIA A10G, EFA without device RDMA -------------------------------------------------
    _g("ml.g5.xlarge", "A10G", 1, 0, 10, 4, 16),
    _g("ml.g5.2xlarge", "A10G", 1, 0, 10, 8, 32),
    _g("ml.g5.4xlarge", "A10G", 1, 0, 25, 16, 64),
    _g("ml.g5.8xlarge", "A10G", 1, 1, 25, 32, 128, unconfirmed=("efa_interfaces",)),
    _g("ml.g5.12xlarge", "A10G", 4, 1, 40, 48, 192, unconfirmed=("efa_interfaces",)),
    _g(
        "ml.g5.16xlarge", "A10G", 1, 0, 25, 64, 256,
        unconfirmed=("efa_interfaces",),
        note="EC2 lists one EFA interface for g5.16xlarge; on HyperPod seed 004 measured it as TCP-only "
        "(3.02 GB/s peak), so hpq treats it as non-EFA. A node probe that finds an EFA device overrides this.",
    ),
    _g("ml.g5.24xlarge", "A10G", 4, 1, 50, 96, 384, unconfirmed=("efa_interfaces",)),
    _g("ml.g5.48xlarge", "A10G", 8, 1, 100, 192, 768),
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
    InstanceType("ml.p4d.24xlarge", GPU, "A100-40GB", 8, 4, True, 400, 96, 1152),
    InstanceType("ml.p4de.24xlarge", GPU, "A100-80GB", 8, 4, True, 400, 96, 1152),
    # --- p5 family: NVIDIA H100/H200, EFA with device RDMA -----------------------------------------
    InstanceType("ml.p5.48xlarge", GPU, "H100", 8, 32, True, 3200, 192, 2048),
    InstanceType("ml.p5e.48xlarge", GPU, "H200", 8, 32, True, 3200, 192, 2048),
    InstanceType("ml.p5en.48xlarge", GPU, "H200", 8, 16, True, 3200, 192, 2048),
    # --- Trainium --------------------------------------------------------------------------------
    InstanceType("ml.trn1.32xlarge", TRAINIUM, "Trainium", 16, 8, True, 800, 128, 512),
    InstanceType("ml.trn1n.32xlarge", TRAINIUM, "Trainium", 16, 16, True, 1600, 128, 512),
    InstanceType("ml.trn2.48xlarge", TRAINIUM, "Trainium2", 16, 16, True, 3200, 192, 2048,
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
# Service Quotas codes of SageMaker's "<type> for cluster usage" quota (HyperPod instances of a type), as seen
# in public account listings; each is checked against its
# name at run time by hpq.aws.quotas, and any type not listed is found by name.
CLUSTER_USAGE_QUOTA_CODES = {
    "ml.p4d.24xlarge": "L-47E0BC8F",
    "ml.p4de.24xlarge": "L-BEF3120E",
    "ml.p5.48xlarge": "L-8762A75F",
    "ml.p5e.48xlarge": "L-FD431820",
    "ml.p5en.48xlarge": "L-6EF3AE05",
    "ml.g5.16xlarge": "L-86822EDB",
}
# The Slurm controller's default type, written once: the templates' ControllerInstanceType default
# (hpq.cfn.hyperpod), the controller quota `hpq check-quotas` counts and the help text that names it.
DEFAULT_CONTROLLER_TYPE = "ml.m5.xlarge"


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


# ------------------------------------------------------------------ expected all-reduce bus bandwidth
#
# What a healthy cluster reaches depends on where the bytes travel. Inside one instance an all-reduce
# runs over NVLink / NeuronLink (hundreds of GB/s on p4d/p5); across instances it is bound by the
# network, and the figure falls as nodes are added (p5 on HyperPod: 445 GB/s on 2 nodes, 348 on 4, 278
# on 8). So every figure belongs to one node count and says where it comes from and what software
# produced it; ``expected_busbw(type, nodes)`` picks the one for a run, and a type or node count
# without one has no expectation (the verdict is then INCONCLUSIVE, never PASS).

PUBLISHED = "published"  # a healthy run published by AWS (first) or NVIDIA / a public benchmark
ASSUMED = "assumed"  # another type's published figure, for a type with the same links
SEED = "seed"  # measured by this project's seed on HyperPod; an excerpt, not a publication


@dataclass(frozen=True)
class Busbw:
    """One all-reduce bus bandwidth figure (nccl-tests/nccom-test ``busbw``, GB/s) and its source."""

    gbps: float
    nodes: int  # the node count it belongs to; 1 = inside one instance
    source: str
    kind: str = PUBLISHED  # PUBLISHED, ASSUMED or SEED (what the verdict calls it)
    software: str = ""  # what produced it (nccl-tests / NCCL / EFA versions) where the source says


@dataclass(frozen=True)
class BusbwTable:
    one_node: Optional[Busbw]
    several_nodes: Tuple[Busbw, ...]  # ascending node counts, each > 1
    why_not: str = ""  # why a part is missing (no published figure, or nothing to measure)


# Healthy published measurements, cited where they are read. Figures are the peak busbw of the run.
# The figures of NVIDIA/nccl issue 527 (a thread titled "Slow bus bandwidth" about p4d) are NOT used:
# a report of a slow cluster is not a healthy figure.
_AWS_NCCL_README = ("https://github.com/awslabs/awsome-distributed-ai/blob/main/micro-benchmarks/nccl-tests/"
                    "README.md")
_P4DE_AWS = _AWS_NCCL_README + (" (Results, Slurm: all_reduce_perf 8 B..2 GB on 2x p4de.24xlarge, busbw 78.33 GB/s "
                                "at 2 GiB; tests/data/nccl/aws_2x_p4de_all_reduce_perf.txt)")
_P5_AWS = _AWS_NCCL_README + (" (Results, Slurm: all_reduce_perf 8 B..16 GB on 2x p5.48xlarge, busbw 487.09 GB/s "
                              "at 16 GiB, 443.72 at 2 GiB; tests/data/nccl/aws_2x_p5_all_reduce_perf.txt)")
_AWS_SOFTWARE = ("AWS's nccl-tests container of micro-benchmarks/nccl-tests (EFA installer, NCCL, aws-ofi-nccl "
                 "and nccl-tests built from its Dockerfile)")
_P5_HYPERPOD = ("https://github.com/crazyguitar/aws-gpu-communication-benchmark data/nccl_all_reduce.csv "
                "(nccl-tests all_reduce_perf on 2-32 p5.48xlarge of a SageMaker HyperPod EKS cluster, busbw "
                "at 2 GiB, the largest message hpq's EKS test sends)")
_H100_NVLS = ("https://github.com/NVIDIA/nccl/issues/1442 (one p5.48xlarge, 8x H100: ~480 GB/s all-reduce with "
              "NVLink SHARP) and https://github.com/NVIDIA/nccl-tests/issues/212 (NCCL maintainer: ~480 GB/s peak "
              "busbw on 8 H100)")
_H200_NVLINK = ("https://github.com/NVIDIA/nccl-tests/issues/272 (one server, 8x H200 over NVLink4: "
                "all_reduce_perf peak 475 GB/s)")
_SEED_G5_16 = ("seed 004 excerpt (measured on HyperPod, not published): 2x ml.g5.16xlarge over TCP, nccl-tests "
               "all_reduce_perf peak 3.02 GB/s (tests/data/nccl/seed004_slurm_2x_g5.16xlarge_excerpt.txt)")
_SEED_G5_48 = ("seed 004 excerpt (measured on HyperPod, not published): 2x ml.g5.48xlarge over EFA without device "
               "RDMA, all_reduce_perf about 12 GB/s")
_SEED_TRN1 = ("seed 004 excerpt (measured on HyperPod, not published): 2x ml.trn1.32xlarge, nccom-test all-reduce "
              "peak 37.0 GB/s at 128 MiB (tests/data/nccl/seed004_nccom_2x_trn1.32xlarge_excerpt.txt)")

# A level for orientation only, printed when no figure is known: half of the network line rate. It is
# derived from a data sheet, not measured, so it never decides a verdict.
DERIVED_LINE_RATE_FRACTION = 0.5


def _several(source: str, figures: Dict[int, float], kind: str = PUBLISHED, software: str = "") -> Tuple[Busbw, ...]:
    return tuple(Busbw(g, n, source, kind, software) for n, g in sorted(figures.items()))


_P5_SEVERAL = (Busbw(487.09, 2, _P5_AWS, PUBLISHED, _AWS_SOFTWARE),) + _several(
    _P5_HYPERPOD, {4: 347.6, 8: 278.2, 16: 270.9, 32: 269.5}, software="nccl-tests on HyperPod EKS (see the repo)")
_P4DE_SEVERAL = (Busbw(78.33, 2, _P4DE_AWS, PUBLISHED, _AWS_SOFTWARE),)


def _assumed(table: BusbwTable, why: str, one_node: Optional[Busbw] = None) -> BusbwTable:
    """Another type's figures for a type with the same links, marked as assumed in every source."""
    several = tuple(Busbw(b.gbps, b.nodes, "assumed equal to %s: %s" % (why, b.source), ASSUMED, b.software)
                    for b in table.several_nodes)
    one = one_node or (table.one_node and Busbw(table.one_node.gbps, 1, "assumed equal to %s: %s"
                                                % (why, table.one_node.source), ASSUMED, table.one_node.software))
    return BusbwTable(one, several, table.why_not)


_PUBLISHED: Dict[str, BusbwTable] = {
    "ml.p4de.24xlarge": BusbwTable(None, _P4DE_SEVERAL),
    "ml.p4d.24xlarge": _assumed(BusbwTable(None, _P4DE_SEVERAL),
                                "p4de.24xlarge (same 8x A100 NVSwitch and 4x 100 Gbps EFA)"),
    "ml.p5.48xlarge": BusbwTable(Busbw(480.0, 1, _H100_NVLS), _P5_SEVERAL),
    "ml.p5e.48xlarge": _assumed(BusbwTable(None, _P5_SEVERAL), "p5.48xlarge (same 3200 Gbps EFA)",
                                Busbw(475.0, 1, _H200_NVLINK)),
    "ml.p5en.48xlarge": _assumed(BusbwTable(None, _P5_SEVERAL), "p5.48xlarge (same 3200 Gbps, on EFAv3)",
                                 Busbw(475.0, 1, _H200_NVLINK)),
    "ml.g5.16xlarge": BusbwTable(None, (Busbw(3.0, 2, _SEED_G5_16, SEED),)),
    "ml.g5.48xlarge": BusbwTable(None, (Busbw(12.0, 2, _SEED_G5_48, SEED),)),
    "ml.trn1.32xlarge": BusbwTable(None, (Busbw(37.0, 2, _SEED_TRN1, SEED),)),
}


def busbw_table(name: str) -> BusbwTable:
    """One-node and several-node figures for ``name`` (published, assumed or seed), and why parts are missing."""
    entry = lookup(name)
    table = _PUBLISHED.get(entry.name)
    why = []
    one = table.one_node if table else None
    several = table.several_nodes if table else ()
    if one is None:
        if entry.accelerator_count < 2:
            why.append("one node: a single %s has nothing to all-reduce with" % (entry.accelerator_model or "CPU"))
        else:
            why.append("one node: no published figure for %s on one node" % entry.name)
    if not several:
        why.append("several nodes: no published multi-node figure for %s" % entry.name)
    return BusbwTable(one, several, "; ".join(why))


def derived_level(name: str) -> Optional[float]:
    """Half of the network line rate in GB/s: printed for orientation where no figure is known, never judged."""
    entry = lookup(name)
    return round(entry.network_gbps / 8.0 * DERIVED_LINE_RATE_FRACTION, 2) if entry.network_gbps else None


def expected_busbw(name: str, nodes: int) -> Optional[Busbw]:
    """The figure a healthy run of ``nodes`` nodes should reach, or None when none is known.

    Several nodes: the figure for that count, else for the nearest published count ABOVE it (busbw
    falls as nodes are added, as every published series shows, so what a healthy larger cluster
    reaches a healthy smaller one reaches too; ``Busbw.nodes`` says which count it is). Beyond the
    largest published count there is no figure: extrapolating a 2-node figure to 64 nodes would
    fail healthy clusters or pass broken ones.
    """
    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    table = busbw_table(name)
    if nodes == 1:
        return table.one_node
    above = [b for b in table.several_nodes if b.nodes >= nodes]
    return above[0] if above else None


def lowest_busbw(name: str) -> Optional[Busbw]:
    """The lowest figure of any node count (the rehearsal's orientation when the count is unknown)."""
    table = busbw_table(name)
    figures = list(table.several_nodes) + ([table.one_node] if table.one_node else [])
    return min(figures, key=lambda b: b.gbps) if figures else None


# ------------------------------------------------------------------ physical ceiling of busbw
#
# No all-reduce moves data faster than the links it runs on: a busbw above a GPU's NVLink (or PCIe)
# bandwidth plus the instance's network line rate, or a Trainium chip's DMA / memory bandwidth plus the
# network, is an error in the log, not a record. Sources:
#   A100 NVLink 600 GB/s, H100/H200 SXM NVLink 900 GB/s: NVIDIA's data sheets
#     (https://www.nvidia.com/en-us/data-center/a100/, /h100/, /h200/);
#   A10G, L4, L40S: PCIe Gen4 x16, 64 GB/s both directions (PCI-SIG 16 GT/s x 16 lanes; no NVLink);
#   Trainium: 1 TB/s of DMA bandwidth per chip
#     (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trainium.html);
#   Trainium2: 2.9 TB/s of device memory bandwidth per chip
#     (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/arch/trainium2_arch.html).
_LINK_GBYTES = {"A100-40GB": 600.0, "A100-80GB": 600.0, "H100": 900.0, "H200": 900.0,
                "A10G": 64.0, "L4": 64.0, "L40S": 64.0, "Trainium": 1000.0, "Trainium2": 2900.0}

# With no instance type known: no interconnect today moves 10 TB/s per device (NVLink 5: 1.8 TB/s).
UNIVERSAL_CEILING_GBPS = 10000.0


def busbw_ceiling(name: Optional[str]) -> Tuple[float, str]:
    """(GB/s, why): the highest busbw the type's links can carry; above it a log is in error."""
    if name:
        entry = lookup(name)
        link = _LINK_GBYTES.get(entry.accelerator_model, 0.0)
        net = entry.network_gbps / 8.0
        if entry.is_accelerated and link:
            return link + net, ("%s: %g GB/s %s plus %g GB/s of network (%g Gbps)" % (
                entry.name, link, "NVLink" if link > 100 and entry.accelerator == GPU else
                ("PCIe Gen4 x16" if entry.accelerator == GPU else "device bandwidth per chip"), net,
                entry.network_gbps))
    return UNIVERSAL_CEILING_GBPS, "no interconnect carries more than %g GB/s" % UNIVERSAL_CEILING_GBPS
