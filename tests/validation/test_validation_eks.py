"""`hpq test` on an EKS-orchestrated HyperPod cluster: the EKS backend is chosen from what DescribeCluster says,
judges the same log the way the Slurm backend does, and each orchestrator refuses the other's options.

DescribeCluster's answer for an EKS-orchestrated cluster carries ``Orchestrator.Eks.ClusterArn``, the ARN of the
EKS cluster (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeCluster.html,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ClusterOrchestrator.html,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ClusterOrchestratorEksConfig.html). moto does not
return the Orchestrator block, so SageMaker's DescribeCluster is answered through botocore's Stubber, which
checks each answer against botocore's own SageMaker model (a wrong shape is refused, as AWS would never send
it); EKS and STS are moto over HTTP; the Kubernetes API is the local HTTPS stand-in of tests/kube_standins.FakeKube.
A Slurm cluster without an Orchestrator block (configured through provisioning_parameters.json) is moto's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from hpq.aws import hyperpod
from hpq.cli.main import main
from hpq.errors import UsageError
from hpq.kube.kube import eks_name_from_arn
from hpq.lifecycle import names
from hpq.scripts import outcome
from hpq.validation import eks as eks_backend
from hpq.validation import pick
from hpq.validation.backend import ClusterFacts, run_test
from hpq.validation.request import NANOGPT, NCCL, NCCOM, SWEEP, VALIDATE, TestRequest
from hpq.validation.slurm import SlurmBackend
from tests.kube_standins import (
    create_eks_cluster,
    kube_client,
    nccl_tests_output,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "nccl"
REGION = "us-west-2"
HP_ARN = "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdef123456"
G5 = "ml.g5.16xlarge"


def described(name: str, orchestrator: dict[str, Any] | None, itype: str = G5) -> dict[str, Any]:
    """A DescribeCluster answer in the API reference's shape (response syntax of API_DescribeCluster)."""
    answer: dict[str, Any] = {
        "ClusterArn": HP_ARN, "ClusterName": name, "ClusterStatus": "InService",
        "InstanceGroups": [{"InstanceGroupName": "workers", "InstanceType": itype, "CurrentCount": 2,
                            "TargetCount": 2, "ThreadsPerCore": 1,
                            "ExecutionRole": "arn:aws:iam::123456789012:role/hpq-exec",
                            "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-hpq/lifecycle",
                                                "OnCreate": "on_create.sh"}}]}
    if orchestrator is not None:
        answer["Orchestrator"] = orchestrator
    return answer


def stub_describe(monkeypatch: pytest.MonkeyPatch, answer: dict[str, Any]) -> list[Stubber]:
    """pick's SageMaker client answers DescribeCluster with ``answer`` (validated against botocore's model)."""
    real = pick.client
    stubs: list[Stubber] = []

    def client(session: Any, service: str, region: str | None = None) -> Any:
        c = real(session, service, region)
        if service == "sagemaker":
            stub = Stubber(c)
            stub.add_response("describe_cluster", answer, {"ClusterName": answer["ClusterName"]})
            stub.activate()
            stubs.append(stub)
        return c

    monkeypatch.setattr(pick, "client", client)
    return stubs


def api_to(monkeypatch: pytest.MonkeyPatch, kube: Any) -> list[Any]:
    """The EKS backend's API client goes to the local stand-in; the access it was built from (endpoint, CA and
    token from eks:DescribeCluster and STS in moto) is kept for the test to check."""
    seen: list[Any] = []

    def client(access: Any, token_refresh: Any = None) -> Any:
        seen.append(access)
        return kube_client(kube)

    monkeypatch.setattr(eks_backend, "KubeClient", client)
    return seen


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


# ---------------------------------------------------------------------------------------------- the shape


