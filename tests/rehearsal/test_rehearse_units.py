"""The pieces of ``hpq rehearse`` that need no root: names, subnet choice, the IMDS stand-in, CloudFormation
evaluation, HyperPod's on-node files, the step-log parser, the report, and the CLI's usage errors.

The IMDS stand-in is checked against botocore's own IMDS client (the code every AWS SDK call on a
node goes through), not against assumptions of ours: it must hand out credentials over IMDSv2 and
refuse what EC2's IMDS refuses (no token, a bad or expired token, a missing or out-of-range TTL).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from hpq.errors import UsageError
from hpq.lifecycle import catalog
from hpq.rehearsal import cfn_eval, netns, plan, report, state
from hpq.rehearsal.run import default_worker_type
from hpq.standins import hyperpod, imds

# ---------------------------------------------------------------------------- plan and names


def make_plan(run_id: str = "a1b2c3", workers: int = 2, login: bool = False) -> plan.Plan:
    p = plan.new_plan(run_id, "slurm-gpu", workers, "ml.g5.xlarge", login, "10.201.7.0/24")
    groups = [("controller", plan.CONTROLLER, "ml.m5.xlarge", 1), ("worker", plan.WORKER, "ml.g5.xlarge", workers)]
    if login:
        groups.append(("login", plan.LOGIN, "ml.m5.xlarge", 1))
    plan.add_nodes(p, groups)
    return p


def test_nodes_get_hyperpod_names_distinct_addresses_and_ec2_ids():
    p = make_plan(login=True)
    assert [n.name for n in p.nodes] == ["controller", "login-1", "worker-1", "worker-2"]
    assert len({n.ip for n in p.nodes}) == 4 and all(ipaddress.ip_address(n.ip) in ipaddress.ip_network(p.subnet)
                                                     for n in p.nodes)
    for n in p.nodes:
        assert n.hostname == "ip-" + n.ip.replace(".", "-")
        assert n.instance_id.startswith("i-") and len(n.instance_id) == 19 and int(n.instance_id[2:], 16) >= 0
        assert len(n.host_iface) <= 15 and len(n.netns) <= 64  # Linux IFNAMSIZ
    assert [n.instance_name for n in p.nodes if n.group == "worker"] == ["worker-1", "worker-2"]
    assert p.node("ip-" + p.nodes[2].ip.replace(".", "-")).name == "worker-1"


def test_two_runs_share_no_name():
    a, b = make_plan("aaaaaa"), make_plan("bbbbbb")
    names_a = {a.bridge, a.cluster_name} | {x for n in a.nodes for x in (n.netns, n.host_iface, n.instance_id)}
    names_b = {b.bridge, b.cluster_name} | {x for n in b.nodes for x in (n.netns, n.host_iface, n.instance_id)}
    assert not names_a & names_b


def test_subnet_avoids_every_network_the_host_uses():
    first = netns.pick_subnet("c0ffee", used=[])
    again = netns.pick_subnet("c0ffee", used=[])
    assert first == again and first.startswith("10.") and first.endswith(".0/24")  # derived from the run id
    taken = ipaddress.ip_network(first)
    other = netns.pick_subnet("c0ffee", used=[taken, ipaddress.ip_network("10.0.0.0/9")])
    assert not ipaddress.ip_network(other).overlaps(taken)
    assert ipaddress.ip_network(other).subnet_of(ipaddress.ip_network("10.128.0.0/9"))
    with pytest.raises(netns.NetError):
        netns.pick_subnet("c0ffee", used=[ipaddress.ip_network("10.0.0.0/8")])


def test_default_worker_type_has_the_lowest_bandwidth_expectation():
    for variant in ("slurm-gpu", "eks-gpu"):
        chosen = default_worker_type(variant, 2)
        assert catalog.lookup(chosen).accelerator == catalog.GPU
        figure = catalog.expected_busbw(chosen, 2)
        others = [catalog.expected_busbw(t, 2) for t in catalog.gpu_types()]
        assert figure is None or all(o is None or o.gbps >= figure.gbps for o in others)
    assert catalog.lookup(default_worker_type("slurm-trn", 2)).accelerator == catalog.TRAINIUM


# ---------------------------------------------------------------------------- IMDS stand-in


@pytest.fixture
def imds_server():
    meta = imds.Metadata("i-0123456789abcdef0", "ml.g5.16xlarge", "us-west-2", "us-west-2a", "10.201.7.21",
                         "ip-10-201-7-21", "hpq-role")
    server = imds.serve(meta, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _call(url: str, method: str = "GET", headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=b"" if method == "PUT" else None)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_imds_enforces_v2_tokens(imds_server):
    url = imds_server
    assert _call(url + "/latest/meta-data/instance-id")[0] == 401  # IMDSv1 is off
    assert _call(url + "/latest/api/token", "PUT")[0] == 400  # TTL header required
    assert _call(url + "/latest/api/token", "PUT", {imds.TTL_HEADER: "21601"})[0] == 400
    assert _call(url + "/latest/meta-data/instance-id", headers={imds.TOKEN_HEADER: "forged"})[0] == 401
    code, token = _call(url + "/latest/api/token", "PUT", {imds.TTL_HEADER: "1"})
    assert code == 200 and token
    h = {imds.TOKEN_HEADER: token}
    assert _call(url + "/latest/meta-data/instance-id", headers=h) == (200, "i-0123456789abcdef0")
    assert _call(url + "/latest/meta-data/instance-type", headers=h) == (200, "g5.16xlarge")  # no ml.
    assert _call(url + "/latest/meta-data/placement/region", headers=h) == (200, "us-west-2")
    assert _call(url + "/latest/meta-data/no-such-key", headers=h)[0] == 404
    time.sleep(1.2)
    assert _call(url + "/latest/meta-data/instance-id", headers=h)[0] == 401  # expired


def test_botocore_gets_credentials_from_the_imds_stand_in(imds_server):
    """botocore's own IMDSv2 fetcher (what boto3 and the AWS CLI on a node use) reads the role's credentials."""
    from botocore.utils import InstanceMetadataFetcher

    creds = InstanceMetadataFetcher(timeout=2, num_attempts=1, base_url=imds_server).retrieve_iam_role_credentials()
    assert creds["role_name"] == "hpq-role" and creds["access_key"] and creds["token"]


def test_lifecycle_imds_client_reads_the_stand_in(imds_server):
    from hpq.lifecycle.imds import ImdsClient

    client = ImdsClient(imds_server, attempts=1)
    assert client.instance_id() == "i-0123456789abcdef0"
    assert client.instance_type() == "g5.16xlarge" and not client.v1


# ---------------------------------------------------------------------------- CloudFormation evaluation


def _scope(template: dict, params: dict | None = None, refs: dict | None = None) -> cfn_eval.StackScope:
    pseudo = {"AWS::Region": "us-west-2", "AWS::AccountId": "123456789012", "AWS::StackName": "s",
              "AWS::Partition": "aws", "AWS::StackId": "arn:aws:cloudformation:us-west-2:1:stack/s/x"}
    refs = refs or {}
    return cfn_eval.StackScope("t.json", template, params or {}, pseudo, ref=lambda lg: refs[lg],
                               getatt=lambda lg, attr: f"{refs[lg]}.{attr}")


def test_cfn_eval_intrinsics():
    t = {"Parameters": {"Name": {"Type": "String"}, "Login": {"Type": "String", "Default": "false"},
                        "Cidr": {"Type": "String", "Default": "10.0.0.0/16"}},
         "Conditions": {"HasLogin": {"Fn::Equals": [{"Ref": "Login"}, "true"]},
                        "NoLogin": {"Fn::Not": [{"Condition": "HasLogin"}]}},
         "Resources": {"Bucket": {"Type": "AWS::S3::Bucket"}}}
    sc = _scope(t, {"Name": "c1"}, {"Bucket": "bkt"})
    assert sc.evaluate({"Fn::Sub": "s3://${Bucket}/${Name}-${AWS::Region}"}) == "s3://bkt/c1-us-west-2"
    assert sc.evaluate({"Fn::Sub": ["${X}/${Bucket.Arn}", {"X": {"Ref": "Name"}}]}) == "c1/bkt.Arn"
    assert sc.evaluate([1, {"Fn::If": ["HasLogin", "login", {"Ref": "AWS::NoValue"}]}, 3]) == [1, 3]
    assert sc.evaluate({"k": {"Fn::If": ["NoLogin", {"Ref": "AWS::NoValue"}, 1]}}) == {}
    assert sc.evaluate({"Fn::Select": [1, {"Fn::Split": ["/", "a/b/c"]}]}) == "b"
    assert sc.evaluate({"Fn::Join": ["-", ["a", {"Ref": "Name"}]]}) == "a-c1"
    assert sc.evaluate({"Fn::Cidr": [{"Ref": "Cidr"}, 2, 8]}) == ["10.0.0.0/24", "10.0.1.0/24"]
    with pytest.raises(cfn_eval.EvalError):
        sc.evaluate({"Ref": "Nope"})
    with pytest.raises(cfn_eval.EvalError):
        _scope({"Parameters": {"Required": {"Type": "String"}}})


# ---------------------------------------------------------------------------- HyperPod's files


def test_resource_config_has_hyperpods_slurm_shape():
    p = make_plan(login=True)
    rc = hyperpod.resource_config(p, "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdefabcdef")
    cfg = rc["ClusterConfig"]
    assert cfg["ClusterType"] == "Slurm" and cfg["ClusterName"] == p.cluster_name
    assert cfg["SlurmConfig"]["PrimaryControllerIp"] == p.controller.ip
    groups = {g["Name"]: g for g in rc["InstanceGroups"]}
    assert set(groups) == {"controller", "login", "worker"}
    assert groups["worker"]["InstanceType"] == "ml.g5.xlarge"
    inst = groups["worker"]["Instances"]
    assert [i["InstanceName"] for i in inst] == ["worker-1", "worker-2"]
    for i in inst:
        assert set(i) == {"InstanceName", "InstanceId", "AgentIpAddress", "CustomerIpAddress", "InstanceLabel"}
        assert i["AgentIpAddress"] != i["CustomerIpAddress"]


def test_resource_config_eks_names_instances_by_id():
    p = plan.new_plan("e1e2e3", "eks-gpu", 2, "ml.g5.xlarge", False, "10.201.8.0/24")
    plan.add_nodes(p, [("worker", plan.WORKER, "ml.g5.xlarge", 2)])
    rc = hyperpod.resource_config(p, "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdefabcdef")
    assert rc["ClusterConfig"]["ClusterType"] == "Kubernetes" and "KubernetesConfig" in rc["ClusterConfig"]
    inst = rc["InstanceGroups"][0]["Instances"]
    assert all(i["InstanceName"] == "hyperpod-" + i["InstanceId"] for i in inst)


def test_agent_slurm_conf_names_nodes_by_ip_and_defaults_to_dev():
    p = make_plan(login=True)
    conf = hyperpod.slurm_conf(p, 2, 1000, {})
    assert f"SlurmctldHost={p.controller.hostname}" in conf
    node_lines = [ln for ln in conf.splitlines() if ln.startswith("NodeName=")]
    assert [ln.split()[0].split("=")[1] for ln in node_lines] == [n.hostname for n in p.nodes if n.role != "controller"]
    assert "PartitionName=dev Nodes=ALL Default=YES" in conf
    assert "enable_configless" not in conf  # the lifecycle adds it, as on HyperPod
    parts = hyperpod.partitions_of(p, [hyperpod.GroupRequest("worker", "ml.g5.xlarge", 2, "s3://b/p", "x",
                                                             "Compute", ["gpu"])])
    conf = hyperpod.slurm_conf(p, 2, 1000, parts)
    assert f"PartitionName=gpu Nodes={','.join(n.hostname for n in p.worker_nodes)} Default=YES" in conf
    # HyperPod still adds every node, the login node too, to its universal partition (cfn/common.py)
    assert "PartitionName=dev Nodes=ALL Default=NO" in conf
    assert sum(ln.startswith("PartitionName=") for ln in conf.splitlines()) == 2


def test_roles_from_api_config_then_legacy_parameters():
    groups = [hyperpod.GroupRequest("head", "ml.m5.xlarge", 1, "s3://b/p", "on_create.sh", "Controller"),
              hyperpod.GroupRequest("gpu", "ml.g5.xlarge", 2, "s3://b/p", "on_create.sh", "Compute"),
              hyperpod.GroupRequest("ctl", "ml.m5.xlarge", 1, "s3://b/p", "on_create.sh", None)]
    roles = hyperpod.roles_of(groups, {"controller_group": "ctl", "login_group": "gpu"})
    assert roles == {"head": plan.CONTROLLER, "gpu": plan.WORKER, "ctl": plan.CONTROLLER}
    assert hyperpod.split_s3_uri("s3://sagemaker-x/lifecycle") == ("sagemaker-x", "lifecycle")
    with pytest.raises(hyperpod.HyperPodError):
        hyperpod.split_s3_uri("https://example.com/x")


def test_step_parser_reads_the_lifecycles_own_log_lines(tmp_path):
    """Lines produced by lifecycle/main.py itself (its logger and run_steps), not hand-written samples."""
    from hpq.lifecycle import context, main

    def ok(ctx):
        return "fine"

    def broken(ctx):
        raise RuntimeError("disk on fire")

    def degraded(ctx):
        return context.Degraded("no FSx filesystem found: continuing without /fsx")

    log = main.setup_logging(str(tmp_path / "lifecycle.log"))
    ctx = context.Context(context.Settings.from_env({"HPQ_ROOT": str(tmp_path)}), log)
    steps = [("identify", ok, "x"), ("nccl-env", degraded, "z"), ("fsx", broken, "y")]
    orig = main.STEPS
    main.STEPS = steps
    try:
        with pytest.raises(main.StepFailed):
            main.run_steps(ctx, ["identify", "nccl-env", "fsx"])
    finally:
        main.STEPS = orig
        for h in log.handlers:
            h.close()
        logging.getLogger("hpq.lifecycle").handlers[:] = []
    parsed = [hyperpod.parse_step_line(ln) for ln in (tmp_path / "lifecycle.log").read_text().splitlines()]
    parsed = [p for p in parsed if p]
    assert [(n, s) for n, s, _, _ in parsed] == [("identify", "running"), ("identify", "done"),
                                                  ("nccl-env", "running"), ("nccl-env", "warning"),
                                                  ("fsx", "running"), ("fsx", "failed")]
    assert parsed[-1][3] == "RuntimeError: disk on fire" and isinstance(parsed[1][2], float)
    assert parsed[3][3] == "no FSx filesystem found: continuing without /fsx" and isinstance(parsed[3][2], float)
    assert parsed[1][3] == "fine"
    text = (tmp_path / "lifecycle.log").read_text()
    assert " WARNING step nccl-env: done in " in text and " INFO step identify: done in " in text


# ---------------------------------------------------------------------------- report, state, CLI


def test_report_names_node_step_cause_and_log():
    failure = {"stage": "lifecycle", "node": "worker-2", "step": "slurm", "cause": "OnCreate exited 1: boom",
               "log": "/var/log/hpq-rehearse/x/worker-2.lifecycle.log", "last_lines": ["a", "b"]}
    text = report.failure_text(failure)
    assert text.splitlines()[0] == ("hpq: error: rehearsal failed at stage lifecycle, node worker-2, step slurm: "
                                    "OnCreate exited 1: boom")
    assert "log: /var/log/hpq-rehearse/x/worker-2.lifecycle.log" in text and "  | b" in text
    result = {"variant": "slurm-gpu", "run_id": "x", "result": "pass", "seconds": 1.0, "nodes": [
        {"name": "worker-1", "role": "worker", "hostname": "ip-10-1-1-21", "ip": "10.1.1.21", "instance_id": "i-1",
         "slurm_node": "ip-10-1-1-21", "lifecycle_seconds": 2.0, "slurm_ready_seconds": 1.5,
         "steps": [{"name": "fsx", "seconds": 0.5, "status": "done"}]}],
        "slurm_nodes": {"ip-10-1-1-21": "idle"}, "slurm_nodes_idle": 1}
    table = report.table(result)
    assert "PASS" in table and "worker (idle)" in table and "fsx=0.5" in table
    assert "observe:" not in table  # no --observability: no line
    result["observe"] = {"verdict": "FAIL", "reason": "below 95% of the expected series: worker-1 60%", "nodes": [
        {"node": "worker-1", "expected": ["a", "b", "c", "d", "e"], "present": ["a", "b", "c"],
         "missing": {"e": "why", "d": "why"}}]}
    table = report.table(result)
    assert "observe: FAIL: below 95% of the expected series: worker-1 60%" in table
    assert "  worker-1: 3/5 series (d, e)" in table
    # nanoGPT's losses as every verdict shows them (outcome.fmt_number), never a float's repr
    result["nanogpt"] = {"ok": True, "metrics": {"first_loss": 3.3293685913085938, "final_loss": 2.786975860595703}}
    assert "nanogpt: PASS (loss 3.3294 -> 2.7870)" in report.table(result).splitlines()


def test_state_round_trip_and_idempotent_teardown(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "state")
    work = tmp_path / "hpq-rehearse-abcdef-x"
    st = state.RunState("abcdef", "slurm-gpu", 1, 0.0, str(work), str(tmp_path / "logs" / "abcdef"),
                            nodes=[state.NodeState("worker-1", "hpq-abcdef-worker-1", "hpqabcdefn0")])
    (work / "nodes").mkdir(parents=True)
    st.save()
    loaded = state.RunState.load(st.path)
    assert loaded == st and loaded.node("worker-1").netns == "hpq-abcdef-worker-1"
    assert state.teardown(loaded) == []  # nothing of it exists: nothing to complain about
    assert not work.exists() and not st.path.exists()
    assert state.teardown(loaded) == []


def run_hpq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpq", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, message", [
    (["rehearse", "nope"], "unknown variant 'nope'"),
    (["rehearse", "--nodes", "0"], "--nodes"),
    (["rehearse", "eks-gpu", "--login"], "--login does not apply to eks-gpu: EKS clusters have no login group"),
    (["rehearse", "--instance-type", "ml.trn1.32xlarge"], "is not a GPU type for slurm-gpu"),
    (["rehearse", "--instance-type", "ml.p5.4xlarge"], "known p5 sizes"),
    (["rehearse", "--node-env", "NOEQUALS"], "expected [NODE:]NAME=VALUE"),
    (["rehearse", "--node-env", "worker-9:HPQ_X=1"], "no node 'worker-9'"),
    (["rehearse", "--throttle", "2=30mbit"], "--throttle does not apply without --sweep"),
    (["rehearse", "--sweep-args", "-n 5"], "--sweep-args does not apply without --sweep"),
    (["rehearse", "--nanogpt-args", "--iters 0"], "--nanogpt-args: run-nanogpt refuses it: argument --iters"),
    (["rehearse", "--nodes", "٣"], "'٣' is not a whole number"),
    (["rehearse", "eks-gpu", "--sweep"], "eks-gpu has no Slurm"),
    (["rehearse", "--nodes", "1", "--sweep"], "--sweep needs at least 2 workers"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "4=30mbit"], "no worker 4; with --nodes 4 INDEX is 0 to 3"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "-1=30mbit"], "expected INDEX=RATE"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "worker-3=30mbit"], "expected INDEX=RATE"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "2"], "expected INDEX=RATE"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "2=30mbits"], "not a tc rate"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "2=10%"], "not a tc rate"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "2=1e3mbit"], "not a tc rate"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "2=500kbit"], "below 1mbit"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "2=30"], "a bare number is bits per second"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "2=30mbit", "--throttle", "2=1gbit"],
     "worker 2 is already throttled"),
    (["rehearse", "--nodes", "4", "--sweep", "--throttle", "0=30mbit", "--throttle", "2=30mbit"],
     "the sweep can name at most 1 slow node(s) among 4"),
    (["rehearse", "--nodes", "2", "--sweep", "--throttle", "1=30mbit"], "--throttle needs at least 3 workers"),
    (["rehearse", "--nccl-args", "-e 1M --expect 3"], "a rehearsal reports the bridge's bandwidth without judging"),
])
def test_bad_usage_is_one_line_exit_2(args, message):
    """Refused before anything is created: the first thing a rehearsal does is say which bridge it made."""
    res = run_hpq(*args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpq: error:") and message in lines[0], res.stderr
    assert res.stdout == ""


def test_missing_prerequisites_name_the_debian_packages(monkeypatch, tmp_path):
    from hpq.rehearsal import prereqs

    monkeypatch.setattr(prereqs, "SEARCH", str(tmp_path))  # a machine without any of the tools
    monkeypatch.setattr(prereqs.os, "geteuid", lambda: 0)
    with pytest.raises(UsageError) as exc:
        prereqs.check("slurm-gpu")
    msg = str(exc.value)
    for pkg in ("slurmctld", "slurmd", "slurm-client", "munge", "openssh-server", "iproute2", "util-linux"):
        assert pkg in msg.split("apt-get install", 1)[1]
    with pytest.raises(UsageError) as exc:
        prereqs.check("eks-gpu")
    assert "slurmd" not in str(exc.value)  # EKS nodes run no Slurm


@pytest.mark.parametrize("absent", ["awscli", "numpy", "moto"])
def test_missing_python_packages_are_named_before_anything_starts(monkeypatch, absent):
    """A fresh machine with only `pip install hyperpod-quickstart` (no [rehearse] extra): the nodes would find no
    aws CLI for the FSx lookup and torch's object collectives would fail without numpy (seen on a fresh venv)."""
    import importlib.util

    from hpq.rehearsal import prereqs

    real = importlib.util.find_spec
    monkeypatch.setattr(prereqs.importlib.util, "find_spec", lambda name, *a: None if name == absent else real(name, *a))
    monkeypatch.setattr(prereqs.os, "geteuid", lambda: 0)
    monkeypatch.setattr(prereqs, "missing_binaries", lambda slurm: {})
    with pytest.raises(UsageError) as exc:
        prereqs.check("slurm-gpu")
    assert "hyperpod-quickstart[rehearse]" in str(exc.value) and "pip install" in str(exc.value)


