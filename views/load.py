"""Read result JSON files for the report: bounded, strict, and told apart by their shape.

Accepted (each file one JSON object; ``hpq rehearse --output json`` holds several results):
- ``hpq test ... --output json``: hpq.validation.result.TestResult.to_dict() (test, backend, cluster, outcome...);
- the node programs' result files in /fsx/hpq-results: run-nccl-test / run-nccom-test (nccl_report's
  ``report_to_dict`` plus the run's facts), the sweep (scripts/sweep.build_report), run-nanogpt;
- ``hpq nccl-report --output json``; ``hpq rehearse --output json`` (its nccl, nanogpt and sweep results).

Anything else (not UTF-8 JSON, nested past reason, over :data:`MAX_FILE_BYTES`, an object of another shape) is
a :class:`ReportInputError` (exit 2) naming the file. Every value is untrusted: numbers are taken only when
finite, text is kept as text (the page escapes it) and cut at :data:`MAX_TEXT`.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from hpq import user_files
from hpq.errors import UsageError
from hpq.scripts.outcome import FAIL, INCONCLUSIVE, PASS

MAX_FILE_BYTES = 16 << 20  # a 128-node sweep's JSON is well under 1 MiB
MAX_FILES = 64
MAX_TOTAL_BYTES = 64 << 20  # all files together: the page stays a few MB, memory a few hundred
MAX_TEXT = 4000  # characters of one message shown; the rest is cut with a note
MAX_ROWS = 2000  # benchmark rows, pairs, history points, hosts: more is not a result hpq wrote
OUTCOMES = (PASS, FAIL, INCONCLUSIVE)
NCCL, NCCOM, SWEEP, NANOGPT = "nccl", "nccom", "sweep", "nanogpt"
_STAMP_RE = re.compile(r"(?<!\d)(20\d\d)(\d\d)(\d\d)-(\d\d)(\d\d)(\d\d)(?!\d)")  # scripts/launch.run_stamp


class ReportInputError(UsageError):
    """A file the report cannot use (exit 2, one line)."""


@dataclass
class Headline:
    outcome: str
    number: str
    expectation: str
    reason: str


@dataclass
class Item:
    """One judged result, whatever file shape it came in."""

    source: str  # the file it came from (as the user named it)
    kind: str  # nccl, nccom, sweep, nanogpt, or the test's own name for others
    outcome: str  # PASS, FAIL, INCONCLUSIVE (anything else is shown as INCONCLUSIVE: no evidence of a pass)
    message: str
    cluster: str | None = None
    backend: str | None = None
    instance_type: str | None = None
    nodes: int | None = None
    when: str | None = None  # when it ran, as the result tells it
    doc: dict[str, Any] = field(default_factory=dict)  # the evidence (the result's own keys)
    environment_check: dict[str, Any] | None = None

    @property
    def headline(self) -> Headline:
        """The verdict's headline: the message's first line that reads ``OUTCOME: ...`` (a sweep result saved
        before its headline led the text has its node table first), else the verdict's own message."""
        verdict = mapping(self.doc.get("verdict"))
        for candidate in (self.message, verdict.get("message")):
            for line in (candidate if isinstance(candidate, str) else "").splitlines()[:400]:
                if line.split(": ", 1)[0] in OUTCOMES:
                    return split_headline(line, self.outcome)
        return split_headline(self.message, self.outcome)


def text(value: Any, limit: int = MAX_TEXT) -> str:
    """``value`` as display text (None -> ''), cut at ``limit`` characters with a note."""
    if value is None:
        return ""
    s = value if isinstance(value, str) else json.dumps(value) if isinstance(value, list | dict) else str(value)
    return s if len(s) <= limit else s[:limit] + f"\u2026 ({len(s) - limit} more characters)"


