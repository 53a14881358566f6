"""``hpq test`` on an EKS cluster (and its aliases ``hpq eks nccl-test / nanogpt / validate``): the EKS
backend and the runner's own code over real HTTPS.

No Kubernetes API server can run on this machine, so a small local HTTPS server (tests/kube_standins.
FakeKube) speaks the subset of the API the runner uses (create/get/delete objects, list pods and
nodes, follow a pod log with chunked transfer) and plays the operator's part from a scenario.
Real: HTTP, TLS verified against the cluster CA the way EKS hands it out, the bearer token, the
rendered manifests the runner POSTs, the nccl-tests report parser and the judges (validation/judges.py),
cleanup.
"""

from __future__ import annotations

import base64
import json
import urllib.parse

import pytest

from hpq.errors import OperationFailed, UsageError
from hpq.kube import jobs
from hpq.kube.kube import ClusterAccess, KubeClient, KubeError, cluster_access
from hpq.validation import eks, judges
from hpq.validation.backend import run_test
from hpq.validation.request import NANOGPT, NCCL, VALIDATE, TestRequest
from hpq.validation.result import RawOutcome
from tests.kube_standins import (
    FSX_CSI_DRIVER_OBJECT,
    create_eks_cluster,
    kube_client,
    nccl_tests_output,
    self_signed_cert,
)
from tests.nccl_logs import allreduce_log, efa_info, socket_info
from tests.support import patch_aws_client

TESTS = {"nccl-test": NCCL, "nanogpt": NANOGPT, "validate": VALIDATE}


def run(kube, test, nodes=2, gpus=None, client=None, echo=None, **kw):
    """One test through the EKS backend and validation's one loop (resolve, run, cleanup, judge)."""
    lines: list[str] = []
    request = TestRequest(TESTS[test], nodes, gpus, kw.pop("instance_type", None), None, (), kw.pop("timeout_s", 60),
                          kw.pop("nccl_debug", None))
    api = client or kube_client(kube)
    backend = eks.EksBackend("test-eks", eks.EksOptions(**kw), lambda: api, poll_s=0.01)
    result = run_test(backend, request, echo or lines.append)
    return result, lines


def test_nccl_test_pass_on_g5_16xlarge(fake_kube):
    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    fake_kube.add_nodes("ml.m5.xlarge", 1)
    fake_kube.scenario.update(logs={"launcher": nccl_tests_output(3.02)}, pending_ticks=2)
    verdict, lines = run(fake_kube, "nccl-test")
    assert verdict.ok and verdict.exit_code == 0, verdict.message
    assert "3.02 GB/s" in verdict.message
    # the instance type came from the Ready nodes; the MPIJob posted has the TCP transport env
    [mpi] = [o for o in fake_kube.created if o["kind"] == "MPIJob"]
    worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["nodeSelector"]["node.kubernetes.io/instance-type"] == "ml.g5.16xlarge"
    assert {"name": "NCCL_NET_PLUGIN", "value": "none"} in worker["containers"][0]["env"]
    # the launcher's log was streamed live, progress was shown, and everything was deleted
    assert any("Avg bus bandwidth" in line for line in lines)
    assert any("Running" in line for line in lines) and any("Pending" in line for line in lines)
    assert fake_kube.objects == {} and ("mpijobs", "hpq-nccl-test") in fake_kube.deleted
    follows = [q for m, p, q in fake_kube.requests if p.endswith("/log")]
    assert follows and follows[0]["follow"] == ["true"] and follows[0]["container"] == ["launcher"]


