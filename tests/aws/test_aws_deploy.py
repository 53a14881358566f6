"""deploy / publish / status / destroy against moto in server mode over HTTP.

moto's CloudFormation only stubs FSx, EKS and SageMaker::Cluster, cannot run Lambda-backed custom
resources (no Docker), drops nested Outputs.X and lacks Fn::Cidr. These tests deploy with
``--emulate moto``, which sends a COPY of the real synthesized templates through
``standins/rendition.moto_compatible`` (stand-ins for exactly those resource types, literals for those
GetAtts); the real templates are unchanged and are covered by cfn-lint in the synth tests. Everything else (bucket checks, versioned upload, nested-stack
creation from S3 TemplateURLs, change sets, events, outputs, deletion) runs against moto.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3
import pytest
from botocore.stub import Stubber

from hpq import vocab
from hpq.aws import deploy, stacks
from hpq.aws import s3 as aws_s3
from hpq.errors import OperationFailed, UsageError
from hpq.lifecycle import names
from hpq.standins.rendition import RENDITION_NOTE
from tests.support import run_cli

REGION = "us-east-1"


# moto's account reaches its (real default) 5-VPC quota after a few stacks; the quota step has its own tests
# (tests/aws/test_aws_deploy_quotas.py).
EMULATE = ["--emulate", "moto", "--no-quota-check"]


@pytest.fixture
def bucket(request, aws_env: str) -> str:
    name = "hpq-art-" + request.node.name.lower().replace("_", "-")[:40].strip("-")
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=name)
    return name


def stack_status(name: str) -> str:
    cfn = boto3.client("cloudformation", region_name=REGION)
    return cfn.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]


# --- no AWS needed -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ab", "My_Bucket", "-bad", "a..b", "192.168.1.1", "x" * 64, "s3://foo",
                                  "xn--abc", "bucket-"])
def test_bad_bucket_names_rejected_locally(name):
    with pytest.raises(UsageError) as exc:
        aws_s3.validate_bucket_name(name)
    assert "\n" not in str(exc.value)


def test_good_bucket_names_accepted():
    for name in ("abc", "my-artifacts.v2", "a1-b2-c3"):
        assert aws_s3.validate_bucket_name(name) == name


def test_release_is_content_addressed():
    """Same content -> same prefix; a changed template -> a new prefix; node bundle included."""
    a = deploy.build_release("b", REGION, ["slurm-gpu"])
    b = deploy.build_release("b", REGION, ["slurm-gpu"])
    c = deploy.build_release("b", REGION, ["slurm-gpu"], params={"WorkerCount": "3"})
    assert a.version == b.version and a.objects == b.objects
    assert a.version != c.version
    assert a.version.startswith(deploy.__version__ + "-")
    assert names.template_key(a.version, "slurm-gpu") in a.objects
    assert names.node_bundle_prefix(a.version) + names.ON_CREATE_SCRIPT in a.objects
    assert a.root_parameters("slurm-gpu")["AssetsPrefix"] == names.node_bundle_prefix(a.version)
    assert a.base_url("slurm-gpu") == f"https://b.s3.{REGION}.amazonaws.com/hpq/{a.version}/templates/slurm-gpu"


def test_eks_release_ships_the_helm_layer_content_addressed():
    """EKS variants upload the CDK kubectl layer zip (helm/helm, kubectl/kubectl) under a key named by its
    own digest, outside the release prefix (a 36 MB zip is not re-uploaded for every template change), and
    fill HelmLayerS3Key; Slurm releases and releases with a KubectlLayerArn of the user's carry none."""
    import hashlib
    import io
    import zipfile

    from hpq.aws import layer

    rel = deploy.build_release("b", REGION, ["eks-gpu"])
    key = rel.root_parameters("eks-gpu")["HelmLayerS3Key"]
    body = rel.objects[key]
    assert key == f"hpq/layers/kubectl-helm-{hashlib.sha256(body).hexdigest()[:16]}.zip"
    assert not key.startswith(names.s3_version_prefix(rel.version))
    assert {"helm/helm", "kubectl/kubectl"} <= set(zipfile.ZipFile(io.BytesIO(body)).namelist())
    assert layer.helm_layer().key == key
    other = deploy.build_release("b", REGION, ["eks-gpu"], params={"WorkerCount": "3"})
    assert other.version != rel.version and other.root_parameters("eks-gpu")["HelmLayerS3Key"] == key
    slurm = deploy.build_release("b", REGION, ["slurm-gpu"])
    assert "HelmLayerS3Key" not in slurm.root_parameters("slurm-gpu")
    assert not any(k.startswith(layer.KEY_PREFIX) for k in slurm.objects)
    arn = "arn:aws:lambda:us-east-1:123456789012:layer:my-helm:3"
    own = deploy.build_release("b", REGION, ["eks-gpu"], params={"KubectlLayerArn": arn})
    assert "HelmLayerS3Key" not in own.root_parameters("eks-gpu")
    assert not any(k.startswith(layer.KEY_PREFIX) for k in own.objects)


