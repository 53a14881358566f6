"""Tables piped into a file or another program keep every cell whole on one line: `hpq list | grep`, or a name
copied from a CI log into `hpq status`, must see `hpq-slurm-gpu`, not `hpq-slurm-gp` / `u` (issue 25 review:
a captured 80-column `hpq list` broke names mid-word)."""

from __future__ import annotations

import subprocess
import sys

NAMES = ["hpq-slurm-gpu-" + "x" * 60, "second", "CREATE_COMPLETE (UPDATE_ROLLBACK_COMPLETE)"]
GROUPS = "controller-machine 1xml.m5.xlarge, worker-group-1 2xml.g5.16xlarge, login-group 1xml.c5.4xlarge"


def test_a_piped_table_breaks_no_cell():
    code = ("from hpq.cli.printing import table\n"
            f"table('clusters', ['Name', 'Other', 'State', 'Groups'], [[{NAMES[0]!r}, {NAMES[1]!r}, {NAMES[2]!r}, "
            f"{GROUPS!r}]])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "COLUMNS": "80", "TERM": "dumb"}).stdout
    lines = out.splitlines()
    for cell in [*NAMES, GROUPS]:
        assert any(cell in line for line in lines), (cell, out)
    row = [line for line in lines if NAMES[0] in line]
    assert len(row) == 1 and all(cell in row[0] for cell in [*NAMES, GROUPS]), out