def test_help_lists_rehearse_without_importing_it():
    res = run_hpq("--help")
    assert res.returncode == 0 and "rehearse" in res.stdout
    res = run_hpq("rehearse", "run", "--help")
    assert res.returncode == 0 and "--node-env" in res.stdout and "--keep" in res.stdout


def test_result_json_is_serializable():
    json.dumps(make_plan().to_dict())


# ---------------------------------------------------------------------------- the sweep and --throttle


def test_throttle_index_counts_workers_in_the_order_of_the_nodes_list():
    """INDEX 2 is the third worker of the result's `nodes` list (worker-3), also with a login node before it."""
    from hpq.cli.commands.rehearse import node_names
    from hpq.rehearsal import throttle

    assert throttle.parse(("2=30mbit", "0=1gbit"), 5) == {2: "30mbit", 0: "1gbit"}
    p = make_plan(workers=4, login=True)
    assert [n.name for n in p.nodes] == node_names("slurm-gpu", 4, True) == [
        "controller", "login-1", "worker-1", "worker-2", "worker-3", "worker-4"]
    assert p.worker_nodes[2].name == "worker-3" and p.worker_nodes[2].hostname == "ip-10-201-7-23"
    assert throttle.rate_bits("30mbit") == 30e6 and throttle.rate_bits("30Mbit") == 30e6  # tc's own print form
    assert throttle.rate_bits("1.5gbit") == 1.5e9 and throttle.rate_bits("4mibit") == 4 * 1024 ** 2
    assert throttle.rate_bits("2mbps") == 16e6  # tc: mbps is megabytes per second


