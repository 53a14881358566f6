"""What hpq's metric writers share: series by family, a bounded command runner, and the write-every-N-seconds loop.

Each writer (slurm_metrics on the controller, gpu_metrics on GPU workers, efa_metrics on EFA workers) turns what
the node's own tools or files say into Prometheus text in node_exporter's textfile directory, which the node's
agent scrapes (lifecycle/observability.py). A failed source leaves its families out and never writes zeros: a
missing series is missing, never a healthy-looking 0.

Standard library only (the node's python3, 3.7+).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hpq.lifecycle import files
from hpq.scripts.result_metrics import TEXTFILE_DIR, escape_label_value, format_value

Labels = Tuple[Tuple[str, str], ...]
Runner = Callable[[List[str]], Optional[str]]


class Families:
    """Series by family; HELP/TYPE once per family (gauge unless the family is added as a counter)."""

    def __init__(self) -> None:
        self.help: Dict[str, str] = {}
        self.kind: Dict[str, str] = {}
        self.series: Dict[str, Dict[Labels, float]] = {}

    def add(self, name: str, help_text: str, labels: Dict[str, str], value: float, accumulate: bool = False,
            kind: str = "gauge") -> None:
        self.help.setdefault(name, help_text)
        self.kind.setdefault(name, kind)
        rows = self.series.setdefault(name, {})
        key = tuple(sorted(labels.items()))
        rows[key] = rows.get(key, 0.0) + value if accumulate else value

    def names(self) -> List[str]:
        return sorted(self.series)

    def render(self) -> str:
        out = []
        for name in sorted(self.series):
            out.append("# HELP %s %s" % (name, self.help[name]))
            out.append("# TYPE %s %s" % (name, self.kind[name]))
            for labels, value in sorted(self.series[name].items()):
                body = ",".join('%s="%s"' % (k, escape_label_value(v)) for k, v in labels)
                out.append("%s%s %s" % (name, "{%s}" % body if body else "", format_value(value)))
        return "\n".join(out) + "\n" if out else ""


def run_command(argv: List[str], prog: str, timeout_s: float) -> Optional[str]:
    """The command's stdout, or None (and one line on stderr naming ``prog``) when it cannot run or fails."""
    try:
        res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s,
                             universal_newlines=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print("%s: %s: %s" % (prog, " ".join(argv), exc), file=sys.stderr)
        return None
    if res.returncode != 0:
        print("%s: %s exited %d: %s" % (prog, " ".join(argv), res.returncode,
                                        (res.stderr.strip().splitlines() or [""])[-1]), file=sys.stderr)
        return None
    return res.stdout


def write_text(textfile_dir: str, output_name: str, text: str) -> None:
    """Atomically (files.write_file renames a temporary into place): the agent never scrapes half a file."""
    files.write_file(os.path.join(textfile_dir, output_name), text, mode=0o644)


def arguments(prog: str, description: str, argv: Optional[Sequence[str]],
              every_help: str = "seconds between writes (0: write once)",
              stdout_help: str = "print instead of writing the file") -> argparse.Namespace:
    """Every writer's options: ``--textfile-dir``, ``--every`` (0, or a finite 5 s or more) and ``--stdout``; a bad
    one is argparse's one line and exit 2."""
    ap = argparse.ArgumentParser(prog="python3 -m hpq.scripts." + prog, description=description)
    ap.add_argument("--textfile-dir", default=TEXTFILE_DIR, help="node_exporter's textfile directory")
    ap.add_argument("--every", type=float, default=0.0, help=every_help)
    ap.add_argument("--stdout", action="store_true", help=stdout_help)
    args = ap.parse_args(argv)
    if not math.isfinite(args.every) or args.every < 0 or (args.every and args.every < 5):
        ap.error("--every must be 0 (once) or at least 5 seconds")
    return args


def main_loop(prog: str, description: str, output_name: str, collect: Callable[[], Tuple[str, bool]],
              argv: Optional[Sequence[str]] = None) -> int:
    """``--textfile-dir``, ``--every`` and ``--stdout``; exit 0 written, 1 a source failed (the file still holds
    what answered), 2 bad input or an unwritable file (one line, never a traceback)."""
    args = arguments(prog, description, argv)
    if args.stdout:
        text, ok = collect()
        sys.stdout.write(text)
        return 0 if ok else 1
    while True:
        text, ok = collect()
        try:
            write_text(args.textfile_dir, output_name, text)
        except files.WriteRefused as exc:  # files.write_file turns every OSError into this, path included
            print("%s: %s" % (prog, exc), file=sys.stderr)
            return 2
        if not args.every:
            return 0 if ok else 1
        time.sleep(args.every)
