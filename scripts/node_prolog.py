"""The Slurm prolog: node_doctor's quick checks before each job, bounded to seconds; a critical finding drains
the node with its reason and fails the prolog, so the job does not start there.

Slurm runs ``Prolog`` (slurm.conf) as root on each allocated node before the job's first step; a prolog that
exits non-zero drains the node and requeues the job (Slurm's prolog and epilog guide,
https://slurm.schedmd.com/prolog_epilog.html, and slurm.conf(5) ``Prolog``). This program first sets the node
DRAIN with hpq's reason (``scontrol update NodeName=$SLURMD_NODENAME State=DRAIN Reason='hpq prolog: ...'``),
then exits 1. What it checks is node_doctor's own checks (scripts/node_doctor.examine) with each tool bounded to
``--tool-timeout`` seconds (default 5), no EFA counter window and no DCGM: GPUs and their Xids, EFA devices and
provider, disks, /fsx. Only a critical finding drains: a warning, or a check that could not be read (a missing
tool), never keeps jobs off a node. Off by default; the lifecycle's ``node_prolog`` setting turns it on
(lifecycle/prolog.py). Standard library only: it runs on cluster nodes with the system python3.

Exit codes: 0 the job may start, 1 the node was drained (the job is requeued), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Dict, List, Optional

from hpq.lifecycle import catalog
from hpq.scripts import node_doctor, nodeinfo

EXIT_OK, EXIT_DRAINED, EXIT_USAGE = 0, 1, 2
TOOL_TIMEOUT_S = 5.0
REASON_MAX = 200


def reason(findings: List[Dict[str, object]]) -> str:
    """The drain reason: the critical findings, kind and evidence, within Slurm's reason length we keep."""
    text = "; ".join("%s: %s" % (f.get("kind"), f.get("evidence")) for f in findings)
    return ("hpq prolog: " + text)[:REASON_MAX]


def drain_argv(node: str, why: str) -> List[str]:
    return ["scontrol", "update", "NodeName=%s" % node, "State=DRAIN", "Reason=%s" % why]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m hpq.scripts.node_prolog",
                                 description="Slurm Prolog: quick node checks; drain the node on a critical finding.")
    ap.add_argument("--instance-type", default=None, help="default: from the node's info file or IMDS")
    ap.add_argument("--fsx", default=None,
                    help="shared file system to check ('' for none; default: where the lifecycle mounted FSx, "
                         "none where it mounted none)")
    ap.add_argument("--tool-timeout", type=float, default=TOOL_TIMEOUT_S,
                    help="seconds each tool may take (default %(default)s)")
    ap.add_argument("--dry-run", action="store_true", help="print the drain command instead of running it")
    args = ap.parse_args(argv)
    if not 0.5 <= args.tool_timeout <= 30:
        ap.error("--tool-timeout must be 0.5 to 30 seconds")
    itype = nodeinfo.resolve_instance_type(args.instance_type)
    if not itype:
        # Without the type nothing can be judged: let the job run (a prolog must not drain on its own gaps).
        sys.stderr.write("hpq prolog: cannot tell this node's instance type: not checked\n")
        return EXIT_OK
    try:
        entry = catalog.lookup(itype)
    except catalog.UnknownInstanceType as exc:
        sys.stderr.write("hpq prolog: %s: not checked\n" % exc)
        return EXIT_OK
    node_doctor.TOOL_TIMEOUT_S = args.tool_timeout
    fsx, mounts = nodeinfo.fsx_to_check(args.fsx)  # where the lifecycle mounted FSx; none: not expected
    report = node_doctor.examine(entry, fsx, efa_window=0, proc_mounts=mounts)
    critical = [f for f in report["findings"] if f.get("severity") == "critical"]  # type: ignore[union-attr]
    if not critical:
        return EXIT_OK
    node = os.environ.get("SLURMD_NODENAME") or str(report["node"])
    argv_drain = drain_argv(node, reason(critical))
    sys.stderr.write(reason(critical) + "\n")
    if args.dry_run:
        print(" ".join(argv_drain))
        return EXIT_DRAINED
    try:
        done = subprocess.run(argv_drain, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=args.tool_timeout * 2)
        if done.returncode != 0:
            sys.stderr.write("hpq prolog: scontrol failed: %s\n" % done.stderr.strip()[:300])
    except (OSError, subprocess.TimeoutExpired) as exc:
        sys.stderr.write("hpq prolog: scontrol failed: %s\n" % exc)
    return EXIT_DRAINED  # non-zero either way: Slurm drains the node and requeues the job


if __name__ == "__main__":
    sys.exit(main())