def sweep_doc(scores: dict[str, float], slow: list[str], pairs: list[tuple[str, str, str]] | None = None) -> dict:
    from hpq.scripts import sweep

    med = sweep.median(scores.values())
    return {"scores": scores, "slow_nodes": slow, "median_gbps": med, "threshold_gbps": med / 2,
            "unmeasured_nodes": [], "message": "sweep says", "exit_code": 1 if slow else 0,
            "pairs": [{"nodes": [a, b], "status": st} for a, b, st in pairs or []]}


NAMES = {f"ip-10-0-0-2{i}": f"worker-{i}" for i in range(1, 5)}
W = sorted(NAMES)


def test_sweep_check_passes_when_exactly_the_throttled_node_is_named():
    from hpq.rehearsal import throttle

    scores = {W[0]: 0.41, W[1]: 0.41, W[2]: 0.0036, W[3]: 0.49}
    c = throttle.judge(sweep_doc(scores, [W[2]], [(W[1], W[2], "timeout")]), 1, {W[2]: "30mbit"}, NAMES)
    assert c.ok and "worker-3 (ip-10-0-0-23) at 0.0036 GB/s (throttled to 30mbit)" in c.message
    calm = throttle.judge(sweep_doc({w: 0.4 for w in W}, []), 0, {}, NAMES)
    assert calm.ok and "named no slow node and none was throttled" in calm.message