def num(value: Any) -> float | None:
    """A finite number from JSON, else None (bools, strings, NaN and infinities are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        f = float(value)
    except OverflowError:  # an integer of 400 digits
        return None
    return f if math.isfinite(f) else None


def whole(value: Any) -> int | None:
    f = num(value)
    return int(f) if f is not None and f == int(f) and abs(f) < 1e12 else None


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def items_of(value: Any, limit: int = MAX_ROWS) -> list[Any]:
    return value[:limit] if isinstance(value, list) else []


def split_headline(message: str, outcome: str = "") -> Headline:
    """``OUTCOME: number vs expectation: reason`` (scripts/outcome.headline) in its parts. A first line of
    another shape keeps its words as the reason."""
    first = (message or "").split("\n", 1)[0].strip()
    head, sep, rest = first.partition(": ")
    if not sep or head not in OUTCOMES:
        return Headline(outcome, "", "", first)
    number, vs, after = rest.partition(" vs ")
    if not vs:
        return Headline(head, "", "", rest)
    expectation, sep2, reason = after.partition(": ")
    if not sep2:  # the sweep's FAIL: "N slow node(s): ... vs the cluster median x GB/s[; more][. Advice.]"
        cut = min((i for i in (after.find("; "), after.find(". ")) if i >= 0), default=-1)
        expectation, reason = (after[:cut], after[cut + 2:]) if cut >= 0 else (after, "")
    return Headline(head, number, expectation, reason)


def read_json(path: str) -> Any:
    """The JSON value in ``path``, or a ReportInputError naming what is wrong with it (hpq.user_files)."""
    return user_files.read_json(path, MAX_FILE_BYTES, "result", ReportInputError,
                                parse_constant=lambda name: None)  # NaN/Infinity: no number


def kind_of(doc: dict[str, Any]) -> str | None:
    """Which result ``doc`` is, from its shape (None: not one of hpq's)."""
    if isinstance(doc.get("test"), str) and "backend" in doc and "cluster" in doc and "message" in doc:
        return "test-result"
    if "run_id" in doc and "variant" in doc and "stages" in doc:
        return "rehearsal"
    if isinstance(doc.get("pairs"), list) and "scores" in doc and "slow_nodes" in doc:
        return SWEEP
    if isinstance(doc.get("rows"), list) and "producer" in doc:
        return NCCOM if doc.get("producer") == "nccom-test" else NCCL
    if "metrics" in doc and str(doc.get("command", "")).startswith("run-nanogpt"):
        return NANOGPT
    return None


def when_of(doc: dict[str, Any], fallback_mtime: float | None) -> str | None:
    """When it ran: the stamp run-nccl-test / run-nanogpt put in their file names (node clock), else the
    file's modification time (UTC)."""
    for key in ("result", "log", "log_dir"):
        m = _STAMP_RE.search(str(doc.get(key) or ""))
        if m:
            y, mo, d, h, mi, s = m.groups()
            return f"{y}-{mo}-{d} {h}:{mi}:{s} (node clock)"
    if fallback_mtime is None:
        return None
    return datetime.datetime.fromtimestamp(fallback_mtime, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC (file time)")


def _outcome(value: Any) -> str:
    return value if value in OUTCOMES else INCONCLUSIVE


def _message(doc: dict[str, Any]) -> str:
    verdict = doc.get("verdict")
    if isinstance(verdict, dict) and isinstance(verdict.get("message"), str):
        return verdict["message"] if not isinstance(doc.get("message"), str) else doc["message"]
    return doc["message"] if isinstance(doc.get("message"), str) else ""


def _node_item(source: str, kind: str, doc: dict[str, Any], when: str | None, **facts: Any) -> Item:
    verdict = mapping(doc.get("verdict"))
    outcome = _outcome(doc.get("outcome") or verdict.get("outcome") or doc.get("verdict"))
    message = _message(doc) or f"{outcome}: no message in the result"
    nodes = whole(doc.get("nodes")) if not isinstance(doc.get("nodes"), list) else len(doc["nodes"])
    if nodes is None:
        nodes = whole(verdict.get("nodes"))
    env = doc.get("environment_check")
    item = Item(source, kind, outcome, message, instance_type=text(doc.get("instance_type") or
                                                                      verdict.get("instance_type")) or None,
                nodes=nodes, when=when, doc=doc, environment_check=env if isinstance(env, dict) else None)
    for key, value in facts.items():
        setattr(item, key, value)
    return item


def from_doc(source: str, doc: Any, mtime: float | None = None) -> list[Item]:
    """The items one parsed file holds."""
    if not isinstance(doc, dict):
        raise ReportInputError(f"{source!r} holds a JSON {type(doc).__name__}, not a result object")
    kind = kind_of(doc)
    when = when_of(doc, mtime)
    if kind is None:
        raise ReportInputError(f"{source!r} is not an hpq result (expected `hpq test ... --output json`, a "
                               "run-nccl-test / run-nanogpt / sweep result file, `hpq nccl-report --output json` "
                               "or `hpq rehearse --output json`)")
    if kind == "test-result":
        test = text(doc.get("test"), 40)
        item = _node_item(source, test, doc, when, cluster=text(doc.get("cluster"), 200) or None,
                          backend=text(doc.get("backend"), 40) or None)
        item.outcome = _outcome(doc.get("outcome"))
        item.message = doc["message"] if isinstance(doc["message"], str) else item.message
        item.nodes = whole(doc.get("nodes")) if not isinstance(doc.get("nodes"), list) else item.nodes
        return [item]
    if kind == "rehearsal":
        return _rehearsal(source, doc, when)
    return [_node_item(source, kind, doc, when)]


def _rehearsal(source: str, doc: dict[str, Any], when: str | None) -> list[Item]:
    """``hpq rehearse --output json``: its nccl (with the ranks' environment), nanogpt and sweep results."""
    cluster = text(mapping(doc.get("cluster")).get("name"), 200) or None
    itype = text(doc.get("worker_instance_type"), 60) or None
    out = []
    for key, kind in (("nccl", NCCL), ("nanogpt", NANOGPT), ("sweep", SWEEP)):
        part = doc.get(key)
        if not isinstance(part, dict) or (kind == SWEEP and not isinstance(part.get("pairs"), list)):
            continue
        item = _node_item(source, kind, part, when, cluster=cluster, backend="rehearsal")
        item.instance_type = item.instance_type or itype
        if kind == NCCL and isinstance(doc.get("environment"), dict):
            item.environment_check = doc["environment"]
        out.append(item)
    if not out:
        raise ReportInputError(f"{source!r}: the rehearsal holds no validation result (it stopped before its "
                               "nccl stage, or ran with --no-validate)")
    return out


def load(paths: list[str]) -> list[Item]:
    """Every item of every file, in the order given."""
    if len(paths) > MAX_FILES:
        raise ReportInputError(f"{len(paths)} files: at most {MAX_FILES} results go in one report")
    total = 0
    for path in paths:  # before reading any: a set too large is refused at once
        try:
            total += os.stat(path).st_size
        except OSError:
            pass  # read_json names the problem
    if total > MAX_TOTAL_BYTES:
        raise ReportInputError(f"the results add up to {total} bytes, over {MAX_TOTAL_BYTES}: make one report per "
                               "cluster or per run")
    items: list[Item] = []
    for path in paths:
        doc = read_json(path)
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            mtime = None
        items.extend(from_doc(path, doc, mtime))
    return items