def test_the_ranks_hosts_are_named_by_the_nodes_their_pods_ran_on(fake_kube):
    """nccl-tests' rank lines name hosts, and an MPIJob worker's host name is its pod's name
    (kubeflow/mpi-operator pkg/controller/mpi_job_controller.go: ``podTemplate.Spec.Hostname = name``). The
    result maps each to the node the scheduler bound the pod to (the pod's ``spec.nodeName``), so its metrics and
    the report name nodes a user can cordon. Broken twin: a host no pod of the job maps stays as printed."""
    from hpq.scripts import result_metrics

    fake_kube.add_nodes("ml.g5.16xlarge", 2, names=["ip-10-1-0-11", "ip-10-1-0-12"])
    fake_kube.scenario.update(logs={"launcher": nccl_tests_output(3.02)})
    verdict, _ = run(fake_kube, "nccl-test")
    assert verdict.ok, verdict.message
    doc = verdict.to_dict()
    assert doc["rank_hosts"] == ["hpq-nccl-test-worker-0", "hpq-nccl-test-worker-1"]  # as the log printed them
    workers = {doc["host_nodes"][h] for h in doc["rank_hosts"]}
    assert workers == {"ip-10-1-0-11", "ip-10-1-0-12"}  # one worker per node, each pod's own
    assert result_metrics._hosts(doc, "unknown") == ["ip-10-1-0-11", "ip-10-1-0-12"]
    twin = dict(doc, rank_hosts=["hpq-nccl-test-worker-0", "somewhere-else"])
    assert result_metrics._hosts(twin, "unknown") == sorted([doc["host_nodes"]["hpq-nccl-test-worker-0"],
                                                            "somewhere-else"])
    assert result_metrics._hosts(dict(doc, host_nodes={}), "unknown") == doc["rank_hosts"]


def test_nccl_test_low_bandwidth_fails_with_exit_1(fake_kube):
    fake_kube.add_nodes("ml.p5.48xlarge", 2)
    fake_kube.scenario.update(logs={"launcher": nccl_tests_output(95.0)})
    verdict, _ = run(fake_kube, "nccl-test", 2, 8)
    assert not verdict.ok and verdict.exit_code == 1
    assert verdict.message.startswith("FAIL: 95.00 GB/s") and "487.09 GB/s published for 2 x ml.p5.48xlarge" in \
        verdict.message.splitlines()[0]
    assert verdict.data["verdict"]["instance_type"] == "ml.p5.48xlarge"


def test_job_failure_without_results_fails(fake_kube):
    """A launcher that printed no table and a job that Failed: FAIL, exit 1, naming the job (the same judge as
    a node program that exited 1 on Slurm)."""
    fake_kube.add_nodes("ml.g5.48xlarge", 2)
    fake_kube.scenario.update(final="Failed", logs={"launcher": [
        "[1,0]<stderr>: libfabric: efa: FI_EFA_USE_DEVICE_RDMA=1 on a non-RDMA device", "mpirun: abort"]})
    verdict, _ = run(fake_kube, "nccl-test")
    assert verdict.exit_code == 1 and verdict.outcome == "FAIL", verdict.message
    assert verdict.message.startswith("FAIL: no result rows") and "mpijob/hpq-nccl-test exited 1" in verdict.message
    assert "mpijob/hpq-nccl-test ended Failed" in verdict.message and verdict.data["job"]["state"] == "Failed"
    assert fake_kube.objects == {}


def test_job_failed_after_a_passing_table_is_a_fail(fake_kube):
    """The job's end state is the program's exit status: a table that would pass, from a job that Failed, is a
    FAIL (the broken twin of test_nccl_test_pass_on_g5_16xlarge)."""
    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    fake_kube.scenario.update(final="Failed", logs={"launcher": nccl_tests_output(3.02)})
    verdict, _ = run(fake_kube, "nccl-test")
    assert verdict.exit_code == 1 and verdict.message.startswith("FAIL: exit status 1"), verdict.message
    assert "3.02 GB/s" in verdict.message


def test_fast_failure_still_shows_the_launcher_log(fake_kube):
    fake_kube.add_nodes("ml.p5.48xlarge", 2)
    fake_kube.scenario.update(final="Failed", end_at_tick=1, pending_ticks=5, logs={"launcher": [
        "--------------------------------------------------------------------------",
        "mpirun was unable to launch the specified application: No such file or directory"]})
    verdict, lines = run(fake_kube, "nccl-test")
    assert verdict.exit_code == 1 and any("unable to launch" in line for line in lines)


def test_dropped_log_stream_waits_for_the_job(fake_kube):
    """The launcher's log connection drops mid-run: the runner waits for the job's end and judges it."""
    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    fake_kube.scenario.update(final="Failed", break_log=3, end_at_tick=8, logs={"launcher": nccl_tests_output(3.0)})
    lines: list[str] = []
    verdict, _ = run(fake_kube, "nccl-test", echo=lines.append)
    assert verdict.exit_code == 1 and "ended Failed" in verdict.message
    # The branch this test is named for ran: the broken stream was noticed and said, then the job waited for.
    assert [ln for ln in lines if ln.startswith("(log stream ended:")], lines
    assert fake_kube.ticks >= 8 and fake_kube.objects == {}