def test_sweep_check_fails_a_miss_a_false_alarm_and_unexplained_failures():
    from hpq.rehearsal import throttle

    even = {w: 0.4 for w in W}
    miss = throttle.judge(sweep_doc(even, []), 0, {W[2]: "30mbit"}, NAMES)
    assert not miss.ok and miss.node == "worker-3" and "missed the throttled node(s): worker-3" in miss.message
    fast = throttle.judge(sweep_doc(even, []), 0, {W[2]: "40gbit"}, NAMES)
    assert not fast.ok and "slowed nothing the sweep could see" in fast.message
    alarm = throttle.judge(sweep_doc({**even, W[1]: 0.1}, [W[1]]), 1, {}, NAMES)
    assert not alarm.ok and alarm.node == "worker-2" and "though nothing was throttled" in alarm.message
    other = throttle.judge(sweep_doc({**even, W[2]: 0.004, W[1]: 0.1}, [W[2], W[1]]), 1, {W[2]: "30mbit"}, NAMES)
    assert not other.ok and "worker-2 (ip-10-0-0-22) at 0.10 GB/s though it was not throttled" in other.message
    broken = throttle.judge(sweep_doc(even, [], [(W[0], W[1], "failed")]), 1, {}, NAMES)
    assert not broken.ok and "1 pair(s) of unthrottled nodes failed" in broken.message
    assert not throttle.judge(None, 255, {}, NAMES).ok
    assert "exited 124" in throttle.judge(sweep_doc(even, []), 124, {}, NAMES).message


