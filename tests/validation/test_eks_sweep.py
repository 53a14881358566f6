"""`hpq test sweep` on an EKS cluster: the Slurm sweep's pairs and rounds as MPIJobs pinned to their two nodes,
each pair's log read by the node program's pair judge, the report built and judged by the Slurm sweep's code.

The Kubernetes API is the HTTPS stand-in tests/kube_standins.FakeKube: it plays each MPIJob out with the launcher
log given for the pair of hostnames its workers are pinned to (``pair_logs``), ends it as ``pair_final`` says,
and leaves a worker pinned to a hostname no node carries unscheduled, as the scheduler does. Each pair's log is
a real nccl-tests 2.19.6 ``all_reduce_perf`` output (tests/data/nccl/h200x2_nccl-tests_all_reduce_perf.txt,
unmodified for a healthy pair); a slow pair is the same output with its bandwidth columns divided and its
times multiplied by the same factor (what a slower link gives: busbw = bytes / time x 2(n-1)/n). The type is
ml.g5.16xlarge, which has no EFA in the catalog, so the sweep does not ask the logs for EFA.
"""

from __future__ import annotations

import json
import re
from itertools import combinations
from pathlib import Path

import pytest

from hpq.errors import UsageError
from hpq.manifests.render import RenderRequest, render_objects
from hpq.scripts import outcome, sweep
from hpq.validation.backend import ClusterFacts, run_test
from hpq.validation.eks import EksBackend, EksOptions
from hpq.validation.request import SWEEP, TestRequest
from tests.kube_standins import create_eks_cluster, kube_client
from tests.validation.test_validation_eks import REGION, api_to, described, run_cli, stub_describe

LOG = (Path(__file__).resolve().parents[1] / "data" / "nccl" / "h200x2_nccl-tests_all_reduce_perf.txt").read_text()
G5 = "ml.g5.16xlarge"
NODES = ["node-0", "node-1", "node-2", "node-3"]
ROW = re.compile(r"^(\s*\d+\s+\d+\s+\w+\s+\w+\s+-?\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s*$")


def slowed(text: str, factor: float) -> list[str]:
    """The log as a link ``factor`` times as fast would print it: times / factor, algbw and busbw x factor."""
    out = []
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            head, t1, a1, b1, w1, t2, a2, b2, w2 = m.groups()
            line = (f"{head} {float(t1) / factor:8.2f} {float(a1) * factor:7.2f} {float(b1) * factor:7.2f} {w1:>7} "
                    f"{float(t2) / factor:8.2f} {float(a2) * factor:7.2f} {float(b2) * factor:7.2f} {w2:>7}")
        out.append(line)
    return out


def pair_key(a: str, b: str) -> tuple[str, str]:
    return tuple(sorted((a, b)))  # type: ignore[return-value]


def cluster(kube, slow: str | None = None, factors: dict | None = None, **scenario):
    """4 g5 nodes; every pair's log the real one (small spread), a pair with ``slow`` at a quarter of it."""
    kube.add_nodes(G5, 4)
    spread = [1.0, 0.97, 1.03, 0.99, 1.01, 0.98]
    logs = {}
    for i, (a, b) in enumerate(combinations(NODES, 2)):
        f = (factors or {}).get((a, b)) or (0.25 if slow in (a, b) else spread[i])
        logs[pair_key(a, b)] = slowed(LOG, f)
    kube.scenario.update(pair_logs=logs, **scenario)
    return kube


def sweep_on(kube, request: TestRequest | None = None, options: EksOptions | None = None):
    backend = EksBackend("c", options or EksOptions(), lambda: kube_client(kube), ClusterFacts("c", "eks", G5),
                         poll_s=0.01)
    lines: list[str] = []
    return run_test(backend, request or TestRequest(SWEEP), lines.append), lines


def pinned(kube) -> list[tuple[str, ...]]:
    return [kube.pinned_hosts(o) for o in kube.created if o["kind"] == "MPIJob"]


