"""``hpq rehearse --sweep [--throttle INDEX=RATE]``: the pairwise sweep finds a slow link made on purpose.

Real: tc (iproute2) inside the worker's network namespace, the whole rehearsal (namespaced nodes,
Slurm, SSH into the controller), ``run-nccl-test --sweep --output json`` as a user runs it, gloo
pairs through srun. One rehearsal per case (CI time): 4 workers, validation skipped, worker
index 2 (worker-3) throttled to 30mbit, and the same with nothing throttled, which must name
nothing. The numbers these runs give on a 2-core machine are in docs/benchmarks.md.
Needs root; CI runs as root (a test that cannot run fails, it is not skipped).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from hpq.errors import UsageError
from hpq.rehearsal import netns, throttle
from tests.rehearsal.test_rehearse import leftovers, rehearse

pytestmark = [pytest.mark.daemons, pytest.mark.root]  # network namespaces, tc, the rehearsal

GBPS_30MBIT = 30e6 / 8 / 1e9  # 0.00375 GB/s


@pytest.fixture
def scratch_netns():
    name = f"hpq-tctest-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "ens5", "type", "veth", "peer", "name", "ens5p"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_rates_are_read_as_tc_reads_them(scratch_netns):
    """What --throttle accepts, tc sets to the same rate (tc -j reports bytes/s); what tc refuses, --throttle
    refuses before anything is created."""
    for rate in ("30mbit", "30Mbit", "1gbit", "2.5mbit", "4mibit", "2mbps", "1500kbit", "1000000"):
        netns.shape(scratch_netns, "ens5", rate)
        assert netns.egress_rate(scratch_netns, "ens5") == int(throttle.rate_bits(rate) / 8), rate
    for rate in ("30mbits", "fast", "mbit", "30 mbit"):
        with pytest.raises(netns.NetError):
            netns.shape(scratch_netns, "ens5", rate)
        with pytest.raises(UsageError):
            throttle.rate_bits(rate)


@pytest.mark.slow
def test_sweep_names_exactly_the_throttled_worker(env):
    res = rehearse(env, "slurm-gpu", "--nodes", "4", "--no-validate", "--sweep", "--throttle", "2=30mbit",
                   "--output", "json")
    assert res.returncode == 0, res.stderr[-4000:]
    r = json.loads(res.stdout)
    workers = [n for n in r["nodes"] if n["role"] == "worker"]
    third = workers[2]["slurm_node"]
    assert workers[2]["name"] == "worker-3" and r["result"] == "pass"
    s = r["sweep"]
    assert s["slow_nodes"] == [third] and s["expected_slow_nodes"] == [third] and s["check"]["ok"] is True
    assert s["throttled"] == [{"index": 2, "node": "worker-3", "slurm_node": third, "rate": "30mbit",
                               "tc_rate_bytes_per_s": 3750000}]
    assert s["remote_exit_code"] == 1 and s["exit_code"] == 1  # run-nccl-test --sweep itself: a slow node found
    assert set(s["scores"]) == {n["slurm_node"] for n in workers} and len(s["pairs"]) == 6
    # the throttled node measures what tc lets through (gloo sends about the message once per all-reduce),
    # the others what the bridge and two shared cores give, some 100 times more
    assert GBPS_30MBIT / 2 < s["scores"][third] < GBPS_30MBIT * 1.1, s["scores"]
    assert all(v > 20 * s["scores"][third] for n, v in s["scores"].items() if n != third), s["scores"]
    assert all(p["status"] == "ok" for p in s["pairs"])
    assert "--pairs-at-once 1" in s["command"] and s["evidence"][third]
    err = res.stderr
    assert err.index("--throttle 2=30mbit: egress of ens5 limited") < err.index("sweep: ssh ")  # before the sweep
    assert leftovers(r["run_id"], res) == []


@pytest.mark.slow
def test_unthrottled_sweep_names_none(env):
    res = rehearse(env, "slurm-gpu", "--nodes", "4", "--no-validate", "--sweep", "--output", "json")
    assert res.returncode == 0, res.stderr[-4000:]
    r = json.loads(res.stdout)
    s = r["sweep"]
    assert r["result"] == "pass" and s["slow_nodes"] == [] and s["check"]["ok"] is True
    assert s["remote_exit_code"] == 0 and s["throttled"] == [] and s["failed_pairs"] == 0
    assert len(s["scores"]) == 4 and all(v > 0.05 for v in s["scores"].values()), s["scores"]
    assert r["nccl"] is None and r["nanogpt"] is None  # --no-validate: only the sweep ran
    assert leftovers(r["run_id"], res) == []
