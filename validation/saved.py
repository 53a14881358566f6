"""The last judged result of each test, per cluster, kept on this machine for ``hpq status`` and ``hpq report``.

Where: ``$XDG_STATE_HOME/hpq/results/<region>/<cluster>/<test>.json`` (``~/.local/state`` when XDG_STATE_HOME is
unset or not absolute, as the XDG Base Directory specification says for state data:
https://specifications.freedesktop.org/basedir-spec/latest/). One file per test, the latest replacing the one
before, each written atomically (hpq.atomic) so a reader never sees half of one. The file is
:meth:`TestResult.to_dict` plus ``saved_at`` (UTC, ISO 8601) and ``region``: the shape ``hpq report`` reads
(views/load.py's "test-result"), so ``hpq report ~/.local/state/hpq/results/REGION/CLUSTER/*.json`` works.

A cluster name is a HyperPod cluster name (CreateCluster's ClusterName pattern,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateCluster.html) and a region an AWS region
name, so neither can climb out of the folder; anything else is not saved.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path
from typing import Any

from hpq import atomic, user_files
from hpq.aws.session import make_session
from hpq.errors import UsageError
from hpq.lifecycle import names
from hpq.validation.request import TESTS
from hpq.validation.result import TestResult

RESULTS_DIR_ENV = "XDG_STATE_HOME"
_REGION = re.compile(r"[a-z]{2}(-[a-z0-9]+)+-\d")
MAX_FILE_BYTES = 16 << 20  # what hpq report reads at most (views/load.MAX_FILE_BYTES)
NONE_SAVED = "no validation results saved on this machine"


def results_root() -> Path:
    state = os.environ.get(RESULTS_DIR_ENV, "")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "hpq" / "results"


def folder(region: str, cluster: str) -> Path:
    """The cluster's folder; a usage error for a region or cluster that is not one (never a path outside)."""
    if not _REGION.fullmatch(region or ""):
        raise UsageError(f"region {region!r} is not an AWS region name")
    if not names.valid_hyperpod_name(cluster):
        raise UsageError(f"cluster {cluster!r} is not a HyperPod cluster name")
    return results_root() / region / cluster


def save(result: TestResult | dict[str, Any], region: str, now: dt.datetime | None = None) -> Path:
    """Write the result as its test's latest for its cluster in ``region``; the path written."""
    doc = dict(result.to_dict() if isinstance(result, TestResult) else result)
    test = str(doc.get("test", ""))
    if test not in TESTS:
        raise UsageError(f"test {test!r} is not one of hpq's ({', '.join(TESTS)})")
    when = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    doc.update(saved_at=when.isoformat(timespec="seconds"), region=region)
    target = folder(region, str(doc.get("cluster", ""))) / f"{test}.json"
    atomic.write_file(target, json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n",
                      root=results_root(), mode=0o600)
    return target


def headline(message: Any) -> str:
    """The verdict's first line (its headline: hpq's verdicts read at a glance on it)."""
    lines = message.strip().splitlines() if isinstance(message, str) else []
    return lines[0] if lines else ""


def latest(region: str, cluster: str) -> list[dict[str, Any]]:
    """Per test, the latest saved result: test, outcome, when, headline, file. A file that is not a result of this
    cluster (unreadable, not JSON, another cluster's) is listed as unreadable, never as a verdict."""
    try:
        where = folder(region, cluster)
    except UsageError:
        return []
    out = []
    for test in TESTS:
        path = where / f"{test}.json"
        if not path.is_file():
            continue
        entry: dict[str, Any] = {"test": test, "file": str(path)}
        try:  # the shared reader's guards (size, UTF-8, nesting): a deeply nested file was a RecursionError here
            doc = user_files.read_json(str(path), MAX_FILE_BYTES, "saved result")
            if not isinstance(doc, dict) or doc.get("test") != test or doc.get("cluster") != cluster:
                raise ValueError(f"not a {test} result of {cluster}")
        except (UsageError, ValueError) as exc:
            entry.update(outcome="unreadable", when=None, headline=" ".join(str(exc).split())[:200])
        else:
            entry.update(outcome=str(doc.get("outcome", "")), when=doc.get("saved_at"),
                         headline=headline(doc.get("message")))
        out.append(entry)
    return out


def save_or_say(result: TestResult | dict[str, Any], region: str | None, profile: str | None) -> str | None:
    """Save the result (region: the option, else the session's); on any failure the one line to show instead.

    Never raises: the test ran and was judged, and its verdict and exit code stand whatever happens here."""
    try:
        reg = region or make_session(None, profile).region_name
        if not reg:
            raise UsageError("no AWS region to file it under (pass --region or set AWS_REGION)")
        save(result, reg)
    except Exception as exc:  # noqa: BLE001 - a result not saved is a note, never a changed verdict
        return f"hpq: note: the result was not saved on this machine: {' '.join(str(exc).split())[:300]}"
    return None
