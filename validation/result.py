"""What a backend brings back (the raw outcome) and what the judge makes of it (the result).

Backends only run and collect; judges only read. The raw outcome is the same shape whichever backend
produced it, which is what lets one judge serve Slurm, EKS and the rehearsal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpq.scripts.outcome import PASS, json_safe

TIMED_OUT = 124  # coreutils timeout's status (the backends report a run they stopped with it)


@dataclass
class RawOutcome:
    """The node program's output as it came back, before anyone judged it."""

    exit_code: int  # the node program's status (EKS: 0 when the job Succeeded, 1 otherwise; 124 timed out)
    log: str  # its standard output (the launcher's log: nccl-tests table, hpq-env blocks, losses, JSON)
    stderr: str = ""
    command: str = ""  # what ran, as a user would type it (Slurm) or the job's name (EKS)
    state: str = ""  # the backend's own word for how it ended (EKS job state; "exited"/"timed out")
    detail: str = ""  # the backend's reason (EKS job condition message)
    files: dict[str, str] = field(default_factory=dict)  # result files read back (run-nanogpt's JSON)
    facts: dict[str, Any] = field(default_factory=dict)  # what the backend saw of the nodes (EKS NodeFacts)
    host_nodes: dict[str, str] = field(default_factory=dict)  # host name a program printed -> node (EKS: pod's)

    @property
    def timed_out(self) -> bool:
        return self.exit_code == TIMED_OUT

    def stderr_tail(self, n: int = 10) -> list[str]:
        return self.stderr.strip().splitlines()[-n:]


@dataclass
class TestResult:
    """One judged test: the outcome (PASS/FAIL/INCONCLUSIVE), its exit code, the message whose first line
    reads at a glance, and the evidence (``data``), the same whichever backend ran it."""

    test: str
    backend: str
    cluster: str
    outcome: str
    exit_code: int
    message: str
    instance_type: str | None = None
    nodes: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    __test__ = False  # not a pytest class, whatever its name

    @property
    def ok(self) -> bool:
        return self.outcome == PASS

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON-ready: ``outcome`` first, then where it ran, then the evidence."""
        doc: dict[str, Any] = {"outcome": self.outcome, "ok": self.ok, "exit_code": self.exit_code,
                               "test": self.test, "backend": self.backend, "cluster": self.cluster,
                               "instance_type": self.instance_type, "nodes": self.nodes, "message": self.message}
        for key, value in self.data.items():
            doc.setdefault(key, value)
        return json_safe(doc)

