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


# A headline's numbers read at a glance: a few decimals, never a float's 17-digit repr (8.203554153442383) or
# the 300 digits "%.2f" gives 1e300. Past this magnitude, or under one unit of the last decimal, significant
# digits in e-notation say it instead.
FMT_LARGEST = 1e9
FMT_TEXT_CHARS = 24  # a value that is not a number (a metrics file's string) is cut to this many characters


def fmt_number(value: Any, decimals: int = 4) -> str:
    """``value`` for a verdict's text: ``decimals`` places (8.2036), e-notation (1.235e+12, 1.2e-07) where
    fixed places would be long or all zeros, 'nan'/'inf' as they are, integers whole; anything else cut short."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        text = str(value)
        return text if len(text) <= FMT_TEXT_CHARS else text[:FMT_TEXT_CHARS - 3] + "..."
    if isinstance(value, int) and abs(value) < FMT_LARGEST:
        return "%d" % value
    try:
        f = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return ">1e+308" if value > 0 else "<-1e+308"
    if not math.isfinite(f):
        return str(f)
    if f == 0 or 10.0 ** -decimals <= abs(f) < FMT_LARGEST:
        return "%.*f" % (decimals, f)
    return "%.*g" % (max(decimals, 2), f)


def fmt_figure(value: Any) -> str:
    """An expected figure as a person writes it (300, 12.5, 0.001): ``fmt_number`` to 2 places, trailing zeros
    dropped; unlike "%g", 1698906 stays 1698906 rather than 1.69891e+06."""
    shown = fmt_number(value, 2)
    if "." in shown and "e" not in shown:
        shown = shown.rstrip("0").rstrip(".")
    return shown


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
