"""Test-only fault injection (see sitecustomize.py): nothing here is imported by hpq itself."""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

FAULTS_DIR = Path(__file__).resolve().parent


def python_with_corruption(python: str, spec: str, where: Path) -> str:
    """An executable for ``--python`` that runs ``python`` with one all-reduce result corrupted.

    ``spec`` is SIZE:RANK (bytes, rank). The wrapper puts this folder first on PYTHONPATH, so only the
    benchmark processes started through it see the fault.
    """
    path = where / "python-with-corruption"
    path.write_text("#!/bin/sh\n"
                    f"PYTHONPATH={shlex.quote(str(FAULTS_DIR))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                    f"HPQ_TEST_FAULT_CORRUPT_ALLREDUCE={shlex.quote(spec)}\n"
                    "export PYTHONPATH HPQ_TEST_FAULT_CORRUPT_ALLREDUCE\n"
                    f"exec {shlex.quote(python)} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)
