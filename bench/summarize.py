# ruff: noqa: UP031
"""Summarise a bench/gpu_bench.sh run as markdown: built-in vs nccl-tests, nanoGPT throughput (hpq and karpathy).

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
    # The reference is NVIDIA's nccl-tests, built by the run (stage nccltests).
    def reports(pattern):
        return [x for x in (load(p) for p in sorted(glob.glob(os.path.join(out, pattern)))) if x]

    bases, ref = reports("*_nccl-tests_all_reduce_perf_run*.txt"), "nccl-tests"
    builtins = reports("*_run-nccl-test_builtin_run*.txt")
    if not builtins or not bases:
        return
    print("## all-reduce busbw (GB/s), sizes >= 128 MB: built-in vs %s, runs interleaved\n" % ref)
    print(("| size | %s oop | built-in oop | %s ip | built-in ip | oop ratio (mean, worst) "
           "| ip ratio (mean, worst) |") % (ref, ref))
    print("|---:|---|---|---|---|---|---|")
    worst = {"oop": 9.9, "ip": 9.9}
    mean_worst = {"oop": 9.9, "ip": 9.9}

    def col(reports, size, mode):
        vals = []
        for rep in reports:
            for r in rep.rows:
                if r.size_bytes == size:
                    m = r.out_of_place if mode == "oop" else r.in_place
                    if m is not None:
                        vals.append(m.busbw_gbps)
        return vals

    for row in builtins[0].rows:
        if row.size_bytes < MIN_TARGET_BYTES:
            continue
        cells = []
        for mode in ("oop", "ip"):
            bv, hv = col(bases, row.size_bytes, mode), col(builtins, row.size_bytes, mode)
            if not bv or not hv or min(bv) <= 0:  # one GPU: busbw is 0 by definition, no ratio
                cells.append(("-", "-", "-"))
                continue
            mean_ratio = (sum(hv) / len(hv)) / (sum(bv) / len(bv))
            worst_ratio = min(hv) / max(bv)
            worst[mode] = min(worst[mode], worst_ratio)
            mean_worst[mode] = min(mean_worst[mode], mean_ratio)
            cells.append((" / ".join("%.2f" % x for x in bv), " / ".join("%.2f" % x for x in hv),
                          "%.3f, %.3f" % (mean_ratio, worst_ratio)))
        print("| %d MB | %s | %s | %s | %s | %s | %s |" % (
            row.size_bytes >> 20, cells[0][0], cells[0][1], cells[1][0], cells[1][1], cells[0][2], cells[1][2]))
    print("\nlowest ratio at >= 128 MB: in-place mean %.3f / worst-case %.3f, out-of-place mean %.3f / worst-case "
          "%.3f (target %.2f)" % (mean_worst["ip"], worst["ip"], mean_worst["oop"], worst["oop"], TARGET_RATIO))
    print("peaks: built-in %s, %s %s GB/s; #wrong built-in %s, %s %s\n" % (
        " / ".join("%.2f" % x.peak_busbw_gbps for x in builtins), ref,
        " / ".join("%.2f" % x.peak_busbw_gbps for x in bases),
        " / ".join(str(x.wrong_total) for x in builtins), ref, " / ".join(str(x.wrong_total) for x in bases)))


def _options(tokens):
    """The variant's own flags: drop the ones every benchmark run shares."""
    shared = {"--launcher": 1, "--model": 1, "--iters": 1, "--ckpt-every": 1, "--log-every": 1, "--log-dir": 1}
    out, skip = [], 0
    for tok in tokens:
        if skip:
            skip -= 1
        elif tok in shared:
            skip = shared[tok]
        else:
            out.append(tok)
    return out


def load_nanogpt_runs(results: str) -> list:
    """run-nanogpt's result JSON files in RESULTS_DIR that carry metrics."""
    runs = []
    for p in sorted(glob.glob(os.path.join(results, "nanogpt-*.json"))):
        if p.endswith(".metrics.json"):
            continue
        with open(p) as fh:
            data = json.load(fh)
        if data.get("metrics"):
            runs.append(data)
    return runs