def test_a_healthy_sweep_passes_every_pair_once_pinned_to_its_nodes(fake_kube):
    """4 nodes: the round-robin's 3 rounds of 2 pairs, each an MPIJob whose workers are pinned to exactly its
    two nodes, at the sweep's one message size; PASS with every node scored, and nothing left behind."""
    result, lines = sweep_on(cluster(fake_kube))
    assert (result.outcome, result.exit_code, result.backend) == (outcome.PASS, 0, "eks"), result.message
    assert sorted(pinned(fake_kube)) == sorted(combinations(NODES, 2))
    expected = [p for r in sweep.schedule(NODES) for p in r]
    assert pinned(fake_kube) == expected  # the Slurm sweep's order, round by round
    assert result.data["rounds"] == 3 and result.data["slow_nodes"] == []
    assert all(p["status"] == sweep.OK for p in result.data["pairs"])
    assert result.data["launcher"] == "eks" and result.data["size_bytes"] == sweep.SIZE_TCP
    cmd = fake_kube.created[0]["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("-b") + 1] == cmd[cmd.index("-e") + 1] == str(sweep.SIZE_TCP)
    assert fake_kube.objects == {}
    assert "# round 1/3: node-0 + node-3, node-1 + node-2" in lines


def test_one_slow_node_is_named_fail_with_the_slurm_sweeps_words(fake_kube):
    """node-2's three pairs at a quarter of the others: FAIL naming node-2 alone, the headline the Slurm sweep's
    build_report/format_report give, and the action on EKS is a cordon, not scontrol."""
    result, _ = sweep_on(cluster(fake_kube, slow="node-2"))
    assert (result.outcome, result.exit_code) == (outcome.FAIL, outcome.EXIT_FAIL)
    assert result.data["slow_nodes"] == ["node-2"]
    assert "1 slow node(s): node-2" in result.message and "SLOW node-2" in result.message
    assert result.data["actions"] == {"node-2": ["kubectl cordon node-2"]}
    assert "scontrol" not in result.message


def test_a_slow_link_between_two_healthy_nodes_names_nobody(fake_kube):
    """The broken twin of the slow node: one pair slow, both its nodes fast with their other partners (the
    high median): nobody is named, as on Slurm."""
    result, _ = sweep_on(cluster(fake_kube, factors={("node-0", "node-1"): 0.25}))
    assert result.outcome == outcome.PASS and result.data["slow_nodes"] == []


def test_a_pair_whose_job_failed_is_a_failed_pair(fake_kube):
    """A job that ended Failed counts as a failed pair (0 GB/s), as a pair whose mpirun exited non-zero on Slurm,
    even with a full table in its log."""
    result, _ = sweep_on(cluster(fake_kube, pair_final={("node-0", "node-1"): "Failed"}))
    assert (result.outcome, result.exit_code) == (outcome.FAIL, outcome.EXIT_FAIL)
    failed = [p for p in result.data["pairs"] if p["status"] == sweep.FAILED]
    assert [p["nodes"] for p in failed] == [["node-0", "node-1"]] and "job Failed" in failed[0]["note"]
    assert "1 of 6 pair(s) failed" in result.message


def test_a_pair_without_a_log_is_inconclusive_never_pass(fake_kube):
    """A job that succeeded but left no launcher log is no evidence: INCONCLUSIVE, not PASS, not FAIL."""
    kube = cluster(fake_kube)
    kube.scenario["pair_logs"][("node-0", "node-1")] = []
    result, _ = sweep_on(kube)
    assert (result.outcome, result.exit_code) == (outcome.INCONCLUSIVE, outcome.EXIT_INCONCLUSIVE), result.message
    assert [p["status"] for p in result.data["pairs"]].count(sweep.NO_LOG) == 1
    assert "left no log" in result.message


def test_the_timeout_bounds_the_sweep(fake_kube, monkeypatch):
    """With --timeout spent after the first pair, the rest are not run: INCONCLUSIVE (nodes unmeasured), the
    note names --timeout, and no job outlives the sweep."""
    from hpq.validation import eks_sweep

    ticks = iter(range(0, 10_000, 40))
    monkeypatch.setattr(eks_sweep, "_now", lambda: float(next(ticks)))
    result, _ = sweep_on(cluster(fake_kube), TestRequest(SWEEP, timeout_s=60))
    assert result.outcome == outcome.INCONCLUSIVE, result.message
    statuses = [p["status"] for p in result.data["pairs"]]
    assert statuses.count(sweep.SKIPPED) >= 4 and "--timeout" in " ".join(result.data["notes"])
    assert fake_kube.objects == {}


def test_pins_use_the_nodes_hostname_label(fake_kube):
    """The pin is on kubernetes.io/hostname's value, which need not be the node's name (HyperPod names nodes
    hyperpod-i-...): the jobs are placed and the report names the nodes. Broken twin: a pin on a hostname no node
    carries leaves the workers unscheduled (the stand-in's scheduler), and the sweep does not pass."""
    kube = cluster(fake_kube)
    for n in kube.nodes:
        n["metadata"]["name"] = "hyperpod-i-0" + n["metadata"]["name"][-1]  # label keeps node-N
    result, _ = sweep_on(kube)
    assert result.outcome == outcome.PASS, result.message
    assert result.data["hosts"] == [f"hyperpod-i-0{i}" for i in range(4)]
    assert sorted(pinned(kube)) == sorted(combinations(NODES, 2))


def test_a_pin_no_node_matches_is_never_placed():
    """The stand-in's scheduler refuses what the real one does: workers pinned to an unknown hostname."""
    from tests.kube_standins import FakeKube

    kube = FakeKube()
    kube.add_nodes(G5, 2)
    job = render_objects(RenderRequest("nccl-test", G5, 2, hosts=("node-0", "nowhere"), name="hpq-sweep-1-0"))[0]
    kube.objects[("mpijobs", "default", "hpq-sweep-1-0")] = job
    kube._spawn_pods("mpijobs", job)
    kube.tick()
    worker = kube.pods["hpq-sweep-1-0-worker-0"]["status"]
    assert worker["phase"] == "Pending" and "node affinity" in worker["conditions"][0]["message"]


@pytest.mark.parametrize("hosts, nodes", [(("a",), 2), (("a", "a"), 2), (("a", "b c"), 2)])
def test_render_refuses_pins_that_cannot_place_the_workers(hosts, nodes):
    with pytest.raises(UsageError, match="hosts"):
        render_objects(RenderRequest("nccl-test", G5, nodes, hosts=hosts))


def test_too_few_nodes_and_trainium_are_refused_before_any_job(fake_kube):
    fake_kube.add_nodes(G5, 2)
    with pytest.raises(UsageError, match="needs 3 Ready"):
        sweep_on(fake_kube, TestRequest(SWEEP, 3))
    fake_kube.nodes.clear()
    fake_kube.add_nodes("ml.trn1.32xlarge", 4)
    backend = EksBackend("c", EksOptions(), lambda: kube_client(fake_kube), poll_s=0.01)
    with pytest.raises(UsageError, match="GPU"):
        run_test(backend, TestRequest(SWEEP), lambda line: None)
    assert fake_kube.created == []


def test_hpq_test_sweep_on_an_eks_described_cluster(moto_aws, fake_kube, monkeypatch, capsys):
    """`hpq test sweep my-hp`: DescribeCluster names an EKS cluster, the sweep runs as MPIJobs there; PASS exit 0
    on a healthy cluster, and its broken twin (node-1 slow) FAIL exit 1 naming node-1."""
    eks = create_eks_cluster("hp-eks-for-sweep")
    answer = described("my-hp", {"Eks": {"ClusterArn": eks["arn"]}})
    stub_describe(monkeypatch, answer)
    api_to(monkeypatch, cluster(fake_kube))
    monkeypatch.setattr(EksBackend, "__init__", _fast(EksBackend.__init__))
    code, out, err = run_cli(capsys, "test", "sweep", "my-hp", "--region", REGION, "--output", "json")
    doc = json.loads(out)
    assert code == 0, err
    assert (doc["backend"], doc["outcome"], doc["slow_nodes"]) == ("eks", "PASS", [])
    fake_kube.scenario["pair_logs"] = {k: slowed(LOG, 0.2 if "node-1" in k else 1.0) for k in
                                       fake_kube.scenario["pair_logs"]}
    stub_describe(monkeypatch, answer)
    code, out, err = run_cli(capsys, "test", "sweep", "my-hp", "--region", REGION)
    assert code == 1 and "1 slow node(s): node-1" in out + err
    # the summary the CLI prints after its progress lines opens with the verdict, before the node table
    verdicts = [i for i, line in enumerate(out.splitlines()) if line.split(": ", 1)[0] in ("PASS", "FAIL")]
    assert verdicts and out.splitlines()[verdicts[0]].startswith("FAIL: 1 slow node(s): node-1")
    assert out.splitlines()[verdicts[0] + 1].startswith("# sweep: ")


def _fast(init):
    """The backend's poll interval shortened for the stand-in (the CLI builds it with the real 5 s)."""
    def wrapped(self, *a, **k):
        init(self, *a, **k)
        self.poll_s = 0.01
    return wrapped


def test_a_pinned_pair_job_validates_against_the_chart_crd():
    """The pair's MPIJob with its hostname pin is what the chart's MPIJob CRD and the operator accept
    (tests/crd_schema.py, strict); the pin is a required node affinity term with the health label."""
    from tests.crd_schema import controller_errors, crd_errors

    job = render_objects(RenderRequest("nccl-test", "ml.p5.48xlarge", 2, hosts=("a", "b"), message_bytes=1 << 28,
                                       name="hpq-sweep-1-0"))[0]
    assert crd_errors(job) == [] and controller_errors(job) == []
    terms = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [e["key"] for e in terms[0]["matchExpressions"]] == ["sagemaker.amazonaws.com/node-health-status",
                                                                "kubernetes.io/hostname"]
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert "kubernetes.io/hostname" not in json.dumps(launcher)  # the launcher runs anywhere healthy


@pytest.mark.parametrize("slow", [None, "node-2"])
def test_the_same_pair_logs_reach_the_same_verdict_on_slurm_and_eks(fake_kube, tmp_path, slow):
    """The Slurm side: run-nccl-test --sweep judges each pair's log file (nccl_sweep.judge_pair), builds the
    report (sweep.build_report) and prints its JSON, which the Slurm backend brings back over SSH (the controller's
    shell answered by LogShell, as in test_validation_eks). The same pair logs on EKS: the same outcome, exit
    code, node scores, slow nodes and verdict line."""
    from hpq.scripts import nccl_sweep
    from hpq.validation.slurm import SlurmBackend
    from tests.validation.test_validation_eks import LogShell

    kube = cluster(fake_kube, slow=slow)
    eks, _ = sweep_on(kube)
    results = []
    for rno, pairs in enumerate(sweep.schedule(NODES), 1):
        for pair in pairs:
            path = tmp_path / f"{rno}-{pair[0]}-{pair[1]}.log"
            path.write_text("\n".join(kube.scenario["pair_logs"][pair_key(*pair)]) + "\n")
            results.append(nccl_sweep.judge_pair(sweep.PairResult(rno, pair, sweep.OK, exit_status=0), str(path)))
    doc = sweep.build_report(NODES, results, 3, sweep.SIZE_TCP)
    slurm = run_test(SlurmBackend(LogShell(json.dumps(doc), int(doc["exit_code"])), ClusterFacts("c", "slurm", G5)),
                     TestRequest(SWEEP), lambda line: None)
    assert (eks.outcome, eks.exit_code) == (slurm.outcome, slurm.exit_code)
    assert eks.data["scores"] == slurm.data["scores"] and eks.data["slow_nodes"] == slurm.data["slow_nodes"]
    assert eks.message.splitlines()[0] == slurm.message.splitlines()[0]
    assert eks.data["slow_nodes"] == ([slow] if slow else [])


def test_keep_leaves_every_pair_job_and_says_so(fake_kube):
    """--keep: the six pair jobs stay for kubectl (the broken twin of the cleanup the other tests check)."""
    result, lines = sweep_on(cluster(fake_kube), options=EksOptions(keep=True))
    assert result.outcome == outcome.PASS
    assert sorted(name for plural, _ns, name in fake_kube.objects if plural == "mpijobs") == sorted(
        f"hpq-sweep-{r}-{i}" for r in (1, 2, 3) for i in (0, 1))
    assert any(line.startswith("--keep: leaving MPIJob(s) hpq-sweep-1-0") for line in lines)