def test_validation_commands_as_the_rehearsal_runs_them():
    from hpq.rehearsal import validate
    from hpq.rehearsal.run import DEFAULT_SWEEP_ARGS

    assert validate.nccl_command(2, "ml.g5.xlarge", "-e 16M") == "run-nccl-test 2 -e 16M --expect none"
    assert validate.nccl_command(2, "ml.g5.48xlarge", "") == "run-nccl-test 2 1 --expect none"  # 8 GPUs, no GPU here
    assert validate.sweep_command(4, "ml.g5.xlarge", DEFAULT_SWEEP_ARGS, 840) == (
        "run-nccl-test --sweep 4 --budget 840 " + DEFAULT_SWEEP_ARGS + " --output json")  # as `hpq test sweep` spells it
    from hpq.scripts import run_nccl_test

    args = run_nccl_test.parse_args(validate.sweep_command(4, "ml.g5.xlarge", DEFAULT_SWEEP_ARGS, 840).split()[1:])
    assert args.sweep and args.pairs_at_once == 1 and args.iters == 20 and args.output == "json"


# ---------------------------------------------------------------------------- what the nodes keep of the host's /tmp


def test_an_aws_cli_from_another_environment_under_tmp_stays_visible(monkeypatch):
    """The fsx step's aws CLI fallback may come from PATH, from a virtualenv under /tmp other than the one
    running hpq (a fresh-machine run: `python3 -m venv /tmp/v`, then a nested venv). Its top directory must
    be kept, or the node's private /tmp hides it: `exec: /tmp/v/bin/aws: not found`, seen in a fresh run."""
    import tempfile
    from pathlib import Path

    from hpq.rehearsal import node

    with tempfile.TemporaryDirectory(prefix="hpq-other-venv-", dir="/tmp") as other:
        aws = Path(other) / "bin" / "aws"
        aws.parent.mkdir()
        aws.write_text("#!/bin/sh\n")
        aws.chmod(0o755)
        monkeypatch.setattr(sys, "executable", "/nonexistent/bin/python3")  # no aws next to the interpreter
        monkeypatch.setenv("PATH", f"{aws.parent}:/usr/bin:/bin")
        assert node.host_aws_cli() == str(aws)
        assert other in node.host_tmp_dirs()
    assert node.host_tmp_dirs(["/tmp/a/b/c", "/usr/lib/x", "/tmp/a", "/tmpx/y"]) == ["/tmp/a"]