def test_launcher_that_fails_once_then_passes_is_judged_on_its_last_run(fake_kube):
    """restartPolicy OnFailure: the launcher container exits 1 (workers not up yet), the kubelet restarts it in
    the same pod, the second run prints results. The runner follows both runs and judges the second."""
    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    first = ["ssh: connect to host hpq-nccl-test-worker-1 port 22: Connection refused",
             "ORTE was unable to reliably start one or more daemons."]
    fake_kube.scenario.update(attempts=[first, nccl_tests_output(3.02)])
    verdict, lines = run(fake_kube, "nccl-test")
    assert verdict.ok, verdict.message
    assert "--- log of hpq-nccl-test-launcher (restart 1) ---" in lines
    assert lines.index(first[0]) < lines.index("--- log of hpq-nccl-test-launcher (restart 1) ---")
    follows = [p for m, p, q in fake_kube.requests if p.endswith("/log") and q.get("follow") == ["true"]]
    assert len(follows) == 2


def test_expired_token_is_refreshed_once_and_the_run_goes_on(fake_kube):
    """EKS tokens last 15 minutes: the API answers 401, the client asks for a new token and repeats the call."""
    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    fake_kube.scenario.update(logs={"launcher": nccl_tests_output(3.02)}, token_ttl=4)
    tokens = iter(f"k8s-aws-v1.refreshed-{i}" for i in range(100))
    refreshed: list[str] = []

    def refresh():
        refreshed.append(next(tokens))
        return ClusterAccess("test-eks", fake_kube.url, fake_kube.ca_data, refreshed[-1])

    client = KubeClient(ClusterAccess("test-eks", fake_kube.url, fake_kube.ca_data, "k8s-aws-v1.first"),
                        timeout=10, token_refresh=refresh)
    verdict, _ = run(fake_kube, "nccl-test", client=client)
    assert verdict.ok, verdict.message
    assert refreshed and "k8s-aws-v1.first" in fake_kube.expired_tokens
    assert all(fake_kube.token_uses[t] <= 5 for t in fake_kube.token_uses)  # each token used until it expired
    # Without a way to refresh, the 401 is one explained error.
    fake_kube.scenario.update(token_ttl=0)
    with pytest.raises(KubeError, match="rejected the token"):
        kube_client(fake_kube, token="k8s-aws-v1.never-refreshed").list_nodes()


def test_deleting_a_job_without_a_policy_leaves_its_pods(fake_kube):
    """The stand-in does what the API server does: a batch/v1 Job deleted without propagationPolicy orphans its
    pods; hpq's delete says Background, so the pods go with the job."""
    client = kube_client(fake_kube)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "orphans", "namespace": "default"},
           "spec": {"completions": 2, "template": {"metadata": {"labels": {"app": "x"}}, "spec": {}}}}
    client.create(job)
    client.request("DELETE", "/apis/batch/v1/namespaces/default/jobs/orphans")  # no DeleteOptions
    fake_kube.collect_garbage(everything=True)
    assert sorted(fake_kube.pods) == ["orphans-0", "orphans-1"]  # left behind, as on a real cluster
    fake_kube.pods.clear()
    client.create(job)
    assert client.delete("batch/v1", "Job", "default", "orphans") is True
    fake_kube.collect_garbage(everything=True)
    assert fake_kube.pods == {} and fake_kube.delete_policies[-1] == ("jobs", "orphans", "Background")


def test_validate_leaves_no_pods_behind(fake_kube):
    fake_kube.add_nodes("ml.g5.48xlarge", 2)
    fake_kube.scenario.update(logs={"pod": ["GPUS 8 OK", "EFA 1 OK"]})
    run(fake_kube, "validate")
    fake_kube.collect_garbage(everything=True)  # as if the garbage collector had its few seconds
    assert fake_kube.objects == {} and fake_kube.pods == {}
    assert ("jobs", "hpq-validate", "Background") in fake_kube.delete_policies


