"""The rehearsal's AWS side against its embedded moto server (no root needed).

The deploy goes through ``hpq deploy``'s library path with the moto rendition chosen explicitly;
then the resources moto only stubs are created from the REAL templates' properties: the FSx
filesystem through moto's FSx API (so the lifecycle's exact-tag discovery runs against it), the S3
stack's custom resource by running cfn/handlers/bucket_cleanup.py's create path against moto, and
the AWS::SageMaker::Cluster request evaluated for the HyperPod stand-in. moto is the stand-in for AWS.
FSx answers carry Lifecycle and LustreConfiguration.MountName as the real DescribeFileSystems does
(FSx API Reference: FileSystem, LustreFileSystemConfiguration), which moto 5.2 omits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpq.lifecycle import bundle, fsx, names
from hpq.rehearsal import aws
from hpq.standins import hyperpod

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def deployed():
    moto = aws.EmbeddedMoto("127.0.0.1").start()
    try:
        with aws.environment(moto.url):
            d = aws.deploy(aws.session(), "slurm-gpu", "hpq-rehearse-unit", "hpq-rehearse-unit-artifacts",
                           {"WorkerCount": "3", "WorkerInstanceType": "ml.g5.xlarge", "EnableLoginGroup": "true"})
            s3 = aws.session().client("s3")
            uri = d.outputs["LifecycleS3Uri"]
            bucket, prefix = hyperpod.split_s3_uri(uri)
            objects = {}
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
                for o in page.get("Contents", []):
                    objects[o["Key"][len(prefix) + 1:]] = s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
            file_systems = fsx.describe_file_systems("us-west-2", use_boto3=True)
            yield d, objects, file_systems
    finally:
        moto.stop()


def test_lifecycle_prefix_holds_the_deployed_bundle_byte_for_byte(deployed):
    d, objects, _ = deployed
    files = bundle.node_bundle_files()
    for key, src in files.items():
        assert objects.get(key) == Path(src).read_bytes(), key
    extra = set(objects) - set(files)
    assert extra, "the custom resource writes the node settings file next to the bundle"
    # what the handler wrote is what the real S3 template asked it to write
    s3_props = d.templates["S3.json"]["Resources"]["LifecycleContents"]["Properties"]
    written = {k.rsplit("/", 1)[-1] for k in extra}
    asked = {str(v).rsplit("/", 1)[-1] for k, v in s3_props.items() if k.endswith("Key") and isinstance(v, str)}
    assert written == asked


def test_fsx_is_found_by_its_exact_cluster_tag(deployed):
    d, _, file_systems = deployed
    fs = fsx.find_cluster_filesystem(d.stack_name, "us-west-2", use_boto3=True)
    assert fs is not None and fs["FileSystemId"] == d.outputs["FsxFileSystemId"]
    assert fs["Lifecycle"] == "AVAILABLE" and fs["DNSName"] == d.outputs["FsxDnsName"]
    assert fs["LustreConfiguration"]["MountName"] == d.outputs["FsxMountName"] and len(d.outputs["FsxMountName"]) == 8
    assert fs["LustreConfiguration"]["DeploymentType"] == "PERSISTENT_2"  # from the real Storage template
    assert fsx.find_cluster_filesystem(d.stack_name + "-2", "us-west-2", use_boto3=True) is None


def test_cluster_request_comes_from_the_real_hyperpod_template(deployed):
    d, _, _ = deployed
    groups = {g.name: g for g in hyperpod.groups_from_request(d.cluster)}
    assert set(groups) == {names.CONTROLLER_GROUP, names.LOGIN_GROUP, names.WORKER_GROUP}
    assert groups["worker"].count == 3 and groups["worker"].instance_type == "ml.g5.xlarge"
    assert {g.source_s3_uri for g in groups.values()} == {d.outputs["LifecycleS3Uri"]}
    assert all(g.on_create for g in groups.values())
    assert d.cluster_arn.startswith("arn:aws:sagemaker:us-west-2:") and d.outputs["ClusterArn"] == d.cluster_arn
