"""Wall time of ``hpq rehearse slurm-gpu --workers 2`` (target: under 90 s on a 2-core machine).

    sudo python3 bench/rehearse.py [RUNS] [-- EXTRA REHEARSE ARGS]

Runs the rehearsal RUNS times (default 3) as a user would and prints markdown for
docs/benchmarks.md: wall time per run, time per stage, every lifecycle step per node (median over
runs), and each worker's time from the start of its OnCreate to its first ``idle`` in ``sinfo``,
next to the fixed ``sleep 30`` that AWS's reference lifecycle spends before doing anything
(awslabs/awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/on_create.sh).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

REFERENCE_SLEEP_S = 30.0
STAGE_ORDER = ("network", "aws", "nodes", "lifecycle", "slurm", "ssh", "nccl", "nanogpt")


def run_once(extra: list[str]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "hpq", "rehearse", "slurm-gpu", "--nodes", "2", "--output", "json",
                          *extra], capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.stderr.write(res.stderr[-3000:])
        raise SystemExit(f"rehearsal failed (exit {res.returncode})")
    return wall, json.loads(res.stdout)


def med(values: list[float]) -> str:
    vals = [v for v in values if v is not None]
    return f"{statistics.median(vals):.1f}" if vals else "-"


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    runs = int(argv[0]) if argv else 3
    results = [run_once(extra) for _ in range(runs)]
    walls = [w for w, _ in results]
    first = results[0][1]
    stages = [k for k in STAGE_ORDER if k in first["stages"]] + [k for k in first["stages"] if k not in STAGE_ORDER]
    print(f"host: {os.cpu_count()} cores; {runs} runs of `hpq rehearse slurm-gpu --workers 2` "
          f"({first['worker_instance_type']} workers){' ' + ' '.join(extra) if extra else ''}\n")
    print("| run | wall s | " + " | ".join(stages) + " |")
    print("|---|---|" + "---|" * len(stages))
    for i, (wall, r) in enumerate(results, 1):
        print(f"| {i} | {wall:.1f} | " + " | ".join(f"{r['stages'].get(k, 0):.1f}" for k in stages) + " |")
    print(f"\nwall time: median {statistics.median(walls):.1f} s, max {max(walls):.1f} s (target < 90 s)\n")
    steps = [s["name"] for s in first["nodes"][0]["steps"]]
    print("| node | OnCreate s | " + " | ".join(steps) + " | OnCreate start -> Slurm idle s |")
    print("|---|---|" + "---|" * len(steps) + "---|")
    for idx, node in enumerate(first["nodes"]):
        per = [r["nodes"][idx] for _, r in results]
        cells = []
        for name in steps:
            vals = [next((s["seconds"] for s in n["steps"] if s["name"] == name), None) for n in per]
            cells.append(med(vals))
        ready = med([n["slurm_ready_seconds"] for n in per]) if node["slurm_node"] else "(slurmctld)"
        print(f"| {node['name']} | {med([n['lifecycle_seconds'] for n in per])} | " + " | ".join(cells) +
              f" | {ready} |")
    ready_all = [n["slurm_ready_seconds"] for _, r in results for n in r["nodes"] if n["slurm_ready_seconds"]]
    if ready_all:
        print(f"\nworker OnCreate start -> idle in sinfo: median {statistics.median(ready_all):.1f} s, "
              f"max {max(ready_all):.1f} s; AWS's reference lifecycle sleeps a fixed {REFERENCE_SLEEP_S:.0f} s "
              "before its first step.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