def test_leftover_job_is_replaced(fake_kube):
    """A leftover MPIJob with running pods: it is deleted in the foreground (the object stays until its pods are
    gone) so the new job's pods, which take the same names, never meet the old ones."""
    from hpq.manifests.render import RenderRequest, render_objects

    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    leftover = [o for o in render_objects(RenderRequest("nccl-test", "ml.g5.16xlarge", 2)) if o["kind"] == "MPIJob"]
    kube_client(fake_kube).create(leftover[0])
    assert "hpq-nccl-test-launcher" in fake_kube.pods
    fake_kube.scenario.update(logs={"launcher": nccl_tests_output(3.0)})
    verdict, lines = run(fake_kube, "nccl-test")
    assert verdict.ok, verdict.message
    assert any("left over" in line for line in lines)
    assert fake_kube.deleted.count(("mpijobs", "hpq-nccl-test")) == 2  # the leftover, then ours
    assert fake_kube.delete_policies[0] == ("mpijobs", "hpq-nccl-test", "Foreground")
    assert fake_kube.pod_name_clashes == []


def test_ctrl_c_still_cleans_up(fake_kube):
    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    fake_kube.scenario.update(logs={"launcher": nccl_tests_output(3.0)})

    def echo(line):
        if "Avg bus" in line or "#" in line:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(fake_kube, "nccl-test", echo=echo)
    assert fake_kube.objects == {} and ("mpijobs", "hpq-nccl-test") in fake_kube.deleted


def test_unschedulable_pods_end_the_run_with_the_reason(fake_kube):
    fake_kube.add_nodes("ml.p5.48xlarge", 2)
    fake_kube.scenario.update(unschedulable="0/2 nodes are available: 2 Insufficient vpc.amazonaws.com/efa.")
    client = kube_client(fake_kube)
    from hpq.manifests.render import RenderRequest, render_objects

    plan = jobs.plan_for("nccl-test", render_objects(RenderRequest("nccl-test", "ml.p5.48xlarge", 2)))
    clock = iter(range(0, 10_000, 10))
    runner = jobs.Runner(client, plan, echo=lambda s: None, poll_s=0, schedule_grace_s=60,
                             clock=lambda: float(next(clock)), sleep=lambda s: None)
    try:
        with pytest.raises(OperationFailed, match="Unschedulable.*Insufficient vpc.amazonaws.com/efa"):
            runner.run()
    finally:
        runner.cleanup()
    assert fake_kube.objects == {}


def test_image_pull_errors_end_the_run(fake_kube):
    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    fake_kube.scenario.update(waiting=("ImagePullBackOff", 'Back-off pulling image "nope:1"'))
    from hpq.manifests.render import RenderRequest, render_objects

    plan = jobs.plan_for("nccl-test", render_objects(RenderRequest("nccl-test", "ml.g5.16xlarge", 2)))
    clock = iter(range(0, 10_000, 30))
    runner = jobs.Runner(kube_client(fake_kube), plan, echo=lambda s: None, poll_s=0,
                             clock=lambda: float(next(clock)), sleep=lambda s: None)
    try:
        with pytest.raises(OperationFailed, match="ImagePullBackOff"):
            runner.run()
    finally:
        runner.cleanup()


def test_nanogpt_pass_and_configmap_lifecycle(fake_kube):
    fake_kube.add_nodes("ml.g5.48xlarge", 2)
    # hpq's nanoGPT's own lines (scripts/nanogpt.py, rank 0), the same run-nanogpt tees on Slurm
    fake_kube.scenario.update(logs={"master": [
        "ranks on: 0=hpq-nanogpt-master-0, 1=hpq-nanogpt-worker-0", "iter 0: loss 4.1700 | 140 ms/iter",
        "iter 100: loss 3.4629 | x", "iter 200: loss 3.0461 | x",
        "loss 4.1700 -> 3.0461: falls; ranks agree (checksum 1.234560e+02, spread 0)", "RESULT: PASS"]})
    verdict, lines = run(fake_kube, "nanogpt")
    assert verdict.ok and "4.1700 -> 3.0461" in verdict.message, verdict.message
    # its log names no hosts: the nodes its pods ran on are the result's nodes (both nodes: master, worker)
    from hpq.scripts import result_metrics

    assert result_metrics._hosts(verdict.to_dict(), "unknown") == ["node-0", "node-1"]
    kinds = [o["kind"] for o in fake_kube.created]
    assert kinds == ["ConfigMap", "PyTorchJob"]
    assert ("configmaps", "hpq-nanogpt-program") in fake_kube.deleted and fake_kube.objects == {}