# ---------------------------------------------------------------------------- the rehearsal as a validation backend


class CannedShell:
    """The controller's login shell answering every command with one log (the SSH hop is not what is tested)."""

    def __init__(self, log: str, code: int = 0):
        self.log, self.code, self.commands = log, code, []

    def run(self, command, echo=None, timeout=None, on_stderr_line=None):
        self.commands.append(command)
        return self.code, self.log, ""


def bridge_log() -> str:
    """A clean 2-node run at a bridge's speed: far below any instance type's figure."""
    from tests import nccl_logs

    return nccl_logs.allreduce_log(["ip-10-201-7-21", "ip-10-201-7-22"], 1, 0.05, max_bytes=16 * nccl_logs.MIB,
                                   peak_bytes=16 * nccl_logs.MIB)


def test_rehearsal_backend_reports_the_bridge_bandwidth_unless_a_figure_is_asked():
    """`hpq test nccl` on a rehearsal runs and judges as the rehearsal does (--expect none: a veth bridge says
    nothing about the type's network). Broken twin: the same log through the plain Slurm backend is held to
    the catalog and does not pass; and a figure the user names is held to, not replaced."""
    from hpq.rehearsal import backend
    from hpq.scripts import outcome
    from hpq.validation.backend import ClusterFacts, run_test
    from hpq.validation.request import NCCL, TestRequest
    from hpq.validation.slurm import SlurmBackend

    facts = ClusterFacts("hpq-rehearse-a1b2c3", "slurm", "ml.g5.xlarge")
    shell = CannedShell(bridge_log())
    result = run_test(backend.RehearsalBackend(shell, facts), TestRequest(NCCL), lambda line: None)
    assert shell.commands[0].endswith("run-nccl-test 2 --expect none")
    assert result.outcome == outcome.PASS and result.backend == "rehearsal" and result.cluster == "hpq-rehearse-a1b2c3"
    assert result.data["verdict"]["checks"]["bandwidth"]["outcome"] == outcome.NOT_JUDGED
    plain = run_test(SlurmBackend(CannedShell(bridge_log()), facts, stand_in_network=True), TestRequest(NCCL),
                     lambda line: None)
    assert plain.outcome != outcome.PASS
    shell = CannedShell(bridge_log())
    asked = run_test(backend.RehearsalBackend(shell, facts), TestRequest(NCCL, expect="3"), lambda line: None)
    assert shell.commands[0].endswith("--expect 3") and asked.outcome == outcome.FAIL


