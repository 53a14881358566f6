"""Result JSON for the report's tests and its docs screenshot, made by hpq's own judges from real data.

- nccl: AWS's published 2x p5.48xlarge all_reduce_perf table (awslabs/awsome-distributed-ai
  micro-benchmarks/nccl-tests/README.md, tests/data/nccl/aws_2x_p5_all_reduce_perf.txt) as a complete log
  (``complete_log``: the run's INFO lines and closing lines around the verbatim table), and
  seed 004's 2x ml.g5.16xlarge excerpt; judged by hpq.validation.judges as `hpq test nccl` judges a log.
- sweep: run-nccl-test --sweep itself over the stand-in fabric (tests/fake_fabric.py: nccl-tests 2.19.6's own
  lines through the stand-in mpirun), one node's link slow.
- nanogpt: run-nanogpt's result file from a real run on one NVIDIA H200 (tests/data/report/README.md).
Each is a TestResult.to_dict(), what `hpq test ... --output json` prints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hpq.validation import judges
from hpq.validation.request import NANOGPT, NCCL, SWEEP, TestRequest
from hpq.validation.result import RawOutcome
from tests import fake_fabric
from tests.nccl_logs import efa_info

DATA = Path(__file__).parent / "data"
NANOGPT_RESULT = DATA / "report" / "h200x1_run-nanogpt_gpt2-124m.json"
P5, G5 = "ml.p5.48xlarge", "ml.g5.16xlarge"
CLUSTER = "ml-team-p5"


def complete_log(name: str, info: list[str]) -> str:
    """A published table (verbatim) as a complete log, like tests/test_report_verdict.published, but with the
    average nccl-tests would print for it: the mean of every busbw value in the table (out-of-place and
    in-place), so the page shows no number that is not the table's."""
    table = (DATA / "nccl" / name).read_text()
    rows = [ln.split()[1:] for ln in table.splitlines() if ln.split()[1:2] and ln.split()[1].isdigit()]
    busbw = [float(r[7]) for r in rows] + [float(r[11]) for r in rows if len(r) > 11]
    footer = f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {sum(busbw) / len(busbw):.4f} \n#\n"
    return "".join("0: " + ln + "\n" for ln in info) + table + "".join("0: " + ln + "\n" for ln in footer.splitlines())


def nccl_p5(cluster: str = CLUSTER, expect: str | None = None) -> dict[str, Any]:
    """AWS's published 2x p5 run, judged against the catalog (487.09 GB/s published) or ``expect``."""
    log = complete_log("aws_2x_p5_all_reduce_perf.txt", efa_info("p5-st-1"))
    req = TestRequest(NCCL, 2, 8, P5, expect)
    return judges.judge_bandwidth(req, RawOutcome(0, log, command="run-nccl-test 2 8"), P5, "slurm",
                                  cluster).to_dict()


def nccl_g5(cluster: str = CLUSTER) -> dict[str, Any]:
    """Seed 004's 2x g5.16xlarge over TCP (a seed-measured figure, 3 GB/s)."""
    log = (DATA / "nccl" / "seed004_slurm_2x_g5.16xlarge_excerpt.txt").read_text()
    req = TestRequest(NCCL, 2, 1, G5)
    return judges.judge_bandwidth(req, RawOutcome(0, log, command="run-nccl-test 2 1"), G5, "slurm",
                                  cluster).to_dict()


def sweep(tmp: Path, speeds: dict[str, float], cluster: str = CLUSTER) -> dict[str, Any]:
    """run-nccl-test --sweep over the stand-in fabric (p5 over EFA), judged as `hpq test sweep` judges it."""
    env = fake_fabric.cluster_env(tmp, speeds, seconds=0.05)
    exe = tmp / "all_reduce_perf"  # the stand-in mpirun plays it
    exe.write_text("#!/bin/sh\nexit 98\n")
    exe.chmod(0o755)
    res = subprocess.run([sys.executable, "-m", "hpq.scripts.run_nccl_test", "--sweep", "--binary", str(exe),
                          "--instance-type", P5.removeprefix("ml."), "--output", "json"], env=env, cwd=str(tmp),
                         capture_output=True, text=True, timeout=300)
    req = TestRequest(SWEEP, len(speeds))
    raw = RawOutcome(res.returncode, res.stdout, res.stderr, command="run-nccl-test --sweep --output json")
    return judges.judge_sweep(req, raw, P5, "slurm", cluster).to_dict()


def p5_speeds(n: int = 8, slow: int | None = 4) -> dict[str, float]:
    """Slurm node names (ip-a-b-c-d) at p5-like pair bandwidths; node ``slow`` at a quarter of it."""
    speeds = {f"ip-10-1-0-{10 + i}": 380.0 + 3 * i for i in range(n)}
    if slow is not None:
        speeds[f"ip-10-1-0-{10 + slow}"] = 95.0
    return speeds


def nanogpt(cluster: str = CLUSTER, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """The real run-nanogpt result, read back as `hpq test nanogpt` reads it (RawOutcome.files)."""
    text = json.dumps(doc) if doc is not None else NANOGPT_RESULT.read_text()
    req = TestRequest(NANOGPT, 1, 1)
    raw = RawOutcome(0, "# result: /fsx/hpq-results/nanogpt.json\n", command="run-nanogpt 1 1",
                     files={"result.json": text})
    return judges.judge_nanogpt(req, raw, None, "slurm", cluster).to_dict()


def write(folder: Path, name: str, doc: Any) -> Path:
    path = folder / name
    path.write_text(json.dumps(doc, indent=2, sort_keys=True))
    return path


def demo(folder: Path) -> list[Path]:
    """The four results of the docs screenshot (docs/report.md), written as `hpq test ... --output json` does."""
    work = folder / "sweep-run"
    work.mkdir(parents=True, exist_ok=True)
    # Each named for where its data came from: no one cluster produced all four.
    return [write(folder, "nccl.json", nccl_p5("aws-published-2x-p5")),
            write(folder, "sweep.json", sweep(work, p5_speeds(8, slow=4), "stand-in-fabric-8x-p5")),
            write(folder, "nanogpt.json", nanogpt("h200-dev-machine")),
            write(folder, "nccl-g5.json", nccl_g5("seed004-2x-g5"))]
