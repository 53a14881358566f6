"""run-node-doctor: the node checks on every Slurm node at once, from the controller, one report per node.

Each node gets its own ``srun --nodes=1 --nodelist=NODE --immediate`` running ``python3 -m
hpq.scripts.node_doctor --output json``, all in parallel, each bounded by ``--node-timeout``: a busy,
drained or hung node costs its bound and is reported as not answering (the laptop's judge makes that node
INCONCLUSIVE), and never holds up the others. The whole run is bounded by the slowest node, not by the
number of nodes (up to ``--parallel`` at once).

Output (``--output json``): one JSON document, ``{"nodes": [{"node", "state", "exit_code", "report",
"error"}], "seconds"}``, ``report`` being node_doctor's own JSON (None when the node did not answer).
Exit codes: 0 every node PASS, 1 a node FAIL, 3 a node INCONCLUSIVE or not answering, 2 bad arguments.
The verdict across nodes (and the drift between them) is judged by ``hpq doctor`` (hpq.validation.doctor).
Standard library only: it runs on the controller with the system python3.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Tuple

from hpq.scripts.args import OneLineParser

DCGM_EXTRA_S = 90  # node_doctor's bound on dcgmi diag -r 1 (node_doctor.DCGM_TIMEOUT_S)
NODE_TIMEOUT_S = 120  # node_doctor bounds each tool to 30 s; a node that takes longer than this is sick
IMMEDIATE_S = 30  # srun --immediate: a node that cannot be allocated in this long (busy, drained) is skipped
MAX_PARALLEL = 64
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCONCLUSIVE = 0, 1, 2, 3
# sinfo(1) node states in which srun cannot start a step: the node is reported, not waited for.
UNREACHABLE_STATES = ("down", "drain", "drained", "draining", "fail", "failing", "future", "maint", "unknown",
                      "not_responding", "power_down", "powered_down", "powering_down", "reboot_issued")


def natural(name: str) -> Tuple:
    return tuple(int(p) if p.isdecimal() else p for p in re.split(r"(\d+)", name))


def parse_sinfo(text: str) -> Dict[str, str]:
    """``sinfo -h -N -o '%N %T'`` -> {node: state} (a node in two partitions is listed twice: kept once)."""
    nodes: Dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            nodes.setdefault(parts[0], parts[1].lower().rstrip("*~#!%$@^-+"))
    return dict(sorted(nodes.items(), key=lambda kv: natural(kv[0])))


def list_nodes() -> Dict[str, str]:
    done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError("sinfo exited %d: %s" % (done.returncode, done.stderr.strip()[:300]))
    return parse_sinfo(done.stdout)


def node_command(node: str, doctor_args: List[str]) -> List[str]:
    """The srun line that runs node_doctor on ``node`` alone (a job of its own: one node's trouble stays its own)."""
    return ["srun", "--nodes=1", "--ntasks=1", "--nodelist=" + node, "--immediate=%d" % IMMEDIATE_S,
            "--job-name=hpq-doctor", "--quiet", "--export=ALL",
            "python3", "-m", "hpq.scripts.node_doctor", "--output", "json"] + doctor_args


def last_json(text: str) -> Optional[dict]:
    """node_doctor's report: the last line of its stdout that is a JSON object."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None


def check_node(node: str, state: str, doctor_args: List[str], timeout: float) -> Dict[str, object]:
    """One node's entry: its report, or why there is none."""
    entry: Dict[str, object] = {"node": node, "state": state, "exit_code": None, "report": None, "error": ""}
    if state in UNREACHABLE_STATES:
        entry["error"] = "Slurm has the node %s: not checked" % state
        return entry
    started = time.monotonic()
    proc = subprocess.Popen(node_command(node, doctor_args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # srun cancels its step on SIGTERM
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        entry["error"] = "no answer in %d s" % timeout
        return entry
    entry["exit_code"] = proc.returncode
    entry["seconds"] = round(time.monotonic() - started, 2)
    report = last_json(out)
    if report is None:
        tail = (err.strip().splitlines() or out.strip().splitlines() or [""])[-1]
        entry["error"] = "no report (srun exited %d): %s" % (proc.returncode, tail[:300])
    else:
        entry["report"] = report
    return entry


def overall(entries: List[Dict[str, object]]) -> int:
    codes = []
    for e in entries:
        report = e.get("report")
        verdict = report.get("verdict") if isinstance(report, dict) else None
        codes.append({"PASS": EXIT_PASS, "FAIL": EXIT_FAIL}.get(str(verdict), EXIT_INCONCLUSIVE))
    if not codes:
        return EXIT_INCONCLUSIVE
    return EXIT_FAIL if EXIT_FAIL in codes else max(codes)


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = OneLineParser(prog="run-node-doctor", description="Run the node checks on every Slurm node at once.")
    ap.add_argument("nodes", nargs="?", type=int, default=None,
                    help="check the first NODES nodes (natural order; default: every node sinfo lists)")
    ap.add_argument("-w", "--nodelist", default=None, help="comma-separated node names (default: every node)")
    ap.add_argument("--node-timeout", type=int, default=NODE_TIMEOUT_S,
                    help="seconds one node may take (default %(default)s)")
    ap.add_argument("--parallel", type=int, default=MAX_PARALLEL, help="nodes checked at once (default %(default)s)")
    ap.add_argument("--fsx", default=None, help="passed to node_doctor ('' for none; default its /fsx)")
    ap.add_argument("--efa-window", default=None, help="passed to node_doctor (seconds)")
    ap.add_argument("--dcgm", action="store_true",
                    help="passed to node_doctor: also dcgmi diag -r 1 (adds its bound to --node-timeout's default)")
    ap.add_argument("--output", choices=("json", "text"), default="text")
    args = ap.parse_args(argv)
    if args.nodes is not None and not 1 <= args.nodes <= 4096:
        ap.error("NODES must be 1 to 4096")
    if not 5 <= args.node_timeout <= 3600:
        ap.error("--node-timeout must be 5 to 3600 seconds")
    if not 1 <= args.parallel <= 1024:
        ap.error("--parallel must be 1 to 1024")
    if args.efa_window is not None:
        try:
            ok = 0 <= float(args.efa_window) <= 300
        except ValueError:
            ok = False
        if not ok:
            ap.error("--efa-window must be 0 to 300 seconds")
    return args


def node_args(args: argparse.Namespace) -> Tuple[List[str], int]:
    """node_doctor's arguments, and each node's bound (the default grows by dcgmi's own bound with --dcgm)."""
    doctor_args: List[str] = []
    if args.fsx is not None:
        doctor_args += ["--fsx", args.fsx]
    if args.efa_window is not None:
        doctor_args += ["--efa-window", str(args.efa_window)]
    timeout = args.node_timeout
    if args.dcgm:
        doctor_args.append("--dcgm")
        if timeout == NODE_TIMEOUT_S:
            timeout += DCGM_EXTRA_S
    return doctor_args, timeout


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        states = list_nodes()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        sys.stderr.write("run-node-doctor: cannot list the nodes: %s\n" % exc)
        return EXIT_INCONCLUSIVE
    if args.nodelist:
        wanted = [n for n in args.nodelist.split(",") if n]
        unknown = [n for n in wanted if n not in states]
        if unknown:
            sys.stderr.write("run-node-doctor: error: not Slurm nodes: %s\n" % ", ".join(unknown))
            return EXIT_USAGE
        states = {n: states[n] for n in wanted}
    if args.nodes is not None:
        states = dict(list(states.items())[:args.nodes])
    doctor_args, node_timeout = node_args(args)
    args.node_timeout = node_timeout
    started = time.monotonic()
    sys.stderr.write("run-node-doctor: checking %d node(s), at most %d s each\n" % (len(states), args.node_timeout))
    with ThreadPoolExecutor(max_workers=max(1, min(args.parallel, len(states) or 1))) as pool:
        futures = [pool.submit(check_node, n, s, doctor_args, args.node_timeout) for n, s in states.items()]
        entries = [f.result() for f in futures]
    doc = {"nodes": entries, "seconds": round(time.monotonic() - started, 2)}
    if args.output == "json":
        print(json.dumps(doc, sort_keys=True))
    else:
        for e in entries:
            report = e.get("report")
            if isinstance(report, dict):
                print("%-24s %-12s %d finding(s)" % (e["node"], report.get("verdict"),
                                                     len(report.get("findings") or [])))
                for f in report.get("findings") or []:
                    print("  %-8s %-18s %-8s %s" % (f.get("severity"), f.get("kind"), f.get("action"),
                                                    f.get("evidence")))
            else:
                print("%-24s %-12s %s" % (e["node"], "NO ANSWER", e.get("error")))
    return overall(entries)


if __name__ == "__main__":
    sys.exit(main())
