"""What a user asks a cluster to prove, independent of how the cluster is reached.

One request type for every test and every backend (Slurm over SSH, EKS as Kubernetes jobs, the
rehearsal): the options mean the same everywhere, and the request checks itself once, on creation, so a
backend never sees a request it would have to refuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpq.errors import UsageError
from hpq.lifecycle import catalog
from hpq.scripts import nccl_report

NCCL, NANOGPT, NCCOM, SWEEP, VALIDATE, DOCTOR = "nccl", "nanogpt", "nccom", "sweep", "validate", "doctor"
# The test family, in the order `hpq test --help` lists it. A new test adds its name here, a node program,
# a judge (validation/judges.py) and one entry per backend (validation/slurm.py, validation/eks.py).
TESTS = (NCCL, NANOGPT, NCCOM, SWEEP, VALIDATE, DOCTOR)
DEFAULT_NODES = 2
DEFAULT_TIMEOUT_S = 3600
MAX_TIMEOUT_S = 7 * 24 * 3600


@dataclass(frozen=True)
class TestRequest:
    """One test to run: ``nodes`` x ``gpus`` of ``instance_type`` (None: the backend's defaults)."""

    test: str
    nodes: int | None = None  # None: DEFAULT_NODES, or every idle node for the sweep, every node for the doctor
    gpus: int | None = None  # per node; None: all the node has
    instance_type: str | None = None  # None: the cluster's accelerated worker type
    expect: str | None = None  # nccl/nccom: "catalog" (default), "none" or a figure in GB/s
    extra: tuple[str, ...] = ()  # more arguments for the node program (split as a shell would)
    timeout_s: int = DEFAULT_TIMEOUT_S
    nccl_debug: str | None = None
    fields: dict[str, str] = field(default_factory=dict)  # backend-specific (EKS options live in pick.Reach.eks)

    __test__ = False  # not a pytest class, whatever its name

    def __post_init__(self) -> None:
        if self.test not in TESTS:
            raise UsageError(f"unknown test {self.test!r}; the tests are {', '.join(TESTS)}")
        if self.nodes is not None and not 1 <= self.nodes <= 4096:
            raise UsageError(f"NODES {self.nodes}: must be 1 to 4096")
        if self.gpus is not None and not 1 <= self.gpus <= 64:
            raise UsageError(f"GPUS {self.gpus}: must be 1 to 64")
        if self.test == SWEEP and self.nodes is not None and self.nodes < 2:
            raise UsageError("the sweep measures pairs of nodes: NODES must be at least 2 (or left out: every "
                             "idle node)")
        if self.expect is not None and self.test not in (NCCL, NCCOM):
            raise UsageError(f"--expect judges a bandwidth: it applies to nccl and nccom, not to {self.test}")
        if self.expect is not None:
            nccl_report.parse_expect(self.expect)  # refuses what the node program would refuse
        if not 1 <= self.timeout_s <= MAX_TIMEOUT_S:
            raise UsageError(f"--timeout {self.timeout_s}: must be 1 to {MAX_TIMEOUT_S} seconds")
        if self.instance_type is not None and self.gpus is not None:
            have = catalog.lookup(self.instance_type).accelerator_count
            if self.gpus > have:
                raise UsageError(f"GPUS {self.gpus}: {self.instance_type} has {have} per node")

    @property
    def node_count(self) -> int | None:
        """The nodes asked for, with the default filled in (None: the sweep's every idle node)."""
        if self.nodes is not None:
            return self.nodes
        return None if self.test in (SWEEP, DOCTOR) else DEFAULT_NODES