@pytest.mark.parametrize("orchestrator, kind, eks_arn", [
    ({"Eks": {"ClusterArn": "arn:aws:eks:us-west-2:123456789012:cluster/hp-eks"}}, "eks",
     "arn:aws:eks:us-west-2:123456789012:cluster/hp-eks"),
    ({"Slurm": {"SlurmConfigStrategy": "Managed"}}, "slurm", None),  # the API-driven Slurm configuration
    (None, "slurm", None),  # Slurm configured through provisioning_parameters.json: no Orchestrator block
])
def test_describe_cluster_says_which_orchestrator_and_which_eks_cluster(orchestrator, kind, eks_arn):
    sm = boto3.client("sagemaker", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    with Stubber(sm) as stub:
        stub.add_response("describe_cluster", described("c", orchestrator), {"ClusterName": "c"})
        cl = hyperpod.describe_cluster(sm, "c")
    assert (cl.orchestrator, cl.eks_cluster_arn) == (kind, eks_arn)


def test_the_stub_refuses_an_orchestrator_aws_would_not_send():
    """The stand-in is checked against botocore's SageMaker model: Orchestrator.Eks without its required
    ClusterArn is refused, so the answers above are ones AWS can give."""
    sm = boto3.client("sagemaker", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    with pytest.raises(Exception, match="ClusterArn"):
        Stubber(sm).add_response("describe_cluster", described("c", {"Eks": {}}), {"ClusterName": "c"})


@pytest.mark.parametrize("arn, name", [("arn:aws:eks:us-west-2:123456789012:cluster/hp-eks", "hp-eks"),
                                       ("arn:aws-cn:eks:cn-north-1:123456789012:cluster/a_b-1", "a_b-1")])
def test_the_eks_name_comes_from_the_arn(arn, name):
    assert eks_name_from_arn(arn) == name


@pytest.mark.parametrize("arn", ["hp-eks", "arn:aws:sagemaker:us-west-2:123456789012:cluster/abc",
                                 "arn:aws:eks:us-west-2:123456789012:cluster/"])
def test_a_non_eks_arn_is_refused(arn):
    with pytest.raises(UsageError, match="not an EKS cluster ARN"):
        eks_name_from_arn(arn)


# ---------------------------------------------------------------------------------------------- routing


def test_hpq_test_nccl_on_an_eks_described_cluster_runs_as_kubernetes_jobs(
        moto_aws, fake_kube, monkeypatch, capsys):
    """`hpq test nccl my-hp 2`: DescribeCluster names an EKS cluster; its endpoint and CA come from
    eks:DescribeCluster (moto), the MPIJob is created on the cluster's API and the verdict is PASS."""
    eks = create_eks_cluster("hp-eks-for-test")
    stubs = stub_describe(monkeypatch, described("my-hp", {"Eks": {"ClusterArn": eks["arn"]}}))
    seen = api_to(monkeypatch, fake_kube)
    fake_kube.add_nodes(G5, 2)
    fake_kube.scenario.update(logs={"launcher": nccl_tests_output(3.02)})
    code, out, err = run_cli(capsys, "test", "nccl", "my-hp", "2", "--region", REGION, "--output", "json")
    doc = json.loads(out)
    assert code == 0, err
    assert (doc["backend"], doc["cluster"], doc["outcome"], doc["instance_type"]) == ("eks", "my-hp", "PASS", G5)
    assert [a.name for a in seen] == ["hp-eks-for-test"] and seen[0].server == eks["endpoint"]
    assert [o["kind"] for o in fake_kube.created] == ["MPIJob"] and fake_kube.objects == {}
    for stub in stubs:
        stub.assert_no_pending_responses()


def test_an_eks_test_sends_its_result_to_the_stacks_workspace(moto_aws, fake_kube, monkeypatch, capsys, tmp_path):
    """The same run on a cluster whose hpq stack has observability on (its PrometheusRemoteWriteUrl output, in
    moto's CloudFormation): `hpq test` sends the verdict's series, signed, to that workspace (the SigV4-checking
    stand-in in front of a real Prometheus), says so on stderr, and the JSON verdict and exit code are unchanged.
    Its twin above has no such stack: nothing sent, nothing said."""
    from hpq.aws.session import make_session
    from hpq.standins import amp as amp_standin
    from tests.observability.test_remote_write import query, stack

    prom = amp_standin.PrometheusServer(str(tmp_path)).start()
    creds = make_session(REGION).get_credentials().get_frozen_credentials()
    ws = amp_standin.Workspace(prom.url, {creds.access_key: creds.secret_key}, region=REGION)
    try:
        eks = create_eks_cluster("hp-eks-for-metrics")
        stubs = stub_describe(monkeypatch, described("my-obs", {"Eks": {"ClusterArn": eks["arn"]}}))
        api_to(monkeypatch, fake_kube)
        fake_kube.add_nodes(G5, 2)
        fake_kube.scenario.update(logs={"launcher": nccl_tests_output(3.02)})
        stack("my-obs-stack", "my-obs", ws.url + "/api/v1/remote_write", region=REGION)
        code, out, err = run_cli(capsys, "test", "nccl", "my-obs", "2", "--region", REGION, "--output", "json")
        doc = json.loads(out)
        assert code == 0 and doc["outcome"] == "PASS", err
        assert "hpq: result metrics: " in err and "my-obs-stack's workspace" in err
        rows = query(prom, 'hpq_result_verdict{cluster="my-obs", test="nccl", verdict="PASS"}')
        assert rows and all(float(r["value"][1]) == 1 for r in rows) and ws.accepted and not ws.refused
        # labelled with the Kubernetes nodes the worker pods ran on, not the pods' host names the log prints
        assert sorted(r["metric"]["node"] for r in rows) == ["node-0", "node-1"], rows
        for stub in stubs:
            stub.assert_no_pending_responses()
    finally:
        ws.close()
        prom.stop()


SLURM = "hpq-slurm-for-eks-tests"


def make_slurm_cluster() -> None:
    """A HyperPod cluster in moto: controller + g5 workers, no Orchestrator block (idempotent: shared server)."""
    sm = boto3.client("sagemaker", region_name=REGION)
    if SLURM in [c["ClusterName"] for c in sm.list_clusters()["ClusterSummaries"]]:
        return
    sm.create_cluster(ClusterName=SLURM, InstanceGroups=[
        {"InstanceGroupName": g, "InstanceType": t, "InstanceCount": 1, "ThreadsPerCore": 1,
         "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-hpq-lifecycle/lifecycle", "OnCreate": "on_create.sh"},
         "ExecutionRole": "arn:aws:iam::123456789012:role/hpq-exec"}
        for g, t in ((names.CONTROLLER_GROUP, "ml.m5.xlarge"), (names.WORKER_GROUP, G5))])


def test_hpq_test_on_a_slurm_cluster_does_not_go_to_eks(moto_aws, monkeypatch):
    """A cluster without Orchestrator.Eks (moto's, like a Slurm cluster set up with provisioning_parameters)
    gets the Slurm backend, reached at its controller; no Kubernetes client is ever made."""
    make_slurm_cluster()
    monkeypatch.setattr(eks_backend, "KubeClient", lambda *a, **k: pytest.fail("an EKS client for a Slurm cluster"))
    backend = pick.backend_for(SLURM, pick.Reach(region=REGION))
    assert isinstance(backend, SlurmBackend) and backend.name == "slurm"
    assert backend.resolve() == ClusterFacts(SLURM, "slurm", G5)


@pytest.mark.parametrize("argv, words", [
    (["nccl", "--image", "repo/nccl:1"], "--image does not apply to a Slurm cluster"),
    (["nccl", "--keep", "--namespace", "t"], "--namespace, --keep do not apply to a Slurm cluster"),
    (["nanogpt", "--program-args", "--iters 5"], "--program-args does not apply to a Slurm cluster"),
    (["validate", "--fsx-claim", "hpq-fsx"], "--fsx-claim does not apply to a Slurm cluster"),
])
def test_eks_options_on_a_slurm_cluster_are_one_line_exit_2(capsys, argv, words):
    """Reached with --proxy-command and --host (a Slurm controller by definition, no AWS): refused before
    anything runs."""
    test, *options = argv
    code, out, err = run_cli(capsys, "test", test, "c", "2", "--proxy-command", "ssh -W %h:%p bastion",
                             "--host", "controller", *options)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err, err
    assert err.startswith("hpq: error: ") and "Traceback" not in err


def test_eks_options_on_a_moto_slurm_cluster_are_refused(moto_aws, capsys):
    """The same refusal when DescribeCluster (moto) is what says the cluster runs Slurm."""
    make_slurm_cluster()
    code, _, err = run_cli(capsys, "test", "nccl", SLURM, "2", "--region", REGION,
                           "--mpirun", "/usr/bin/mpirun")
    assert code == 2 and err.count("\n") == 1 and "--mpirun does not apply to a Slurm cluster" in err, err


@pytest.mark.parametrize("argv, words", [
    (["nccl", "my-hp", "2", "--user", "bob"], "--user does not apply to an EKS cluster"),
    (["nanogpt", "my-hp", "2", "--extra", "--iters 5"], "--extra does not apply to an EKS cluster"),
    (["sweep", "my-hp", "3"], "needs 3 Ready ml.g5.16xlarge node(s); the cluster has 2"),
    (["nccom", "my-hp", "2"], "nccom runs nccom-test on Trainium"),
])
def test_what_an_eks_cluster_cannot_do_is_one_line_exit_2(
        moto_aws, fake_kube, monkeypatch, capsys, argv, words):
    eks = create_eks_cluster("hp-eks-for-test")
    stub_describe(monkeypatch, described("my-hp", {"Eks": {"ClusterArn": eks["arn"]}}))
    api_to(monkeypatch, fake_kube)
    fake_kube.add_nodes(G5, 2)
    code, out, err = run_cli(capsys, "test", *argv, "--region", REGION)
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert fake_kube.created == []


# ---------------------------------------------------------------------------------------------- one judge


class LogShell:
    """The controller's shell as the Slurm backend sees it, answering with a captured node program's output
    (the SSH path itself is tested over a real sshd in test_validation_slurm)."""

    def __init__(self, log: str, code: int = 0):
        self.log, self.code = log, code

    def run(self, command: str, echo: Any = None, timeout: float | None = None, on_stderr_line: Any = None):
        if echo:
            echo(self.log.encode())
        return self.code, self.log, ""


LOGS = sorted(p.name for p in DATA.glob("*.txt"))


def _both(kube: Any, log: str, itype: str, job_final: str = "Succeeded") -> tuple[Any, Any]:
    kube.add_nodes(itype, 2)
    kube.scenario.update(final=job_final, logs={"launcher": log.splitlines()})
    request = TestRequest(NCCL, 2)
    api = kube_client(kube)
    eks = run_test(eks_backend.EksBackend("c", eks_backend.EksOptions(), lambda: api, poll_s=0.01), request,
                   lambda line: None)
    slurm = run_test(SlurmBackend(LogShell(log, 0 if job_final == "Succeeded" else 1),
                                  ClusterFacts("c", "slurm", itype)), request, lambda line: None)
    return eks, slurm


@pytest.mark.parametrize("itype", [G5, "ml.p5.48xlarge"])
@pytest.mark.parametrize("name", LOGS)
def test_the_same_log_reaches_the_same_verdict_on_slurm_and_eks(fake_kube, name, itype):
    """Every real log in tests/data/nccl, as the EKS launcher's log and as run-nccl-test's stdout on the
    controller: the same outcome, exit code, headline and figures, whatever the log holds (PASS, FAIL on
    bandwidth or transport, INCONCLUSIVE without a table or a published figure)."""
    log = (DATA / name).read_text()
    eks, slurm = _both(fake_kube, log, itype)
    assert (eks.outcome, eks.exit_code) == (slurm.outcome, slurm.exit_code), (eks.message, slurm.message)
    assert eks.message.splitlines()[0] == slurm.message.splitlines()[0]
    assert eks.data.get("peak_busbw_gbps") == slurm.data.get("peak_busbw_gbps")
    assert eks.backend == "eks" and slurm.backend == "slurm"


@pytest.mark.parametrize("name", ["seed004_slurm_2x_g5.16xlarge_excerpt.txt", "aws_2x_p5_eks_all_reduce_perf.txt"])
def test_a_job_that_failed_is_a_fail_like_a_program_that_exited_1(fake_kube, name):
    """The broken twin: the same logs from a job that ended Failed (EKS) and a node program that exited 1
    (Slurm): FAIL, exit 1 on both, whatever the table says."""
    eks, slurm = _both(fake_kube, (DATA / name).read_text(), G5, job_final="Failed")
    assert (eks.outcome, eks.exit_code) == (slurm.outcome, slurm.exit_code) == (outcome.FAIL, outcome.EXIT_FAIL)
    assert "mpijob/hpq-nccl-test" in eks.message and eks.data["job"]["state"] == "Failed"


# ---------------------------------------------------------------------------------------------- the request


def test_every_test_has_eks_manifests_or_a_clear_refusal():
    backend = eks_backend.EksBackend("c", eks_backend.EksOptions(), lambda: pytest.fail("no API call"))
    for test in (NCCL, NCCOM, NANOGPT, VALIDATE, SWEEP):
        backend.check(TestRequest(test, 2))
        assert backend.render_request(TestRequest(test, 2), G5).test in ("nccl-test", "nanogpt", "validate")


def test_options_for_another_test_are_refused():
    backend = eks_backend.EksBackend("c", eks_backend.EksOptions(mpirun="/usr/bin/mpirun"), lambda: None)
    with pytest.raises(UsageError, match="--mpirun does not apply to nanogpt"):
        backend.check(TestRequest(NANOGPT, 2))
    with pytest.raises(UsageError, match="unknown EKS option"):
        eks_backend.EksOptions.of({"imagee": "x"})
    with pytest.raises(UsageError, match="invalid job name"):
        eks_backend.EksOptions(name="Bad_Name")