def kept_state(tmp_path, run_id: str = "a1b2c3", variant: str = "slurm-gpu", alive: bool = True) -> state.RunState:
    """A kept rehearsal's record whose controller is held by a live process of ours (or by a pid long gone)."""
    from hpq.rehearsal import procs

    workdir = tmp_path / f"hpq-rehearse-{run_id}-x"
    (workdir / "ssh").mkdir(parents=True)
    key = workdir / "ssh" / "id_ed25519"
    key.write_text("not a key: never used to connect here\n")
    proc = subprocess.Popen(["sleep", "60"])
    me = procs.identify(proc.pid)
    if not alive:
        proc.kill()
        proc.wait()
    st = state.RunState(run_id, variant, 1, time.time(), str(workdir), f"/var/log/hpq-rehearse/{run_id}",
                            keep=True, finished=True, ssh_key=str(key), cluster_name=f"hpq-rehearse-{run_id}",
                            worker_type="ml.g5.xlarge")
    st.nodes.append(state.NodeState("controller", f"hpq-{run_id}-controller", f"hpq{run_id}n0", proc.pid,
                                        "10.201.7.10", "ip-10-201-7-10", "controller", me.start if me else None))
    st.save()
    st._proc = proc  # type: ignore[attr-defined]
    return st


def test_find_names_a_kept_rehearsal_by_its_cluster_and_nothing_else(tmp_path, monkeypatch):
    from hpq.rehearsal import backend

    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "state")
    st = kept_state(tmp_path)
    try:
        found = backend.find("hpq-rehearse-a1b2c3")
        assert isinstance(found, backend.RehearsalBackend) and found.name == "rehearsal" and found.stand_in_network
        assert found.resolve() == backend.ClusterFacts("hpq-rehearse-a1b2c3", "slurm", "ml.g5.xlarge")
        target = found.controller.target
        assert (target.host, target.user, target.key_filename, target.proxy_command) == (
            "10.201.7.10", "ubuntu", st.ssh_key, None)
        assert target.known_hosts == str(tmp_path / "hpq-rehearse-a1b2c3-x" / "ssh" / "known_hosts")
        assert backend.find("hpq-rehearse-d4e5f6") is None  # no record of it here: a real cluster of that name
        assert backend.find("my-cluster") is None
    finally:
        st._proc.kill()  # type: ignore[attr-defined]
        st._proc.wait()  # type: ignore[attr-defined]


