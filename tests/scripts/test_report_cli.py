"""``hpq nccl-report`` as a user runs it: a real subprocess, real exit codes, JSON on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parents[1] / "data" / "nccl"


def hpq(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpq", "nccl-report", *args], input=stdin, capture_output=True,
                          text=True, timeout=60)


def test_json_output_and_outcomes():
    """Issue 13's H200 logs (a lent machine, no AWS type): judged on completion with --expect none (PASS), and
    INCONCLUSIVE (exit 3) with nothing to judge the bandwidth against, never a default PASS."""
    res = hpq(str(DATA / "h200x4_nccl_baseline_allreduce.txt"), "--output", "json", "--expect", "none")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["row_count"] == len(doc["rows"]) == 32
    assert doc["peak_busbw_gbps"] > 300 and doc["wrong_total"] == 0
    assert doc["verdict"]["ok"] is True and doc["outcome"] == doc["verdict"]["outcome"] == "PASS"
    plain = hpq(str(DATA / "h200x4_nccl_baseline_allreduce.txt"), "--output", "json")
    assert plain.returncode == 3 and json.loads(plain.stdout)["outcome"] == "INCONCLUSIVE"
    own = hpq(str(DATA / "h200x4_nccl_baseline_allreduce.txt"), "--expect", "300")  # your own baseline
    assert own.returncode == 0 and own.stdout.splitlines()[0].startswith("PASS: 366.32 GB/s peak busbw at 16 GB vs ")
    # the verdict and its check lines first, then the 32-row table (issue 25: the verdict reads at a glance)
    assert own.stdout.index("complete: PASS") < own.stdout.index("size(B)") < own.stdout.index("rows 32 |")


def test_shortfall_exits_1_with_explanation():
    res = hpq(str(DATA / "seed004_slurm_2x_g5.16xlarge_excerpt.txt"), "--instance-type", "p4d.24xlarge", "-n", "2")
    assert res.returncode == 1
    assert "FAIL" in res.stdout and "EFA was not used" in res.stdout and "hpq nccl-env ml.p4d.24xlarge" in res.stdout
    assert "Traceback" not in res.stderr


def test_stdin_and_unreadable_input_exit_2():
    text = (DATA / "seed004_nccom_2x_trn1.32xlarge_excerpt.txt").read_text()
    ok = hpq("-", "-t", "trn1.32xlarge", "-n", "2", stdin=text)
    assert ok.returncode == 0 and "37.01" in ok.stdout
    bad = hpq("-", stdin="this is not a benchmark log\n")
    assert bad.returncode == 2 and "no benchmark result rows" in bad.stderr and "Traceback" not in bad.stderr
    missing = hpq(str(DATA / "does-not-exist.log"))
    assert missing.returncode == 2
    unknown = hpq(str(DATA / "seed004_nccom_2x_trn1.32xlarge_excerpt.txt"), "-t", "ml.p5.huge")
    assert unknown.returncode == 2 and "unknown instance type" in unknown.stderr


def test_help_has_examples():
    res = subprocess.run([sys.executable, "-m", "hpq", "nccl-report", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and "Examples:" in res.stdout and "--instance-type" in res.stdout


def test_stdin_with_stray_bytes_is_still_read():
    """A log with a non-UTF-8 byte on stdin, under a strict stdin encoding (as with an en_US.UTF-8 locale)."""
    data = (DATA / "seed004_slurm_2x_g5.16xlarge_excerpt.txt").read_bytes() + b"\xff\xfe NCCL WARN junk\n"
    res = subprocess.run([sys.executable, "-m", "hpq", "nccl-report", "-", "--expect", "none"], input=data,
                         capture_output=True,
                         timeout=60, env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"})
    assert res.returncode == 0, res.stderr
    assert b"3.02" in res.stdout and b"Traceback" not in res.stderr


def test_a_cut_off_log_is_never_a_pass():
    """A run that died mid-table has good rows but no summary: FAIL (exit 1), with or without an instance type."""
    text = (DATA / "h200x4_nccl_baseline_allreduce.txt").read_text()
    cut = text[: text.index("Avg bus bandwidth")].rsplit("\n", 3)[0] + "\n"
    for args in ([], ["-t", "ml.p5.48xlarge"], ["--expect", "none"]):
        res = hpq("-", *args, stdin=cut)
        assert res.returncode == 1, res.stdout + res.stderr
        assert res.stdout.splitlines()[0].startswith("FAIL: ") and "cut off" in res.stdout
    whole = hpq("-", "--expect", "none", stdin=text)
    assert whole.returncode == 0 and "PASS" in whole.stdout


def _busbw(name: str) -> dict[int, tuple[float, float]]:
    res = hpq(str(DATA / name), "--output", "json", "--expect", "none")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["wrong_total"] == 0 and doc["ranks"] == 2 and not doc["truncated"], name
    return {r["size_bytes"]: (r["out_of_place"]["busbw_gbps"], r["in_place"]["busbw_gbps"]) for r in doc["rows"]}


def test_builtin_against_nvidia_nccl_tests_from_the_kept_logs():
    """Issue 13's check, from the raw logs alone through `hpq nccl-report`: NVIDIA nccl-tests 2.19.6
    (`all_reduce_perf -b 8 -e 16G -f 2 -g 2`, built against torch's NCCL 2.28.9 by bench/build_nccl_tests.sh)
    and `run-nccl-test 1 2 --launcher local --builtin`, interleaved twice on 2x H200 (NVLS off,
    bench/gpu_bench.sh stage nccltests). Every size from 128 MB: built-in busbw at least 0.98 of nccl-tests',
    out-of-place and in-place, in each interleaved pair."""
    for suffix in ("", "_run2"):
        ref = _busbw(f"h200x2_nccl-tests_all_reduce_perf{suffix}.txt")
        ours = _busbw(f"h200x2_run-nccl-test_builtin{suffix}.txt")
        big = [size for size in ref if size >= 128 << 20]
        assert len(big) == 8 and set(big) <= set(ours)  # 128 MB .. 16 GB
        for size in big:
            for mode in (0, 1):
                assert ours[size][mode] / ref[size][mode] >= 0.98, (suffix, size, mode)


def test_run_nccl_tests_own_nccl_tests_paths_parse_as_two_ranks():
    """The same machine through run-nccl-test's nccl-tests path (-g 2 in one process) and through the mpirun
    command run-nccl-test builds (one rank per GPU, MPI build): both full tables, two ranks, peaks like the
    direct run's."""
    for name in ("h200x2_run-nccl-test_nccl-tests_local.txt", "h200x2_run-nccl-test_mpirun.txt"):
        rows = _busbw(name)
        assert len(rows) == 32 and max(max(v) for v in rows.values()) > 340, name
