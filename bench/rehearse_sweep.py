"""The pairwise sweep in the rehearsal: does it name the throttled worker, and only it, run after run?

    sudo python3 bench/rehearse_sweep.py [RUNS] [--full]

Runs ``hpq rehearse slurm-gpu --workers 4 --no-validate --sweep --throttle 2=30mbit`` and the same
without ``--throttle`` RUNS times each (default 5), alternating, and prints markdown for
docs/benchmarks.md: per run the wall time, the sweep stage's time, every worker's score (GB/s),
the nodes named slow, and for the unthrottled runs the lowest score as a fraction of the median
(a node is named only below 0.5 of it with gloo on CPUs, and below the MAD bound). ``--full``
keeps run-nccl-test and run-nanogpt in (the issue's own command).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

THROTTLE = "2=30mbit"


def run_once(throttled: bool, full: bool) -> tuple[float, dict, int]:
    argv = [sys.executable, "-m", "hpq", "rehearse", "slurm-gpu", "--nodes", "4", "--sweep", "--output", "json"]
    if not full:
        argv.append("--no-validate")
    if throttled:
        argv += ["--throttle", THROTTLE]
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - t0
    try:
        return wall, json.loads(res.stdout), res.returncode
    except ValueError:
        sys.stderr.write(res.stderr[-3000:])
        raise SystemExit(f"no JSON from the rehearsal (exit {res.returncode})") from None


def row(i: int, throttled: bool, wall: float, r: dict, code: int) -> tuple[str, float | None]:
    s = r.get("sweep") or {}
    scores = s.get("scores") or {}
    workers = [n for n in r["nodes"] if n["role"] == "worker"]
    cells = []
    for n in workers:
        v = scores.get(n["slurm_node"])
        cells.append("-" if v is None else (f"{v:.2f}" if v >= 0.1 else f"{v:.4f}"))
    names = {n["slurm_node"]: n["name"] for n in workers}
    named = ", ".join(names.get(x, x) for x in s.get("slow_nodes") or []) or "none"
    ratio = None
    if not throttled and scores and s.get("median_gbps"):
        ratio = min(scores.values()) / s["median_gbps"]
    case = f"throttle {THROTTLE}" if throttled else "none"
    line = (f"| {i} | {case} | {wall:.1f} | {r['stages'].get('sweep', 0):.1f} | " + " | ".join(cells) +
            f" | {s.get('median_gbps') or 0:.2f} | {named} | {'-' if ratio is None else f'{ratio:.2f}'} | "
            f"{r.get('result')} (exit {code}) |")
    return line, ratio


def main(argv: list[str]) -> int:
    full = "--full" in argv
    argv = [a for a in argv if a != "--full"]
    runs = int(argv[0]) if argv else 5
    lines, walls, ratios, ok = [], {True: [], False: []}, [], {True: 0, False: 0}
    for i in range(1, runs + 1):
        for throttled in (True, False):
            wall, r, code = run_once(throttled, full)
            line, ratio = row(i, throttled, wall, r, code)
            lines.append(line)
            print(line, file=sys.stderr, flush=True)
            walls[throttled].append(wall)
            ok[throttled] += r.get("result") == "pass"
            if ratio is not None:
                ratios.append(ratio)
    cmd = "hpq rehearse slurm-gpu --workers 4" + ("" if full else " --no-validate") + " --sweep [--throttle 2=30mbit]"
    print(f"{runs} runs of each case of `{cmd} --output json`\n")
    print("| run | throttle | wall s | sweep s | worker-1 | worker-2 | worker-3 | worker-4 | median GB/s | named slow "
          "| lowest/median (unthrottled) | result |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    for throttled in (True, False):
        w = walls[throttled]
        print(f"\n{'throttled' if throttled else 'unthrottled'}: {ok[throttled]}/{runs} pass; wall median "
              f"{statistics.median(w):.1f} s, max {max(w):.1f} s")
    if ratios:
        print(f"unthrottled lowest score / median: min {min(ratios):.2f}, median {statistics.median(ratios):.2f} "
              "(named only below 0.50)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
