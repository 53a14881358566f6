"""The backend interface: how a test request reaches a cluster, and the one loop that drives it.

A backend resolves the cluster once (what it is, which type its workers are), runs a request and brings
back the raw outcome, and cleans up after itself. It never judges: :func:`run_test` hands the raw outcome
to the test's judge (validation/judges.py), so Slurm, EKS and the rehearsal reach the same verdict from
the same evidence. Which backend serves a cluster is decided by what the cluster is
(validation/pick.py), not by what the user typed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from hpq.scripts import outcome
from hpq.validation.request import TestRequest
from hpq.validation.result import RawOutcome, TestResult

Echo = Callable[[str], None]


@dataclass(frozen=True)
class ClusterFacts:
    """What a backend learned when it resolved the cluster."""

    name: str
    orchestrator: str  # hpq.vocab's ORCHESTRATORS: "slurm" or "eks"
    worker_type: str | None  # the accelerated group's type (what the tests measure); None: not known


class Backend(Protocol):
    """One orchestrator's way of running a test request."""

    name: str  # "slurm", "eks", "rehearsal": shown in every result

    def resolve(self) -> ClusterFacts:
        """Find the cluster (one round of API calls at most) and say what it is."""

    def run(self, request: TestRequest, instance_type: str | None, echo: Echo) -> RawOutcome:
        """Run the request's node program on the cluster; stream progress to ``echo``; return what came back."""

    def judge(self, request: TestRequest, raw: RawOutcome, instance_type: str | None) -> TestResult:
        """The test's judge, with what this backend knows of its network (a rehearsal's bridge, EKS node facts)."""

    def cleanup(self) -> None:
        """Remove what ``run`` left (jobs, pods); safe to call twice and after a failed ``run``."""


def run_test(backend: Backend, request: TestRequest, echo: Echo) -> TestResult:
    """Resolve, run, judge, clean up (also on Ctrl-C): the one loop every `hpq test` command goes through."""
    facts = backend.resolve()
    instance_type = request.instance_type or facts.worker_type
    if instance_type and request.gpus is not None:  # GPUS against the type the cluster named
        TestRequest(**{**request.__dict__, "instance_type": instance_type})
    try:
        raw = backend.run(request, instance_type, echo)
    finally:
        backend.cleanup()
    result = backend.judge(request, raw, instance_type)
    if result.exit_code == outcome.EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    return result
