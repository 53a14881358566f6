"""scripts/env_check.py: the ranks' hpq-env blocks, parsed and compared with the worker type's environment.

The report script itself runs here for real (sh, env, grep), as srun/mpirun start it, so the blocks
parsed below are what a rank prints; every check has its broken twin (the same blocks made wrong).
"""

from __future__ import annotations

import os
import subprocess

from hpq.lifecycle import transport
from hpq.scripts import env_check

P5 = dict(transport.node_environment("ml.p5.48xlarge", transport.NodeProbe(efa_devices=32)).variables)


def rank_output(env: dict[str, str], local_rank: str = "0", node: str = "ip-10-1-0-7") -> str:
    """What one rank prints when started through env_check.wrap with ``env`` (a Slurm task on ``node``)."""
    base = {k: v for k, v in os.environ.items() if not transport.owns(k)}
    base.update(env, SLURMD_NODENAME=node, SLURM_LOCALID=local_rank)
    res = subprocess.run(env_check.wrap(["echo", "program ran"]), env=base, capture_output=True, text=True,
                         check=True)
    return res.stdout


def test_report_script_prints_one_block_per_node_then_runs_the_program():
    out = rank_output(dict(P5, NCCL_DEBUG="INFO", PATH_LIKE_NCCL="x", MY_NCCL_X="y"))
    lines = out.splitlines()
    assert lines[0] == "hpq-env: ip-10-1-0-7 begin" and lines[-2] == "hpq-env: ip-10-1-0-7 end"
    assert lines[-1] == "program ran"
    assert "hpq-env: ip-10-1-0-7 FI_PROVIDER=efa" in lines and "hpq-env: ip-10-1-0-7 NCCL_DEBUG=INFO" in lines
    assert not [ln for ln in lines if "MY_NCCL_X" in ln or "PATH_LIKE_NCCL" in ln]  # only the transport's own keys
    assert rank_output(P5, local_rank="3") == "program ran\n"  # other local ranks print nothing


def test_healthy_blocks_pass_and_leaked_ones_fail_with_the_source():
    text = "\n".join([rank_output(P5, node="n1"), "#  Rank  0 Group  0 Pid 1 on n1", rank_output(P5, node="n2")])
    ok = env_check.check(text, P5, {}, "`hpq nccl-env ml.p5.48xlarge`", nodes=2, required=True)
    assert ok.ok is True and ok.problems == [] and sorted(ok.effective) == ["n1", "n2"]
    leaked = "\n".join([rank_output(dict(P5, NCCL_NET_PLUGIN="none"), node=n) for n in ("n1", "n2")])
    bad = env_check.check(leaked, P5, {"NCCL_NET_PLUGIN": "none"}, "`hpq nccl-env ml.p5.48xlarge`", nodes=2)
    assert bad.ok is False and bad.problems == [
        "NCCL_NET_PLUGIN=none is set in the job but `hpq nccl-env ml.p5.48xlarge` does not set it; inherited from "
        "the environment the job was launched from (NCCL_NET_PLUGIN=none there: a CPU controller or login node's "
        "setting) (on n1, n2)"]
    worker_side = env_check.check(leaked, P5, {}, "X", nodes=2)  # not in the launching environment
    assert "set on the worker itself" in worker_side.problems[0]


def test_missing_different_cut_short_and_absent_blocks():
    want = dict(P5)
    short = dict(P5)
    del short["FI_PROVIDER"]
    short["FI_EFA_USE_DEVICE_RDMA"] = "0"
    text = rank_output(short, node="n1") + "hpq-env: n2 begin\nhpq-env: n2 FI_PROVIDER=efa\n"
    res = env_check.check(text, want, {}, "L", nodes=3)
    assert res.ok is False
    joined = "\n".join(res.problems)
    assert "FI_PROVIDER is missing in the job; L sets FI_PROVIDER=efa (on n1)" in joined
    assert "FI_EFA_USE_DEVICE_RDMA=0 in the job, L sets FI_EFA_USE_DEVICE_RDMA=1" in joined
    assert "the hpq-env block of n2 has no end line" in joined and "hpq-env blocks from 1 of 3 node(s)" in joined
    foreign = env_check.check("# nccl-tests output only\n", want, {}, "L", nodes=2)
    assert foreign.ok is None and foreign.problems == []  # a foreign log: no opinion
    own = env_check.check("# nccl-tests output only\n", want, {}, "L", nodes=2, required=True)
    assert own.ok is False and "printed no hpq-env block" in own.problems[0]


