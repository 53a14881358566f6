"""The golden view of a rendered template (tests/cfn/test_cfn_golden.py): each inline Lambda ZipFile replaced by a
marker naming the handler file it equals, so that editing a handler does not churn the golden files.

The golden files are tests/cfn/data/golden/<variant>/<size>/; ``HPQ_UPDATE_GOLDEN=1`` rewrites them.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HANDLER_DIR = REPO / "cfn" / "handlers"
GOLDEN_DIR = Path(__file__).resolve().parent / "data" / "golden"
UPDATE_GOLDEN = os.environ.get("HPQ_UPDATE_GOLDEN") == "1"


def handler_sources() -> dict[str, str]:
    """Handler file (repo-relative) -> its text, read now (the Helm handler changes under us)."""
    return {f"cfn/handlers/{p.name}": p.read_text(encoding="utf-8")
            for p in sorted(HANDLER_DIR.glob("*.py")) if p.name != "__init__.py"}


def lambda_functions(template: dict) -> dict[str, dict]:
    return {k: r for k, r in template.get("Resources", {}).items() if r["Type"] == "AWS::Lambda::Function"}


def golden_view(template: dict, sources: dict[str, str]) -> dict:
    """The template with each inline ZipFile replaced by a marker naming the file it equals."""
    view = copy.deepcopy(template)
    for fn in lambda_functions(view).values():
        code = fn["Properties"].get("Code", {})
        if "ZipFile" in code:
            match = [name for name, text in sources.items() if text == code["ZipFile"]]
            code["ZipFile"] = f"<<embedded: {match[0]}>>" if len(match) == 1 else "<<embedded: NO MATCHING FILE>>"
    return view