def test_eks_release_without_the_layer_package_is_a_usage_error(monkeypatch):
    """Without hpq[eks] (the layer package) and without KubectlLayerArn: exit 2 naming the pip command."""
    import importlib.metadata

    from hpq.aws import layer

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    layer.helm_layer.cache_clear()
    try:
        with pytest.raises(UsageError) as exc:
            deploy.build_release("b", REGION, ["eks-gpu"])
        assert exc.value.exit_code == 2
        assert "pip install 'hyperpod-quickstart[eks]'" in str(exc.value) and "KubectlLayerArn" in str(exc.value)
        deploy.build_release("b", REGION, ["slurm-gpu"])  # Slurm needs no layer
        deploy.build_release("b", REGION, ["eks-gpu"], params={
            "KubectlLayerArn": "arn:aws:lambda:us-east-1:123456789012:layer:my-helm:3"})
    finally:
        layer.helm_layer.cache_clear()


def test_quick_create_link_prefills_release():
    rel = deploy.build_release("my-art", "eu-west-1", ["eks-gpu"])
    url = deploy.quick_create_url(rel, "eks-gpu")
    assert url.startswith("https://console.aws.amazon.com/cloudformation/home?region=eu-west-1#/stacks/quickcreate?")
    from urllib.parse import parse_qs

    q = parse_qs(url.split("quickcreate?", 1)[1])
    assert q["templateURL"] == [rel.template_url("eks-gpu")]
    assert q["stackName"] == ["hpq-eks-gpu"]
    assert q["param_AssetsBucket"] == ["my-art"]
    assert q["param_TemplateBaseUrl"] == [rel.base_url("eks-gpu")]
    assert q["param_HelmLayerS3Key"] == [rel.helm_layer_key]


