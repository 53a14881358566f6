"""How long the doctor stage takes in the rehearsal at 2, 4 and 8 workers (issue 23: bounded by the slowest node,
not by the number of nodes).

    sudo flock /tmp/hpq-daemons.lock python3 bench/rehearse_doctor.py [WORKERS ...]   # default 2 4 8

Runs ``hpq rehearse slurm-gpu --workers N --no-validate --doctor --output json`` for each N and prints a markdown
row for docs/benchmarks.md: the doctor stage (prepare the workers' tools, SSH, run-node-doctor, judge:
``stages.doctor``), run-node-doctor's own wall time on the controller (``doctor.seconds``), the range of the
nodes' node_doctor times (``doctor.nodes[].seconds``), the verdict and the findings (a clean rehearsal: none).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def run_once(workers: int) -> str:
    argv = [sys.executable, "-m", "hpq", "rehearse", "slurm-gpu", "--nodes", str(workers), "--no-validate",
            "--doctor", "--output", "json"]
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    try:
        r = json.loads(res.stdout)
    except ValueError:
        sys.stderr.write(res.stderr[-3000:])
        raise SystemExit(f"no JSON from the rehearsal (exit {res.returncode})") from None
    doc = r.get("doctor") or {}
    per_node = [n.get("seconds") for n in doc.get("nodes", []) if n.get("seconds") is not None]
    span = f"{min(per_node):.2f}-{max(per_node):.2f}" if per_node else "-"
    return (f"| {workers} | {r['stages'].get('doctor', 0):.1f} | {doc.get('seconds') or 0:.2f} | {span} | "
            f"{doc.get('outcome')}, {len(doc.get('findings', []))} findings | {wall:.0f} | "
            f"{r.get('result')} (exit {res.returncode}) |")


def main(argv: list[str]) -> int:
    counts = [int(a) for a in argv] or [2, 4, 8]
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| workers | doctor stage s | run-node-doctor s | node_doctor per node s | verdict | rehearsal wall s | "
          "result |")
    print("|---|---|---|---|---|---|---|")
    for n in counts:
        print(run_once(n), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
