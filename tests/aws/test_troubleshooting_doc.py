"""docs/troubleshooting.md is generated from the hint table the code uses (hpq.aws.events.HINTS) by
dev/troubleshooting.py: the page must be what the script writes now, and every phrase in the table
must be reachable (hint_for takes the first phrase found, so an earlier phrase inside a later one
with another hint would hide it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpq.aws import events

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "dev" / "troubleshooting.py"


def _render(hints: tuple[tuple[str, str], ...]) -> str:
    code = ("import runpy, sys, json; m = runpy.run_path(sys.argv[1]); "
            "print(m['render'](tuple(map(tuple, json.loads(sys.argv[2])))), end='')")
    import json

    return subprocess.run([sys.executable, "-c", code, str(SCRIPT), json.dumps(hints)], check=True,
                          capture_output=True, text=True).stdout


def test_page_is_what_the_script_writes_from_the_table():
    page = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    assert _render(events.HINTS) == page, "run python dev/troubleshooting.py"
    for needle, hint in events.HINTS:  # every row of the code's table is on the page
        assert f"`{needle}`" in page and hint.replace("|", "/") in page


def test_check_mode_fails_on_a_stale_page_and_passes_on_the_current_one(tmp_path: Path):
    assert subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True).returncode == 0
    twin = events.HINTS + (("throttling", "slow down"),)  # the table grew; the page did not
    assert _render(twin) != _render(events.HINTS)


@pytest.mark.parametrize("hints, hidden", [
    (events.HINTS, []),
    ((("access denied", "a"), ("s3 error: access denied", "b")), ["s3 error: access denied"]),  # broken twin
])
def test_no_phrase_is_hidden_by_an_earlier_one(hints: tuple[tuple[str, str], ...], hidden: list[str]):
    shadowed = [later for i, (later, hint) in enumerate(hints)
                for earlier, other in hints[:i] if earlier in later and other != hint]
    assert shadowed == hidden


def test_hint_for_reaches_the_template_hint():
    reason = "S3 error: Access Denied for TemplateURL https://b.s3.amazonaws.com/x.yaml"
    assert "nested template" in events.hint_for(reason)
