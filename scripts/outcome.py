"""The three outcomes every hpq verdict has, their exit codes, and JSON that is always valid.

PASS (exit 0) needs every check to hold on positive evidence. FAIL (exit 1) means a check failed.
INCONCLUSIVE (exit 3) means evidence is missing (no published figure, no transport line in the log,
a log holding several runs ...): never a pass, and the message says what to run to get the evidence.
Exit 2 stays bad input and 130 an interrupt (Ctrl-C), so the four are told apart by scripts.

Standard library only: it ships to the nodes with the node commands.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_CODES = {PASS: EXIT_PASS, FAIL: EXIT_FAIL, INCONCLUSIVE: EXIT_INCONCLUSIVE}
NOT_JUDGED = "not judged"  # a check that does not apply (or was waived): neither evidence for nor against

_RANK = {PASS: 0, NOT_JUDGED: 0, INCONCLUSIVE: 1, FAIL: 2}


def combine(outcomes: Iterable[str]) -> str:
    """FAIL if any check failed, else INCONCLUSIVE if any lacked evidence, else PASS."""
    worst = PASS
    for o in outcomes:
        if _RANK[o] > _RANK[worst]:
            worst = o
    return worst


def exit_code(outcome: str) -> int:
    return EXIT_CODES[outcome]


def headline(outcome: str, number: str, expectation: str, reason: str) -> str:
    """The verdict's first line: ``OUTCOME: <number> vs <expectation>: <reason>``, readable at a glance."""
    return "%s: %s vs %s: %s" % (outcome, number, expectation, reason)


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN or Infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """json.dumps that cannot print NaN/Infinity tokens (strict JSON for any input)."""
    return json.dumps(json_safe(value), allow_nan=False, **kwargs)