def test_launch_logging_keys_can_be_left_unjudged():
    text = rank_output(dict(P5, NCCL_DEBUG="WARN"), node="n1")
    assert env_check.check(text, P5, {}, "L", 1).ok is False
    assert env_check.check(text, P5, {}, "L", 1, unjudged=("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")).ok is True


def test_prefixed_lines_are_read():
    """``srun --label`` puts ``0: `` before each line; the mark is found anywhere in the line."""
    text = "\n".join("0: " + ln for ln in rank_output(P5, node="n1").splitlines())
    assert env_check.parse(text).nodes["n1"]["FI_PROVIDER"] == "efa"


class _Remote:
    def __init__(self, login_env: str):
        self.login_env = login_env

    def run(self, command: str, *a, **k):
        assert command == "env"
        return 0, self.login_env, ""


def test_rehearsal_judges_the_jobs_environment_against_the_type():
    """rehearsal/validate.job_environment: p5 blocks from both workers pass; the same with the controller's
    NCCL_NET_PLUGIN=none in the ranks fails and names the controller as the source."""
    from hpq.rehearsal import validate

    expected = validate.expected_environment("ml.p5.48xlarge")
    assert expected == P5 and "NCCL_NET_PLUGIN" not in expected
    good = "".join(rank_output(dict(P5, NCCL_DEBUG="INFO"), node=n) for n in ("w1", "w2"))
    res = validate.job_environment(_Remote("HOME=/home/ubuntu\n"), good, "ml.p5.48xlarge", 2)
    assert res["ok"] is True and res["message"].startswith("PASS") and sorted(res["effective"]) == ["w1", "w2"]
    bad = "".join(rank_output(dict(P5, NCCL_NET_PLUGIN="none"), node=n) for n in ("w1", "w2"))
    res = validate.job_environment(_Remote("NCCL_NET_PLUGIN=none\n"), bad, "ml.p5.48xlarge", 2)
    assert res["ok"] is False and "NCCL_NET_PLUGIN=none is set in the job" in res["message"]
    assert "inherited from the environment the job was launched from" in res["message"]
    res = validate.job_environment(_Remote(""), "no blocks\n", "ml.p5.48xlarge", 2)
    assert res["ok"] is False  # hpq's own launch always prints them: none is no pass


def test_a_launch_removes_every_inherited_transport_setting(monkeypatch):
    """launch.child_env: NCCL_, FI_, GLOO_ and aws-ofi-nccl's OFI_NCCL_ settings inherited from the submitting
    node are removed unless the worker's environment sets them (an OFI_NCCL_PROTOCOL leaked through before
    OFI_NCCL_ was owned: found by review). Twin: inherit_transport=True, the salloc re-run, keeps them."""
    from hpq.scripts import launch

    leaked = {"NCCL_NET_PLUGIN": "none", "FI_PROVIDER": "tcp", "OFI_NCCL_PROTOCOL": "RDMA", "GLOO_SOCKET_IFNAME": "x"}
    for key, value in leaked.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HPQ_KEEP_ENV", raising=False)
    env = launch.child_env({"FI_PROVIDER": "efa"})
    assert env["FI_PROVIDER"] == "efa"
    assert [k for k in ("NCCL_NET_PLUGIN", "OFI_NCCL_PROTOCOL", "GLOO_SOCKET_IFNAME") if k in env] == []
    kept = launch.child_env({}, inherit_transport=True)
    assert all(kept[k] == v for k, v in leaked.items())