def nanogpt_section(runs: list) -> None:
    if not runs:
        return
    print("## nanoGPT gpt2-124m (bf16, micro-batch 16, context 1024)\n")
    print("| GPUs | options | tokens/s total | tokens/s per GPU | ms/iter | MFU | bf16 matmul peak | loss first->last | exit |")
    print("|---:|---|---:|---:|---:|---:|---:|---|---:|")
    per_gpu = {}
    for r in runs:
        m = r["metrics"]
        n = m["world_size"]
        opts = " ".join(_options(r["command"].split()[3:])) or "-"
        if m.get("tokens_per_s"):
            per_gpu.setdefault(n, []).append((m["tokens_per_s_per_process"], opts))
        print("| %d | %s | %s | %s | %.1f | %.1f%% | %.0f TFLOP/s | %.3f -> %.3f | %d |" % (
            n, opts, format(int(m["tokens_per_s"] or 0), ","), format(int(m["tokens_per_s_per_process"] or 0), ","),
            m["iter_ms"] or 0, (m["mfu"] or 0) * 100, m["peak_tflops"] or 0, m["first_loss"], m["final_loss"],
            r["exit_status"]))
    if 1 in per_gpu and len(per_gpu) > 1:
        one = per_gpu[1][0][0]
        n = max(per_gpu)
        print()
        for tps, opts in per_gpu[n]:
            print("weak scaling 1 -> %d GPUs with `%s`: %.1f%% (per-GPU tokens/s %s vs %s; target 97%%, "
                  "475,000 per GPU)" % (n, opts, tps / one * 100, format(int(tps), ","), format(int(one), ",")))
        print()


def nccl_paths_section(out: str) -> None:
    """run-nccl-test's own nccl-tests paths (local -g N, and its mpirun command), one line each."""
    for pattern, what in (("*_run-nccl-test_nccl-tests_local.txt", "run-nccl-test --launcher local (nccl-tests -g N)"),
                          ("*_run-nccl-test_mpirun.txt", "run-nccl-test's mpirun command (nccl-tests MPI build)")):
        for path in sorted(glob.glob(os.path.join(out, pattern))):
            rep = load(path)
            if rep:
                print("- %s, `%s`: %d sizes, peak busbw %.2f GB/s, #wrong %s" % (
                    what, os.path.basename(path), len(rep.rows), rep.peak_busbw_gbps, rep.wrong_total))
    print()


# karpathy/nanoGPT model.py's estimate_mfu: 6N + 12 L H Q T FLOPs per token (N: non-embedding parameters).
_KARPATHY_SHAPE = {"L": 12, "H": 12, "Q": 64, "T": 1024}


def karpathy_section(out: str, runs: list) -> None:
    import re
    import statistics

    path = os.path.join(out, "karpathy_nanogpt_runs.txt")
    if not os.path.exists(path):
        return
    with open(path, errors="replace") as fh:
        text = fh.read()
    peak = max((r["metrics"].get("peak_tflops") or 0 for r in runs), default=0) * 1e12
    print("## karpathy/nanoGPT train.py, same shape (random GPT-2 tokens, micro-batch 16, context 1024)\n")
    print("| GPUs | tokens/iter | median ms/iter (iters >= 10) | tokens/s total | tokens/s per GPU | MFU |")
    print("|---:|---:|---:|---:|---:|---:|")
    per_gpu = {}
    for block in re.split(r"^===== karpathy train.py ", text, flags=re.M)[1:]:
        n = int(block.split()[0])
        tokens = re.search(r"tokens per iteration will be: ([\d,]+)", block)
        params = re.search(r"number of parameters: ([\d.]+)M", block)
        times = [float(ms) for it, ms in re.findall(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms", block, re.M)
                 if int(it) >= 10]
        if not (tokens and params and times):
            print("| %d | (no result: see karpathy_nanogpt_runs.txt) | | | | |" % n)
            continue
        tpi = int(tokens.group(1).replace(",", ""))
        ms = statistics.median(times)
        tps = tpi / (ms / 1000)
        sh = _KARPATHY_SHAPE
        flops = 6 * float(params.group(1)) * 1e6 + 12 * sh["L"] * sh["H"] * sh["Q"] * sh["T"]
        mfu = "%.1f%%" % (tps * flops / n / peak * 100) if peak else "-"
        per_gpu[n] = tps / n
        print("| %d | %s | %.1f | %s | %s | %s |" % (n, format(tpi, ","), ms, format(int(tps), ","),
                                                    format(int(tps / n), ","), mfu))
    if 1 in per_gpu and len(per_gpu) > 1:
        n = max(per_gpu)
        print("\nkarpathy weak scaling 1 -> %d GPUs: %.1f%% (MFU against the measured bf16 matmul peak of the "
              "run-nanogpt runs, %.0f TFLOP/s)\n" % (n, per_gpu[n] / per_gpu[1] * 100, peak / 1e12))


def main() -> None:
    out, results = sys.argv[1], sys.argv[2]
    nccl_section(out)
    nccl_paths_section(out)
    runs = load_nanogpt_runs(results)
    nanogpt_section(runs)
    karpathy_section(out, runs)


if __name__ == "__main__":
    main()
