"""Where the checkov of the tool virtualenv is (tests/cfn/test_cfn_checkov.py, the ``iam_definition`` fixture)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKOV_VENV = REPO / "build" / "tools" / "checkov-venv"
CHECKOV_HOWTO = ("checkov runs from its own virtualenv (it pins boto3==1.35.49, which the test environment must not "
                 "get): run `bash dev/checkov-venv.sh` (dev/test.sh does, and exports HPQ_CHECKOV)")


def checkov_binary() -> Path:
    """The checkov of the tool virtualenv: $HPQ_CHECKOV (dev/test.sh sets it) or build/tools/checkov-venv.

    Absent, the calling test fails (it never skips): CI runs dev/test.sh, which creates it."""
    path = Path(os.environ.get("HPQ_CHECKOV") or CHECKOV_VENV / "bin" / "checkov")
    if not path.is_file():
        pytest.fail(f"no checkov at {path}: {CHECKOV_HOWTO}", pytrace=False)
    return path


def pinned_checkov_version() -> str:
    lines = (REPO / "dev" / "checkov-constraints.txt").read_text(encoding="utf-8").splitlines()
    return next(line.split("==", 1)[1] for line in lines if line.startswith("checkov=="))