def test_nanogpt_loss_not_falling_fails(fake_kube):
    fake_kube.add_nodes("ml.g5.48xlarge", 2)
    fake_kube.scenario.update(logs={"master": [
        "ranks on: 0=a, 1=b", "iter 0: loss 4.1700", "iter 100: loss 4.2000",
        "loss 4.1700 -> 4.2000: DID NOT FALL; ranks agree (checksum 1.234560e+02, spread 0)",
        "RESULT: FAIL: loss did not fall"]})
    verdict, _ = run(fake_kube, "nanogpt")
    assert not verdict.ok and verdict.exit_code == 1 and "did not fall" in verdict.message


def test_validate_collects_every_node(fake_kube):
    fake_kube.add_nodes("ml.p5.48xlarge", 2)
    fake_kube.scenario.update(logs={
        "hpq-validate-0": ["HPQ-VALIDATE node=node-0 accelerators=8/8 efa=32/32 OK"],
        "hpq-validate-1": ["HPQ-VALIDATE node=node-1 accelerators=8/8 efa=31/32 FAIL"]})
    verdict, lines = run(fake_kube, "validate", 2)
    assert not verdict.ok and "1/2 nodes passed" in verdict.message and "efa=31/32" in verdict.message


def test_validate_names_a_node_short_of_efa_devices(fake_kube):
    """The pods of both tested nodes pass, but a third p5 node exposes 16 of its 32 EFA devices: FAIL, named."""
    fake_kube.add_nodes("ml.p5.48xlarge", 2)
    fake_kube.add_nodes("ml.p5.48xlarge", 1, efa=16)
    fake_kube.scenario.update(logs={
        "hpq-validate-0": ["HPQ-VALIDATE node=node-0 accelerators=8/8 efa=32/32 OK"],
        "hpq-validate-1": ["HPQ-VALIDATE node=node-1 accelerators=8/8 efa=32/32 OK"]})
    verdict, _ = run(fake_kube, "validate", 2)
    assert verdict.exit_code == 1 and "node-2: 16 of 32" in verdict.message
    assert verdict.data["node_facts"]["efa_short"] == ["node-2: 16 of 32"]


def test_not_enough_nodes_is_a_usage_error(fake_kube):
    fake_kube.add_nodes("ml.g5.16xlarge", 1)
    fake_kube.add_nodes("ml.g5.16xlarge", 1, ready=False)
    with pytest.raises(UsageError, match="needs 2 Ready ml.g5.16xlarge node.*has 1"):
        run(fake_kube, "nccl-test")
    assert fake_kube.created == []


def test_missing_operator_says_so(fake_kube):
    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    fake_kube.scenario["installed"] = {"configmaps", "jobs"}
    with pytest.raises(KubeError, match="MPI operator"):
        run(fake_kube, "nccl-test")


def test_wrong_token_is_explained(fake_kube):
    client = kube_client(fake_kube, token="not-an-eks-token")
    with pytest.raises(KubeError, match="access entry"):
        client.list_nodes()


def test_tls_is_verified_against_the_cluster_ca(fake_kube, tmp_path):
    (tmp_path / "other").mkdir()
    other_ca = self_signed_cert(tmp_path / "other")[2]  # a valid CA, but not the one that signed the server
    with pytest.raises(KubeError, match="CERTIFICATE_VERIFY_FAILED"):
        KubeClient(ClusterAccess("x", fake_kube.url, other_ca, "k8s-aws-v1.t"), timeout=5).list_nodes()
    assert KubeClient(ClusterAccess("x", fake_kube.url, fake_kube.ca_data, "k8s-aws-v1.t")).list_nodes() == []
    default_trust = KubeClient(ClusterAccess("x", fake_kube.url, None, "k8s-aws-v1.t"), timeout=5)
    with pytest.raises(KubeError, match="cannot reach"):
        default_trust.list_nodes()  # self-signed cluster CA is not in the system store


def test_json_output(fake_kube, monkeypatch, capsys):
    """`hpq eks nccl-test ... --output json`: one JSON document on stdout (progress on stderr)."""
    from hpq.cli.main import main

    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    fake_kube.scenario.update(logs={"launcher": nccl_tests_output(3.0)})
    monkeypatch.setattr(eks, "connect", lambda cluster, region, profile: kube_client(fake_kube))
    with pytest.raises(SystemExit) as exc:
        main(["eks", "nccl-test", "test-eks", "2", "--region", "us-west-2", "--output", "json"])
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert exc.value.code == 0 and doc["ok"] is True and doc["outcome"] == "PASS"
    assert doc["instance_type"] == "ml.g5.16xlarge" and doc["peak_busbw_gbps"] == 3.0 and doc["backend"] == "eks"


