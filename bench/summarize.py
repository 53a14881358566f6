"""Summarise a bench/gpu_bench.sh run as markdown: built-in vs NCCL baseline, nanoGPT throughput.

Usage: python3 bench/summarize.py OUT_DIR RESULTS_DIR
Reads the logs gpu_bench.sh wrote to OUT_DIR and the run-nanogpt JSON results in RESULTS_DIR.
"""

from __future__ import annotations

import glob
import json
import os
import sys

_BUNDLE = os.environ.get("HPQ_BUNDLE", "/tmp/hpq-bundle")
if os.path.isdir(os.path.join(_BUNDLE, "hpq")):
    sys.path.insert(0, _BUNDLE)

from hpq.scripts import nccl_report  # noqa: E402

MIN_TARGET_BYTES = 128 << 20
TARGET_RATIO = 0.98


def load(path):
    try:
        with open(path) as fh:
            return nccl_report.parse_text(fh.read())
    except (OSError, nccl_report.ReportError) as exc:
        print(f"(could not read {os.path.basename(path)}: {exc})")
        return None


def nccl_section(out: str) -> None:
    builtin = sorted(glob.glob(os.path.join(out, "h200x*_builtin.txt")))
    if not builtin:
        return
    b = load(builtin[0])
    bases = [load(p) for p in sorted(glob.glob(os.path.join(out, "h200x*_baseline_run*.txt")))]
    bases = [x for x in bases if x]
    if not b or not bases:
        return
    print("## all-reduce busbw (GB/s): built-in vs NCCL baseline, sizes >= 128 MB\n")
    print("| size | baseline oop | baseline ip | built-in oop | built-in ip | ip ratio | oop ratio |")
    print("|---:|---|---|---:|---:|---:|---:|")
    worst_ip = worst_oop = 9.9
    for row in b.rows:
        if row.size_bytes < MIN_TARGET_BYTES:
            continue
        brows = [r for base in bases for r in base.rows if r.size_bytes == row.size_bytes]
        if not brows:
            continue
        b_oop = [r.out_of_place.busbw_gbps for r in brows]
        b_ip = [r.in_place.busbw_gbps for r in brows if r.in_place]
        ip_ratio = row.in_place.busbw_gbps / max(b_ip) if row.in_place and b_ip else float("nan")
        oop_ratio = row.out_of_place.busbw_gbps / max(b_oop)
        worst_ip, worst_oop = min(worst_ip, ip_ratio), min(worst_oop, oop_ratio)
        print("| %d MB | %s | %s | %.2f | %.2f | %.3f | %.3f |" % (
            row.size_bytes >> 20, " / ".join("%.2f" % x for x in b_oop), " / ".join("%.2f" % x for x in b_ip),
            row.out_of_place.busbw_gbps, row.in_place.busbw_gbps if row.in_place else float("nan"),
            ip_ratio, oop_ratio))
    print("\nworst ratio at >= 128 MB (against the better baseline run): in-place %.3f, out-of-place %.3f "
          "(target %.2f); built-in peak %.2f GB/s, baseline peaks %s; #wrong built-in %d, baseline %s\n" % (
              worst_ip, worst_oop, TARGET_RATIO, b.peak_busbw_gbps,
              " / ".join("%.2f" % x.peak_busbw_gbps for x in bases), b.wrong_total,
              " / ".join(str(x.wrong_total) for x in bases)))


def nanogpt_section(results: str) -> None:
    runs = []
    for p in sorted(glob.glob(os.path.join(results, "nanogpt-*.json"))):
        if p.endswith(".metrics.json"):
            continue
        with open(p) as fh:
            data = json.load(fh)
        if data.get("metrics"):
            runs.append(data)
    if not runs:
        return
    print("## nanoGPT gpt2-124m (bf16, micro-batch 16, context 1024)\n")
    print("| GPUs | tokens/s total | tokens/s per GPU | ms/iter | MFU | bf16 matmul peak | loss first->last | exit |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|")
    per_gpu = {}
    for r in runs:
        m = r["metrics"]
        n = m["world_size"]
        if m.get("tokens_per_s"):
            per_gpu[n] = m["tokens_per_s_per_process"]
        print("| %d | %s | %s | %.1f | %.1f%% | %.0f TFLOP/s | %.3f -> %.3f | %d |" % (
            n, format(int(m["tokens_per_s"] or 0), ","), format(int(m["tokens_per_s_per_process"] or 0), ","),
            m["iter_ms"] or 0, (m["mfu"] or 0) * 100, m["peak_tflops"] or 0, m["first_loss"], m["final_loss"],
            r["exit_status"]))
    if 1 in per_gpu and len(per_gpu) > 1:
        n = max(per_gpu)
        print("\nweak scaling 1 -> %d GPUs: %.1f%% (per-GPU tokens/s ratio); per-GPU target 475,000 tokens/s\n" % (
            n, per_gpu[n] / per_gpu[1] * 100))


def main() -> None:
    out, results = sys.argv[1], sys.argv[2]
    nccl_section(out)
    nanogpt_section(results)


if __name__ == "__main__":
    main()
