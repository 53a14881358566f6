"""The Slurm prolog option: slurm.conf's ``Prolog`` names hpq's quick node checks (scripts/node_prolog.py) when
hpq-cluster.json's ``node_prolog`` is true; off by default.

slurm.conf(5): ``Prolog`` is the program slurmd runs as root on each node of a job before its first step
(https://slurm.schedmd.com/slurm.conf.html#OPT_Prolog); a non-zero exit drains the node and requeues the job
(https://slurm.schedmd.com/prolog_epilog.html). The controller's slurm.conf carries the line and slurmd reads it
in configless mode like every other line; the program is the ``hpq-node-prolog`` wrapper the install step puts in
``/usr/local/bin`` on every node (lifecycle/install.py). hpq's line is marked so it can be taken out again when
the setting goes back to false; a Prolog line of the cluster's own is never touched (hpq's is then not added, and
the step says so). Standard library only (runs with the node's python3, 3.7+).
"""

from __future__ import annotations

from typing import Tuple

PROLOG_PROGRAM = "/usr/local/bin/hpq-node-prolog"
MARK = "# hpq: node prolog (hpq-cluster.json node_prolog)"


def _is_prolog(line: str) -> bool:
    key = line.split("=", 1)[0].strip().lower()
    return "=" in line and key == "prolog"


def ensure(text: str, enabled: bool, program: str = PROLOG_PROGRAM) -> Tuple[str, str]:
    """(slurm.conf with hpq's Prolog line present iff ``enabled``, what was done: "added", "removed", "kept",
    "absent" or "theirs" (the conf has a Prolog of its own: left as it is))."""
    lines = text.splitlines()
    ours = [i for i, line in enumerate(lines) if line.strip() == MARK]
    theirs = [i for i, line in enumerate(lines) if _is_prolog(line) and not (i > 0 and lines[i - 1].strip() == MARK)]
    if theirs:
        return text, "theirs"
    if enabled and ours:
        return text, "kept"
    if not enabled and not ours:
        return text, "absent"
    if enabled:
        return text.rstrip("\n") + "\n%s\nProlog=%s\n" % (MARK, program), "added"
    drop = set()
    for i in ours:
        drop.add(i)
        if i + 1 < len(lines) and _is_prolog(lines[i + 1]):
            drop.add(i + 1)
    return "\n".join(line for i, line in enumerate(lines) if i not in drop) + "\n", "removed"