def test_cluster_access_from_eks_api(moto_aws):
    """Endpoint and CA from eks:DescribeCluster (moto over HTTP), token presigned for that cluster."""
    from hpq.aws.session import make_session

    described = create_eks_cluster("my-eks")
    access = cluster_access(make_session("us-west-2"), "my-eks")
    assert access.server == described["endpoint"] and access.ca_data == described["certificateAuthority"]["data"]
    url = base64.urlsafe_b64decode(access.token.removeprefix("k8s-aws-v1.") + "==").decode()
    parsed = urllib.parse.urlparse(url)
    assert parsed.netloc == "sts.us-west-2.amazonaws.com"
    assert "x-k8s-aws-id" in urllib.parse.parse_qs(parsed.query)["X-Amz-SignedHeaders"][0]
    with pytest.raises(UsageError, match="no EKS or HyperPod cluster named 'nope'"):
        cluster_access(make_session("us-west-2"), "nope")


def test_hyperpod_cluster_name_resolves_to_its_eks_cluster(moto_aws, monkeypatch):
    """EKS from moto over HTTP; SageMaker DescribeCluster through botocore's Stubber (moto does not
    return the Orchestrator block), answering like HyperPod does for an EKS-orchestrated cluster."""
    from botocore.stub import Stubber

    from hpq.aws import session as aws_session

    described = create_eks_cluster("hp-eks-cluster")
    real_client = aws_session.client
    stubs = []

    answers = [  # one SageMaker client per lookup: the EKS-orchestrated cluster, then a Slurm one
        ({"ClusterArn": "arn:aws:sagemaker:us-west-2:123456789012:cluster/abc", "ClusterName": "my-hp",
          "ClusterStatus": "InService", "InstanceGroups": [],
          "Orchestrator": {"Eks": {"ClusterArn": described["arn"]}}}, {"ClusterName": "my-hp"}),
        ({"ClusterArn": "arn:aws:sagemaker:us-west-2:123456789012:cluster/def", "ClusterName": "slurm-one",
          "ClusterStatus": "InService", "InstanceGroups": []}, {"ClusterName": "slurm-one"}),
    ]

    def client(session, service, region=None):
        c = real_client(session, service, region)
        if service == "sagemaker":
            stub = Stubber(c)
            stub.add_response("describe_cluster", *answers.pop(0))
            stub.activate()
            stubs.append(stub)
        return c

    patch_aws_client(monkeypatch, client)
    session = aws_session.make_session("us-west-2")
    access = cluster_access(session, "my-hp")
    assert access.name == "hp-eks-cluster" and access.server == described["endpoint"]
    with pytest.raises(UsageError, match="orchestrated by Slurm"):
        cluster_access(session, "slurm-one")
    for stub in stubs:
        stub.assert_no_pending_responses()


@pytest.mark.parametrize("busbw, code", [(3.0, 0), (1.49, 1)])
def test_cli_exit_code_is_the_verdict(fake_kube, monkeypatch, capsys, busbw, code):
    """`hpq eks nccl-test CLUSTER 2` end to end through the click app; only connect() is redirected
    to the local API server (its EKS/STS half is tested above against moto)."""
    from hpq.cli.main import main

    fake_kube.add_nodes("ml.g5.16xlarge", 2)
    fake_kube.scenario.update(logs={"launcher": nccl_tests_output(busbw)})
    monkeypatch.setattr(eks, "connect", lambda cluster, region, profile: kube_client(fake_kube))
    with pytest.raises(SystemExit) as exc:
        main(["eks", "nccl-test", "test-eks", "2", "--region", "us-west-2"])
    out = capsys.readouterr().out
    assert exc.value.code == code, out
    assert ("PASS" if code == 0 else "FAIL") in out and "cleaning up" in out
    assert fake_kube.objects == {}


@pytest.mark.parametrize("nodes, busbw, outcome", [(2, 78.33, "PASS"), (2, 41.0, "FAIL"), (4, 60.0, "INCONCLUSIVE"),
                                                    (2, 3.1, "FAIL")])
