"""Progress of a long node program: the lines worth showing, at most one a second, and never a long silence.

Why: the NCCL and nanoGPT stages run for most of a rehearsal with nothing said (issue 25 item 6); the node
programs already print a row per message size (nccl-tests' table, scripts/nccl_bench.py) and a line per logged
iteration (scripts/nanogpt.py), so the stage shows those as they arrive.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

from hpq.rehearsal.stages.base import Say
from hpq.scripts import nccl_report

EVERY_S = 1.0  # at most one progress line per second
QUIET_S = 10.0  # a "still running" line after this long without one
# An srun label ("0: ") or none, then the trainer's own lines (scripts/nanogpt.py's log()).
_ITER_RE = re.compile(r"^\s*(?:\d+:\s+)?(iter \d+: .*|summary: .*)$")


def nccl_row(line: str) -> str | None:
    """``16 MB: algbw .. GB/s, busbw .. GB/s`` from a row of the bandwidth table, else None.

    The row is read by the parser the verdict uses (scripts/nccl_report.py: nccl-tests' columns, srun and mpirun
    labels), so what progress shows is what the judge will read."""
    if not line.strip() or line.lstrip().startswith("#") or not any(c.isdigit() for c in line[:40]):
        return None
    try:
        rows = nccl_report.parse_lines([line]).rows
    except nccl_report.ReportError:
        return None
    if not rows:
        return None
    m = rows[0].out_of_place
    return f"{_size(rows[0].size_bytes)}: algbw {m.algbw_gbps:.2f} GB/s, busbw {m.busbw_gbps:.2f} GB/s (out of place)"


def nanogpt_iteration(line: str) -> str | None:
    """The trainer's ``iter N: loss ...`` and ``summary: ...`` lines, else None."""
    m = _ITER_RE.match(line)
    return m.group(1).strip() if m else None


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


class Watch:
    """Says what ``pick`` keeps of each line (``on_line``), at most one line per ``every`` seconds (the newest
    waits for its turn), and ``still running`` after ``quiet`` seconds with nothing said; a context manager."""

    def __init__(self, say: Say, who: str, pick: Callable[[str], str | None], every: float = EVERY_S,
                 quiet: float = QUIET_S):
        self.say, self.who, self.pick, self.every, self.quiet = say, who, pick, every, quiet
        self.t0 = self.last = time.monotonic()
        self.pending: str | None = None
        self.said = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def on_line(self, line: str) -> None:
        picked = self.pick(line)
        if picked is None:
            return
        with self._lock:
            self.pending = picked
            if time.monotonic() - self.last >= self.every:
                self._flush()

    def _flush(self) -> None:  # with the lock held
        now = time.monotonic()
        if self.pending is not None:
            self.say(self.who, self.pending)
            self.pending = None
        else:
            self.say(self.who, f"still running ({now - self.t0:.0f}s)")
        self.last = now
        self.said += 1

    def _tick(self) -> None:
        while not self._stop.wait(min(self.every, self.quiet) / 4):
            with self._lock:
                idle = time.monotonic() - self.last
                if (self.pending is not None and idle >= self.every) or idle >= self.quiet:
                    self._flush()

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with self._lock:
            if self.pending is not None:
                self._flush()