@pytest.mark.parametrize("variant, alive, said", [
    ("slurm-gpu", False, "rehearsal a1b2c3 is not running (its controller is gone)"),
    ("eks-gpu", True, "rehearsal a1b2c3 (eks-gpu) has no Slurm controller"),
])
def test_find_refuses_a_rehearsal_that_cannot_run_tests_in_one_line(tmp_path, monkeypatch, variant, alive, said):
    """Broken twins of the one above: the controller's holder is gone, or the rehearsal is of an EKS variant.
    Through the command: exit 2 and one line, never a lookup in AWS for a cluster that only existed here."""
    from hpq.rehearsal import backend

    monkeypatch.setattr(state, "STATE_DIR", tmp_path / "state")
    st = kept_state(tmp_path, variant=variant, alive=alive)
    try:
        with pytest.raises(UsageError, match=re.escape(said)):
            backend.find("hpq-rehearse-a1b2c3")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env["HPQ_REHEARSE_STATE_DIR"] = str(tmp_path / "state")
        res = subprocess.run([sys.executable, "-m", "hpq", "test", "nccl", "hpq-rehearse-a1b2c3"], env=env,
                             capture_output=True, text=True, timeout=60)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"hpq: error: {said}"), res.stderr
    finally:
        st._proc.kill()  # type: ignore[attr-defined]
        st._proc.wait()  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- the stand-ins stay off the nodes


# A service manager that starts the units' processes itself instead of asking systemd (the DirectManager that
# lifecycle/services.py once held), or a systemctl command: what only a node without systemd needs.
SERVICE_MANAGER_STANDIN = re.compile(rb"^\s*class \w*Direct\w*\b|\bhpq\.standins\b", re.M)


def stand_ins_in(files: dict[str, str]) -> list[str]:
    """The bundle entries that are stand-ins or need them: a module of hpq.standins (by place or by content),
    a file that imports or runs the stand-ins, the rehearsal or the tests, a ``systemctl`` of our own (the
    stand-in's shim), or a service manager that starts daemons itself."""
    from pathlib import Path

    import hpq.standins

    ours = {p.read_bytes() for p in Path(hpq.standins.__file__).parent.glob("*.py") if p.name != "__init__.py"}
    found = []
    for key, src in files.items():
        data = Path(src).read_bytes()
        if key.startswith(("hpq/standins/", "hpq/rehearsal/", "hpq/tests/")) or data in ours or re.search(
                rb"^\s*(from|import) hpq\.(standins|rehearsal|tests)\b", data, re.M) or \
                key.rsplit("/", 1)[-1] == "systemctl" or SERVICE_MANAGER_STANDIN.search(data):
            found.append(key)
    return found


def test_no_stand_in_ships_in_the_node_bundle(tmp_path):
    """What deploy uploads for the nodes (lifecycle/bundle.node_bundle_files, the list every test that boots a
    node uses too): the entry, hpq's two ground-floor files, lifecycle/ and scripts/, and no stand-in (IMDS,
    moto, FSx, HyperPod, systemctl: hpq.standins), and no service manager but the real one (systemctl).
    Broken twins: the same list with the IMDS stand-in copied into lifecycle/ (as rehearsal/imds.py once sat next to
    the lifecycle's IMDS client), with a module importing the stand-ins, with the systemctl stand-in copied into
    lifecycle/, with its shim in scripts/bin, and with a DirectManager (a manager that starts the units' processes
    itself, as lifecycle/services.py once held) in lifecycle/services.py are each caught."""
    from hpq.lifecycle import bundle, names
    from hpq.standins import imds as imds_mod

    files = bundle.node_bundle_files()
    assert files and all(k == names.ON_CREATE_ENTRY or k in ("hpq/__init__.py", "hpq/errors.py", "hpq/vocab.py")
                         or k.startswith(("hpq/lifecycle/", "hpq/scripts/")) for k in files), sorted(files)
    assert stand_ins_in(files) == []
    twin = dict(files, **{"hpq/lifecycle/imds_server.py": imds_mod.__file__})
    assert stand_ins_in(twin) == ["hpq/lifecycle/imds_server.py"]
    importer = tmp_path / "probe.py"
    importer.write_text("import os\nfrom hpq.standins import moto\n")
    assert stand_ins_in(dict(files, **{"hpq/scripts/probe.py": str(importer)})) == ["hpq/scripts/probe.py"]
    from hpq.standins import systemctl

    twin = dict(files, **{"hpq/lifecycle/systemctl.py": systemctl.__file__})
    assert stand_ins_in(twin) == ["hpq/lifecycle/systemctl.py"]
    shim = tmp_path / "shim"
    shim.write_text(systemctl.shim_text("/", "/usr/bin/python3"))
    assert stand_ins_in(dict(files, **{"hpq/scripts/bin/systemctl": str(shim)})) == ["hpq/scripts/bin/systemctl"]
    renamed = tmp_path / "svc"  # the same shim under another name: it runs hpq.standins
    renamed.write_text(systemctl.shim_text("/", "/usr/bin/python3"))
    assert stand_ins_in(dict(files, **{"hpq/scripts/bin/svc": str(renamed)})) == ["hpq/scripts/bin/svc"]
    direct = tmp_path / "services.py"
    direct.write_text(open(files["hpq/lifecycle/services.py"]).read()
                      + "\n\nclass DirectManager(UnitFiles):\n    \"\"\"Start the unit's ExecStart itself.\"\"\"\n")
    assert stand_ins_in(dict(files, **{"hpq/lifecycle/services.py": str(direct)})) == ["hpq/lifecycle/services.py"]