def test_nccl_verdict_uses_the_run_node_count(fake_kube, nodes, busbw, outcome):
    """p4d against AWS's 2-node p4de figure (78.33 GB/s, awsome-distributed-ai micro-benchmarks/nccl-tests):
    a healthy pair passes, 41 GB/s (52%) and 3.1 GB/s (TCP speed) fail, and 4 nodes, for which nothing is
    published, are INCONCLUSIVE (exit 3). Logs in nccl-tests' format with the INIT,NET lines the manifest's
    NCCL_DEBUG=INFO prints."""
    fake_kube.add_nodes("ml.p4d.24xlarge", nodes)
    hosts = [f"hpq-nccl-test-worker-{i}" for i in range(nodes)]
    fake_kube.scenario.update(logs={"launcher": allreduce_log(hosts, 8, busbw, nccl_info=efa_info(hosts[0])).splitlines()})
    verdict, _ = run(fake_kube, "nccl-test", nodes)
    assert verdict.message.startswith(outcome + ": ") and verdict.exit_code == {"PASS": 0, "FAIL": 1,
                                                                                "INCONCLUSIVE": 3}[outcome]
    assert verdict.data["verdict"]["nodes"] == nodes and verdict.data["verdict"]["nodes_from"] == "log"
    assert verdict.data["outcome"] == outcome
    if busbw < 4:
        assert "EFA was not used" in verdict.message


def test_nccl_verdict_socket_on_p5_fails(fake_kube):
    """Issue 19: the transport is judged from the log: NET/Socket on an EFA type fails whatever the bandwidth."""
    fake_kube.add_nodes("ml.p5.48xlarge", 2)
    hosts = ["hpq-nccl-test-worker-0", "hpq-nccl-test-worker-1"]
    fake_kube.scenario.update(logs={"launcher": allreduce_log(hosts, 8, 480.0,
                                                              nccl_info=socket_info(hosts[0])).splitlines()})
    verdict, _ = run(fake_kube, "nccl-test", 2)
    assert verdict.exit_code == 1 and "TCP sockets, not EFA" in verdict.message.splitlines()[0]


@pytest.mark.parametrize("twin, outcome, words", [
    ({}, "PASS", "3 ml.p5.48xlarge node(s) Ready and Schedulable"),
    ({"efa": 16}, "FAIL", "node-2: 16 of 32"),
    ({"efa": 0}, "FAIL", "node-2: 0 of 32"),
    ({"health": "UnschedulablePendingReplacement"}, "FAIL",
     "node-2 (sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReplacement)"),
    ({"health": "Unschedulable"}, "INCONCLUSIVE", "deep health checks"),
])
def test_validate_checks_efa_devices_and_hyperpod_health(fake_kube, twin, outcome, words):
    """Issue 19 item 7 on the fake API server's HyperPod-shaped nodes (kube_standins.FakeKube.add_nodes): a healthy pair
    passes; its broken twins (a node exposing fewer vpc.amazonaws.com/efa than p5's 32, a node HyperPod marked
    for replacement) fail, and one still in deep health checks is INCONCLUSIVE."""
    fake_kube.add_nodes("ml.p5.48xlarge", 2)
    fake_kube.add_nodes("ml.p5.48xlarge", 1, **twin)
    facts = jobs.node_facts(kube_client(fake_kube), "ml.p5.48xlarge")
    raw = RawOutcome(0, "HPQ-VALIDATE a OK\nHPQ-VALIDATE b OK", state="Succeeded", detail="done",
                     facts=facts.to_dict())
    verdict = judges.judge_validate(TestRequest(VALIDATE, 2), raw, "ml.p5.48xlarge", "eks", "test-eks")
    assert verdict.message.startswith(outcome + ": ") and words in verdict.message, verdict.message
    assert verdict.data["outcome"] == outcome


def test_hyperpod_health_label_decides_which_nodes_count(fake_kube):
    """Ready but labelled UnschedulablePendingReboot: not counted, so a 2-node test on one healthy node refuses."""
    fake_kube.add_nodes("ml.p5.48xlarge", 1)
    fake_kube.add_nodes("ml.p5.48xlarge", 1, health="UnschedulablePendingReboot")
    fake_kube.add_nodes("ml.p5.48xlarge", 1, health=None)  # a node HyperPod does not manage: Ready is enough
    assert jobs.node_types(kube_client(fake_kube))["ml.p5.48xlarge"] == 2
    with pytest.raises(UsageError, match="needs 3 Ready ml.p5.48xlarge"):
        jobs.pick_instance_type(kube_client(fake_kube), None, 3)


