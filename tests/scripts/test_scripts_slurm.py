"""run-nccl-test and run-nanogpt launched through real Slurm across two slurmd (``srun -N2``).

Real: slurmctld + two slurmd + munged set up by the lifecycle (tests/slurm_cluster.py), the
commands exactly as the lifecycle installed them on the controller (<root>/opt/hpq/hpq/scripts/bin)
run by the system python with no hpq installed, salloc/srun/scontrol, the worker probe
(``srun -N1``) reading the node-info file the lifecycle wrote, gloo across the two nodes.
Stand-ins (from the fixture): IMDS, FSx (the shared directory), one host under both node names.
The instance type is ml.g5.16xlarge (fixture), so the transport is TCP and training uses gloo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpq.scripts import nccl_report
from tests.faults import python_with_corruption

pytestmark = pytest.mark.slow
SYSTEM_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def command(cluster, name: str):
    path = cluster.roots["controller"] / "opt/hpq/hpq/scripts/bin" / name
    assert path.exists(), f"the lifecycle did not install {path}"
    env = dict(cluster.env, HPQ_LAUNCHER_PYTHON=SYSTEM_PYTHON, HPQ_IMDS_ENDPOINT="off", OMP_NUM_THREADS="1",
               HPQ_RESULTS_DIR=str(cluster.shared_dir / "results"),
               HPQ_NODE_INFO=str(cluster.roots["node-1"] / "etc/hpq/node-info.json"))
    return str(path), env


def test_run_nccl_test_srun_two_nodes(slurm_cluster):
    exe, env = command(slurm_cluster, "run-nccl-test")
    faulty = python_with_corruption(sys.executable, "2048:3", slurm_cluster.shared_dir)  # tests/faults
    res = subprocess.run([exe, "2", "2", "--python", faulty, "-e", "64K", "-n", "2", "-w", "1"],
                         env=env, cwd=str(slurm_cluster.shared_dir),
                         capture_output=True, text=True, timeout=300)
    out = res.stdout
    assert "salloc -N 2" in out and "srun -N 2 --ntasks-per-node 2" in out, out[-3000:] + res.stderr[-3000:]
    assert "instance type ml.g5.16xlarge, transport tcp" in out
    placed = {line.split()[2]: line.split()[6] for line in out.splitlines() if line.startswith("#  Rank ")}
    assert placed == {"0": "node-1", "1": "node-1", "2": "node-2", "3": "node-2"}, out[-3000:]
    report = nccl_report.parse_text(out)
    assert report.wrong_total == 1 and [r.size_bytes for r in report.rows if r.wrong] == [2048]
    assert res.returncode == 1  # the corrupted element fails the run
    doc = json.loads(sorted((slurm_cluster.shared_dir / "results").glob("nccl-test-*.json"))[-1].read_text())
    assert doc["hosts"] == ["node-1", "node-2"] and doc["mode"] == "built-in"
    assert doc["environment"]["NCCL_NET_PLUGIN"] == "none" and doc["environment"]["HPQ_TORCH_BACKEND"] == "gloo"


def test_run_nanogpt_srun_two_nodes(slurm_cluster):
    exe, env = command(slurm_cluster, "run-nanogpt")
    res = subprocess.run([exe, "2", "1", "--python", sys.executable, "--iters", "20", "--ckpt-every", "10",
                          "--log-every", "10", "--fresh"], env=env, cwd=str(slurm_cluster.shared_dir),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "ranks on: 0=node-1, 1=node-2" in res.stdout
    assert "backend gloo | world 2" in res.stdout and "RESULT: PASS" in res.stdout
    ckpts = sorted(p.name for p in (slurm_cluster.shared_dir / "results/nanogpt/tiny").glob("ckpt-*.pt"))
    assert ckpts == ["ckpt-00000010.pt", "ckpt-00000020.pt"]


def test_run_nccl_test_sweep_srun_per_pair(slurm_cluster):
    """--sweep with no NODES: every idle node (sinfo), one salloc, then the pair as its own srun step
    (-N 2 -w node-1,node-2) with its own rendezvous, gloo across the two slurmd; the JSON verdict on stdout."""
    exe, env = command(slurm_cluster, "run-nccl-test")
    res = subprocess.run([exe, "--sweep", "--python", sys.executable, "-n", "3", "-w", "1", "--output", "json"],
                         env=env, cwd=str(slurm_cluster.shared_dir), capture_output=True, text=True, timeout=300)
    # Two idle nodes make one pair: the sweep cannot tell a slow node from its only partner, so INCONCLUSIVE
    # (exit 3, docs/validation.md); this test is about how the pair is placed and measured.
    assert res.returncode == 3, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["outcome"] == "INCONCLUSIVE"
    assert "salloc -N 2" in res.stderr and "# round 1/1: node-1 + node-2" in res.stderr
    assert doc["hosts"] == ["node-1", "node-2"] and doc["mode"] == "built-in" and doc["slow_nodes"] == []
    assert doc["size_bytes"] == 1 << 20  # gloo on CPUs
    (pair,) = doc["pairs"]
    assert pair["nodes"] == ["node-1", "node-2"] and pair["status"] == "ok" and pair["busbw_gbps"] > 0
    log = open(pair["log"]).read()
    assert "srun -N 2 --ntasks-per-node 1 --kill-on-bad-exit=1" in log and "-w node-1,node-2" in log
    placed = {line.split()[2]: line.split()[6] for line in log.splitlines() if line.startswith("#  Rank ")}
    assert placed == {"0": "node-1", "1": "node-2"}, log[-3000:]
    assert "backend gloo" in log and nccl_report.parse_text(log).wrong_total == 0