def _subprocess_hpq(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpq.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.parametrize("args", [
    ["deploy", "slurm-gpu", "Bad_Bucket"],
    ["deploy", "slurm-cpu", "good-bucket"],
    ["deploy", "slurm-gpu", "good-bucket", "--size", "huge"],
    ["deploy", "slurm-gpu", "good-bucket", "--param", "NoEquals"],
    ["publish", "a"],
])
def test_bad_input_exits_2_with_one_line(args, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    proc = _subprocess_hpq(args, env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hpq: error:"), proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_missing_credentials_exit_2_one_line(moto_server, tmp_path):
    """Against a reachable endpoint with no credentials anywhere: one line, exit 2, says how to fix."""
    url = moto_server
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=url, AWS_DEFAULT_REGION=REGION, AWS_EC2_METADATA_DISABLED="true",
               AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    for args in (["deploy", "slurm-gpu", "some-bucket"], ["status", "x"], ["check-quotas", "ml.p5.48xlarge", "2"]):
        proc = _subprocess_hpq(args, env)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "credentials" in lines[0], proc.stderr


# --- against moto --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_bucket_must_exist_and_be_in_region(capsys):
    code, _, err = run_cli(["deploy", "slurm-gpu", "no-such-bucket-hpq"], capsys)
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1
    boto3.client("s3", region_name="eu-west-1").create_bucket(
        Bucket="hpq-eu-bucket", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    code, _, err = run_cli(["deploy", "slurm-gpu", "hpq-eu-bucket", "--region", REGION], capsys)
    assert code == 2 and "is in eu-west-1" in err and "--region eu-west-1" in err


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_unknown_param_exit_2(bucket, capsys):
    code, _, err = run_cli(["deploy", "slurm-gpu", bucket, "--param", "Nope=1"], capsys)
    assert code == 2 and "Nope" in err


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_deploy_update_and_destroy(bucket, capsys, monkeypatch):
    """Create (follow nested stacks, print outputs + next commands), no-op redeploy, change-set update, destroy."""
    stack = "hpq-t-deploy"
    code, out, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", stack, "--poll-seconds", "0.05",
                              "--yes", *EMULATE], capsys)
    assert code == 0, err
    assert RENDITION_NOTE in err  # the emulated rendition is announced, never silent
    assert f"stack {stack}: CREATE_COMPLETE" in out
    assert "Outputs" in out and "VpcId" in out and "next:" in out and f"hpq destroy {stack}" in out
    assert "AvailabilityZoneId not given: using use1-az" in err
    import re

    done = re.search(rf"{stack} CREATE_COMPLETE · (\d+)/(\d+) resources · \d\d:\d\d", err)
    assert done and done.group(1) == done.group(2) and int(done.group(1)) > 30, err[-500:]
    assert f"{stack}/StorageStack CREATE_COMPLETE" in err  # nested stacks followed, by name
    assert stack_status(stack) == "CREATE_COMPLETE"
    cfn = boto3.client("cloudformation", region_name=REGION)
    nested = [r for r in cfn.list_stack_resources(StackName=stack)["StackResourceSummaries"]
              if r["ResourceType"] == "AWS::CloudFormation::Stack"]
    assert {r["LogicalResourceId"] for r in nested} >= {"NetworkingStack", "StorageStack", "HyperPodStack"}
    # objects landed under the versioned prefix, node bundle included
    s3 = boto3.client("s3", region_name=REGION)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert any(k.endswith("/templates/slurm-gpu/root.json") for k in keys)
    assert any(k.endswith("/node/" + names.ON_CREATE_SCRIPT) for k in keys)
    params = {p["ParameterKey"]: p["ParameterValue"] for p in cfn.describe_stacks(StackName=stack)["Stacks"][0]["Parameters"]}
    assert params["AssetsBucket"] == bucket and params["ClusterName"] == stack
    version = params["AssetsPrefix"].split("/")[1]

    # identical redeploy: nothing uploaded, change set empty -> success
    code, out, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", stack, "--output", "json", *EMULATE],
                             capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["action"] == "no-changes" and data["version"] == version and "no changes" in err
    # the counters are counted from the bucket, not a bare "0 uploaded, 0 unchanged" (issue 25 review item 2)
    assert f"release {version}: 0 uploaded, {len(keys)} unchanged" in err, err[-800:]
    # broken twin: an object of the release gone from the bucket is put back (node replacement reads it) and said
    s3.delete_object(Bucket=bucket, Key=keys[0])
    code, out, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", stack, "--output", "json", *EMULATE],
                             capsys)
    assert code == 0 and f"release {version}: 1 uploaded, {len(keys) - 1} unchanged" in err, err[-800:]
    assert keys[0] in [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]

    # a parameter change plus a new root resource go through a change set whose changes are shown
    # (moto lists only added/removed/edited resources, not parameter-driven Modify, so add one)
    synth = deploy.synthesize

    def with_marker(variant, size, params=None):
        files = synth(variant, size, params)
        files["root.json"]["Resources"]["HpqTestMarker"] = {
            "Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Value": "x", "Name": "/hpq-test/marker"}}
        return files

    monkeypatch.setattr(deploy, "synthesize", with_marker)
    code, out, err = run_cli(["deploy", "slurm-gpu", bucket, "--stack-name", stack, "-n", "3",  # = WorkerCount=3
                              "--poll-seconds", "0.05", "--output", "json", *EMULATE], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["action"] == "update" and data["status"] == "UPDATE_COMPLETE"
    assert "change set: 1 resource change(s), 0 replacement(s)" in err and "  Add     HpqTestMarker [AWS::SSM::Parameter]" in err
    assert "~ WorkerCount" in err and "2 -> 3  [--param]" in err  # the parameter plan comes first
    assert data["version"] != version
    new = {p["ParameterKey"]: p["ParameterValue"] for p in cfn.describe_stacks(StackName=stack)["Stacks"][0]["Parameters"]}
    assert new["WorkerCount"] == "3" and new["AssetsPrefix"] != params["AssetsPrefix"]

    # status shows nested stacks and outputs
    code, out, _ = run_cli(["status", stack, "--output", "json"], capsys)
    assert code == 0
    st = json.loads(out)
    assert st["status"] == "UPDATE_COMPLETE" and len(st["nested"]) >= 5 and "VpcId" in st["outputs"]

    # destroy refuses without --yes when not interactive, then deletes and follows
    code, _, err = run_cli(["destroy", stack], capsys)
    assert code == 2 and "--yes" in err
    code, out, err = run_cli(["destroy", stack, "--yes", "--poll-seconds", "0.05"], capsys)
    assert code == 0, err
    assert f"{stack}: DELETE_COMPLETE" in out
    code, _, err = run_cli(["status", stack], capsys)
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_eks_variant_deploys(bucket, capsys):
    code, out, err = run_cli(["deploy", "eks-gpu", bucket, "--stack-name", "hpq-t-eks", "--poll-seconds", "0.05",
                              "--param", "AvailabilityZoneId=use1-az4", "--yes", *EMULATE], capsys)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "not given" in line]
    assert len(notes) == 1 and notes[0].startswith("EksAvailabilityZoneId not given"), err
    cfn = boto3.client("cloudformation", region_name=REGION)
    params = {p["ParameterKey"]: p["ParameterValue"] for p in cfn.describe_stacks(StackName="hpq-t-eks")["Stacks"][0]["Parameters"]}
    assert params["AvailabilityZoneId"] == "use1-az4" and params["EksAvailabilityZoneId"] not in ("", "use1-az4")
    assert "aws eks update-kubeconfig" in out


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_publish_uploads_all_variants(bucket, capsys):
    code, out, err = run_cli(["publish", bucket, "--output", "json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert set(data["links"]) == set(vocab.VARIANTS)
    s3 = boto3.client("s3", region_name=REGION)
    keys = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys |= {o["Key"] for o in page.get("Contents", [])}
    for variant in vocab.VARIANTS:
        root_key = names.template_key(data["version"], variant)
        assert root_key in keys
        body = json.loads(s3.get_object(Bucket=bucket, Key=root_key)["Body"].read())
        assert "TemplateBaseUrl" in body["Parameters"]
        assert "quickcreate?templateURL=" in data["links"][variant]
    first = [ln for ln in err.splitlines() if ln.startswith("checked ")]
    code, out, err = run_cli(["publish", bucket], capsys)
    assert code == 0
    assert "| `slurm-gpu` | [![Launch Stack]" in out and "0 uploaded" in out  # idempotent re-run
    # Progress says what happened: the first run put every object, the re-run none (was "uploaded 10/53").
    again = [ln for ln in err.splitlines() if ln.startswith("checked ")]
    total = int(first[-1].split("/")[1].split()[0])
    assert first[-1] == f"checked {total}/{total} objects: {total} uploaded, 0 unchanged", first
    assert again[-1] == f"checked {total}/{total} objects: 0 uploaded, {total} unchanged", again


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_change_set_without_changes_is_success_and_removed(bucket):
    """moto itself marks a change set with the same template and parameters FAILED ("didn't contain changes")."""
    tmpl = {"Parameters": {"P": {"Type": "String"}}, "Resources": {"Param": {
        "Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Value": {"Ref": "P"}, "Name": "/hpq-t/cs"}}}}
    boto3.client("s3", region_name=REGION).put_object(Bucket=bucket, Key="cs.json", Body=json.dumps(tmpl))
    url = f"https://{bucket}.s3.{REGION}.amazonaws.com/cs.json"
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.create_stack(StackName="hpq-t-cs", TemplateURL=url, Parameters=[{"ParameterKey": "P", "ParameterValue": "a"}])
    info = stacks.describe(cfn, "hpq-t-cs")
    assert stacks.update_via_change_set(cfn, info, url, {"P": "a"}, {}).kind == "no-changes"
    left = cfn.list_change_sets(StackName="hpq-t-cs")["Summaries"]  # moto lists every stack's: filter
    assert [c for c in left if c.get("StackId") == info.stack_id] == []


def test_failed_change_set_is_deleted_and_explained():
    """Stubber stands in for CloudFormation failing a change set for a real reason (moto never does)."""
    cfn = boto3.client("cloudformation", region_name=REGION, aws_access_key_id="a", aws_secret_access_key="b")
    cs = "arn:aws:cloudformation:us-east-1:1:changeSet/hpq-x/1"
    info = stacks.StackInfo("s", "arn:aws:cloudformation:us-east-1:1:stack/s/1", "UPDATE_COMPLETE")
    with Stubber(cfn) as stub:
        stub.add_response("create_change_set", {"Id": cs, "StackId": info.stack_id})
        stub.add_response("describe_change_set", {"Status": "FAILED", "Changes": [],
                                                  "StatusReason": "Parameter 'WorkerCount' must be a number"},
                          {"StackName": "s", "ChangeSetName": cs})
        stub.add_response("delete_change_set", {}, {"StackName": "s", "ChangeSetName": cs})
        with pytest.raises(OperationFailed) as exc:
            stacks.update_via_change_set(cfn, info, "https://b.s3.amazonaws.com/t.json", {}, {})
        stub.assert_no_pending_responses()
    assert "must be a number" in str(exc.value) and exc.value.exit_code == 1