def test_fsx_claim_without_the_csi_driver_fails_before_anything_is_created(fake_kube):
    fake_kube.add_nodes("ml.g5.48xlarge", 2)
    with pytest.raises(OperationFailed) as exc:
        run(fake_kube, "nanogpt", fsx_claim="hpq-fsx")
    msg = str(exc.value)
    assert "no FSx for Lustre CSI driver" in msg and "CSIDriver fsx.csi.aws.com" in msg
    assert "aws-fsx-csi-driver" in msg and "fsx-csi-controller-sa" in msg and "without --fsx-claim" in msg
    assert fake_kube.created == []
    assert any(p == "/apis/storage.k8s.io/v1/csidrivers/fsx.csi.aws.com" for _m, p, _q in fake_kube.requests)


def test_fsx_claim_must_exist(fake_kube):
    fake_kube.add_nodes("ml.g5.48xlarge", 2)
    fake_kube.cluster_objects[("csidrivers", "fsx.csi.aws.com")] = FSX_CSI_DRIVER_OBJECT
    with pytest.raises(UsageError, match="no PersistentVolumeClaim 'hpq-fsx' in namespace default.*render fsx"):
        run(fake_kube, "nanogpt", fsx_claim="hpq-fsx")
    assert fake_kube.created == []


def test_fsx_claim_with_driver_and_claim_mounts_fsx(fake_kube):
    fake_kube.add_nodes("ml.g5.48xlarge", 2)
    fake_kube.cluster_objects[("csidrivers", "fsx.csi.aws.com")] = FSX_CSI_DRIVER_OBJECT
    fake_kube.objects[("persistentvolumeclaims", "default", "hpq-fsx")] = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "hpq-fsx"},
        "status": {"phase": "Bound"}}
    fake_kube.scenario.update(logs={"master": [
        "ranks on: 0=a, 1=b", "iter 0: loss 4.1700", "iter 100: loss 3.0500",
        "loss 4.1700 -> 3.0500: falls; ranks agree (checksum 1.234560e+02, spread 0)", "RESULT: PASS"]})
    verdict, _ = run(fake_kube, "nanogpt", fsx_claim="hpq-fsx")
    assert verdict.ok, verdict.message
    [job] = [o for o in fake_kube.created if o["kind"] == "PyTorchJob"]
    spec = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "hpq-fsx"}} in spec["volumes"]


def test_nanogpt_on_trainium_is_inconclusive(fake_kube):
    """hpq's nanoGPT on a Trainium node trains on the CPUs and says so; the verdict is not a pass."""
    from hpq.scripts import nanogpt

    fake_kube.add_nodes("ml.trn1.32xlarge", 2)
    fake_kube.scenario.update(logs={"master": [
        "ranks on: 0=a, 1=b", "iter 10: loss 4.1700", "iter 20: loss 3.0500",
        "loss 4.1700 -> 3.0500: falls; ranks agree (checksum 1.234560e+02, spread 0)",
        "RESULT: " + nanogpt.NEURON_UNUSED_RESULT]})
    verdict, _ = run(fake_kube, "nanogpt")
    assert not verdict.ok and verdict.exit_code == 3
    assert verdict.message.startswith("INCONCLUSIVE") and "Neuron devices were not used" in verdict.message
    assert "PASS" not in verdict.message


def test_cli_fsx_claim_without_driver_is_one_line_exit_1(fake_kube, monkeypatch, capsys):
    from hpq.cli.main import main

    fake_kube.add_nodes("ml.p5.48xlarge", 2)
    monkeypatch.setattr(eks, "connect", lambda cluster, region, profile: kube_client(fake_kube))
    with pytest.raises(SystemExit) as exc:
        main(["eks", "nanogpt", "test-eks", "2", "--fsx-claim", "hpq-fsx", "--region", "us-west-2"])
    err = capsys.readouterr().err
    assert exc.value.code == 1 and err.startswith("hpq: error:") and "aws-fsx-csi-driver" in err
    assert "Traceback" not in err and fake_kube.created == []
