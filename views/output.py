"""Where the report goes: written atomically (hpq.atomic), and never over a file it did not write.

Decision (issue 25): ``hpq report -o FILE`` replaces FILE only when FILE is absent or is itself an hpq report
(its first bytes carry ``<meta name="generator" content="hpq report ...">``); any other file is refused (exit 2)
unless ``--force``. Either way the write is atomic: a staged file renamed over the target, so an interrupted run
leaves the previous file whole, and a symlink, folder or device at the target is refused (hpq.atomic).
"""

from __future__ import annotations

import os
from pathlib import Path

from hpq import atomic
from hpq.errors import UsageError
from hpq.views.page import GENERATOR

SNIFF_BYTES = 4096  # the generator line is in the page's first few hundred bytes


def is_report(path: Path) -> bool:
    """Whether ``path`` starts like a page ``hpq report`` wrote."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return False
    return f'<meta name="generator" content="{GENERATOR} '.encode() in head


def write_report(path: str, html: str, force: bool = False) -> None:
    target = Path(os.path.expanduser(path))
    st = atomic.check_target(target)  # a link, folder or device there: refused whatever --force says
    if st is not None and not force and not is_report(target):
        raise UsageError(f"{path!r} exists and is not an hpq report: choose another --out, or pass --force to "
                         "replace it")
    atomic.write_file(target, html)
