"""What every stage shares: the failure it raises, the progress printer's signature, a log's last lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpq.errors import OperationFailed

TAIL_LINES = 15
Say = Callable[[str, str], None]  # (who, what): hpq.rehearsal.run.Progress


class Failure(OperationFailed):
    """A check failed: where (stage, node, step), why, and the log that shows it.

    ``found``: the summary keys the stage had filled before it failed (a failed NCCL run's report, say)."""

    def __init__(self, stage: str, cause: str, node: str | None = None, step: str | None = None,
                 log: str | None = None, last_lines: list[str] | None = None, found: dict[str, Any] | None = None):
        super().__init__(cause)
        self.stage, self.cause, self.node, self.step = stage, cause, node, step
        self.log, self.last_lines = log, last_lines or []
        self.found = found or {}

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "node": self.node, "step": self.step, "cause": self.cause, "log": self.log,
                "last_lines": self.last_lines}


def tail(path: Path | str, n: int = TAIL_LINES) -> list[str]:
    try:
        with open(path, errors="replace") as fh:
            return [ln.rstrip("\n") for ln in fh.readlines()[-n:]]
    except OSError:
        return []
