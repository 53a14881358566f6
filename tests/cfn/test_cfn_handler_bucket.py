"""The lifecycle-bucket custom resource handler against S3 over HTTP.

Stand-ins: S3 is moto's server (ThreadedMotoServer, real HTTP on a free port) and
CloudFormation's pre-signed response URL is a local HTTP server that records the
PUT bodies; the handler code itself is the file embedded in the template.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from hpq.lifecycle import bundle, names

ASSETS = "hpq-assets"
PREFIX = "hpq/0.1.0/node/"
LIFECYCLE = "sagemaker-hpq-123456789012-us-east-1-abcdef12"
DEST = names.LIFECYCLE_PREFIX + "/"


class _Receiver(BaseHTTPRequestHandler):
    def do_PUT(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.bodies.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def _receiver():
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    server.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture()
def cfn_endpoint(_receiver):
    _receiver.bodies.clear()
    return f"http://127.0.0.1:{_receiver.server_address[1]}/response", _receiver.bodies


@pytest.fixture(scope="module")
def _moto():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture()
def s3(_moto, monkeypatch):
    import urllib.request

    # moto keeps its state per process: start every test from an empty S3.
    urllib.request.urlopen(urllib.request.Request(f"{_moto}/moto-api/reset", method="POST"), timeout=10)
    for key, value in {"AWS_ENDPOINT_URL": _moto, "AWS_ACCESS_KEY_ID": "testing",
                       "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    import boto3

    return boto3.client("s3")


@pytest.fixture()
def handler():
    from hpq.cfn.handlers import bucket_cleanup

    return bucket_cleanup


class Context:
    def __init__(self, remaining_ms=300_000):
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self):
        return self.remaining_ms


# hpq-cluster.json as the S3 stack passes it: a JSON object in a string (CloudFormation properties carry no
# null), after CloudFormation resolved the template's Fn::Sub (ClusterName, login group on).
CLUSTER_CONFIG = {"schema_version": 1, "orchestrator": "slurm", "cluster_name": "demo",
                  "controller_group": "controller", "login_group": "login", "worker_groups": ["worker"],
                  "partition": "workers"}


def event(kind, url, **props):
    base = {"BucketName": LIFECYCLE, "SourceBucket": ASSETS, "SourcePrefix": PREFIX, "DestinationPrefix": DEST,
            "ClusterConfigKey": DEST + names.HPQ_CLUSTER_CONFIG,
            "ClusterConfig": json.dumps(CLUSTER_CONFIG, separators=(",", ":"))}
    base.update(props)
    ev = {"RequestType": kind, "ResponseURL": url, "StackId": "arn:stack/x/1", "RequestId": "r1",
          "LogicalResourceId": "LifecycleContents", "ResourceType": "Custom::LifecycleBucketContents",
          "ResourceProperties": base}
    if kind != "Create":
        ev["PhysicalResourceId"] = LIFECYCLE
    return ev


def _buckets(s3, upload_bundle=True):
    s3.create_bucket(Bucket=ASSETS)
    s3.create_bucket(Bucket=LIFECYCLE)
    s3.put_bucket_versioning(Bucket=LIFECYCLE, VersioningConfiguration={"Status": "Enabled"})
    files = bundle.node_bundle_files()
    if upload_bundle:
        for key, path in files.items():
            with open(path, "rb") as fh:
                s3.put_object(Bucket=ASSETS, Key=PREFIX + key, Body=fh.read())
    return files


def test_create_copies_bundle_and_writes_hpq_cluster_json(s3, handler, cfn_endpoint):
    url, bodies = cfn_endpoint
    files = _buckets(s3)
    s3.put_object(Bucket=LIFECYCLE, Key=DEST + "hpq/lifecycle/removed_from_bundle.sh", Body=b"old")
    # An older hpq wrote HyperPod's legacy Slurm file here; next to the API-driven Slurm configuration
    # HyperPod refuses the cluster (Developer Guide, "Migrating to API-driven Slurm configuration").
    s3.put_object(Bucket=LIFECYCLE, Key=DEST + "provisioning_parameters.json", Body=b"{}")
    handler.handler(event("Create", url), Context())
    assert [b["Status"] for b in bodies] == ["SUCCESS"], bodies
    assert bodies[0]["PhysicalResourceId"] == LIFECYCLE
    for key, path in files.items():
        got = s3.get_object(Bucket=LIFECYCLE, Key=DEST + key)["Body"].read()
        with open(path, "rb") as fh:
            assert got == fh.read(), key
    written = s3.get_object(Bucket=LIFECYCLE, Key=DEST + names.HPQ_CLUSTER_CONFIG)["Body"].read()
    assert json.loads(written) == CLUSTER_CONFIG  # null-capable JSON, as the node contract defines it
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=LIFECYCLE)["Contents"]}
    assert DEST + "hpq/lifecycle/removed_from_bundle.sh" not in keys
    assert DEST + "provisioning_parameters.json" not in keys


def test_root_level_bundle_files_land_at_the_root_of_the_source_uri(s3, handler, cfn_endpoint):
    """OnCreate is a bare file name under SourceS3Uri: a bundle key ``on_create.sh`` (the root shim) must be
    copied to <lifecycle prefix>/on_create.sh, the nested ``hpq/...`` keys keep their paths."""
    url, bodies = cfn_endpoint
    _buckets(s3, upload_bundle=False)
    s3.put_object(Bucket=ASSETS, Key=PREFIX + names.ON_CREATE_ENTRY, Body=b"#!/bin/bash\n")
    s3.put_object(Bucket=ASSETS, Key=PREFIX + names.ON_CREATE_SCRIPT, Body=b"#!/bin/bash\n")
    handler.handler(event("Create", url), Context())
    assert [b["Status"] for b in bodies] == ["SUCCESS"], bodies
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=LIFECYCLE)["Contents"]}
    assert {DEST + names.ON_CREATE_ENTRY, DEST + names.ON_CREATE_SCRIPT} <= keys


def test_cluster_config_that_is_not_a_json_object_answers_failed(s3, handler, cfn_endpoint):
    url, bodies = cfn_endpoint
    _buckets(s3)
    handler.handler(event("Create", url, ClusterConfig="[1, 2]"), Context())
    assert [b["Status"] for b in bodies] == ["FAILED"]
    assert "ClusterConfig must be a JSON object" in bodies[0]["Reason"]


def test_delete_removes_every_version_and_marker(s3, handler, cfn_endpoint):
    url, bodies = cfn_endpoint
    _buckets(s3, upload_bundle=False)
    for i in range(3):
        s3.put_object(Bucket=LIFECYCLE, Key="a.txt", Body=str(i).encode())
    s3.put_object(Bucket=LIFECYCLE, Key="b.txt", Body=b"b")
    s3.delete_object(Bucket=LIFECYCLE, Key="b.txt")  # leaves a delete marker
    listing = s3.list_object_versions(Bucket=LIFECYCLE)
    assert len(listing["Versions"]) == 4 and len(listing["DeleteMarkers"]) == 1
    handler.handler(event("Delete", url), Context())
    assert [b["Status"] for b in bodies] == ["SUCCESS"], bodies
    listing = s3.list_object_versions(Bucket=LIFECYCLE)
    assert not listing.get("Versions") and not listing.get("DeleteMarkers")
    s3.delete_bucket(Bucket=LIFECYCLE)  # would fail with BucketNotEmpty otherwise


def test_delete_that_s3_refuses_answers_failed(s3, handler, cfn_endpoint):
    """An object under legal hold cannot be deleted: the stack must see FAILED, not a false SUCCESS."""
    url, bodies = cfn_endpoint
    s3.create_bucket(Bucket=LIFECYCLE, ObjectLockEnabledForBucket=True)
    s3.put_object(Bucket=LIFECYCLE, Key="held.txt", Body=b"h", ObjectLockLegalHoldStatus="ON")
    s3.put_object(Bucket=LIFECYCLE, Key="free.txt", Body=b"f")
    handler.handler(event("Delete", url), Context())
    assert [b["Status"] for b in bodies] == ["FAILED"], bodies
    assert "could not delete 1 objects" in bodies[0]["Reason"]
    left = [v["Key"] for v in s3.list_object_versions(Bucket=LIFECYCLE).get("Versions", [])]
    assert left == ["held.txt"]


def test_delete_of_missing_bucket_succeeds(s3, handler, cfn_endpoint):
    url, bodies = cfn_endpoint
    handler.handler(event("Delete", url), Context())
    assert [b["Status"] for b in bodies] == ["SUCCESS"]


def test_missing_bundle_answers_failed_with_reason(s3, handler, cfn_endpoint):
    url, bodies = cfn_endpoint
    _buckets(s3, upload_bundle=False)
    handler.handler(event("Create", url), Context())
    assert [b["Status"] for b in bodies] == ["FAILED"]
    assert "no node bundle" in bodies[0]["Reason"] and ASSETS in bodies[0]["Reason"]


def test_answers_before_the_lambda_timeout_exactly_once(s3, handler, cfn_endpoint, monkeypatch):
    url, bodies = cfn_endpoint
    release = threading.Event()

    def slow(ev, client):
        release.wait(10)
        return LIFECYCLE, {}

    monkeypatch.setattr(handler, "apply", slow)
    # 16.2 s left and a 15 s margin: the timer answers after ~1.2 s while the work still hangs.
    worker = threading.Thread(target=handler.handler, args=(event("Update", url), Context(16_200)))
    worker.start()
    for _ in range(100):
        if bodies:
            break
        threading.Event().wait(0.05)
    release.set()
    worker.join(15)
    assert [b["Status"] for b in bodies] == ["FAILED"], bodies
    assert "timed out" in bodies[0]["Reason"]
