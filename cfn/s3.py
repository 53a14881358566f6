"""S3 stack: the lifecycle bucket HyperPod reads OnCreate from, plus its contents custom resource.

The custom resource (cfn/handlers/bucket_cleanup.py) copies the node bundle from
the assets bucket into the lifecycle prefix, writes hpq's own node settings
``hpq-cluster.json`` (names.HPQ_CLUSTER_CONFIG) at the root of that prefix, and on
delete empties every version and delete marker so the stack can go away.

hpq never writes provisioning_parameters.json: that file is HyperPod's legacy Slurm
configuration, and HyperPod refuses a cluster that has it together with the API-driven
Slurm configuration the HyperPod stack uses (SageMaker Developer Guide, "Migrating to
API-driven Slurm configuration"). EKS variants get hpq-cluster.json too, with no Slurm
groups and no partition.

On Slurm variants hpq-cluster.json also names the FSx filesystem (``fsx_dns_name``, ``fsx_mountname``): the
root passes the Storage stack's outputs, which are the FileSystem's Fn::GetAtt ``DNSName`` and
``LustreMountName`` (AWS::FSx::FileSystem return values, https://docs.aws.amazon.com/AWSCloudFormation/latest/
TemplateReference/aws-resource-fsx-filesystem.html#aws-resource-fsx-filesystem-return-values), as the
parameters FsxDnsName and FsxMountName. The node then mounts /fsx without an FSx API call seconds after boot,
while HyperPod restarts systemd-resolved (AWS's reference lifecycle takes the same two names from its
configuration: awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/
lifecycle_script.py, provisioning parameters ``fsx_dns_name``/``fsx_mountname``). EKS nodes mount nothing on the
host (pods use the FSx CSI driver), so EKS variants leave both null and the S3 stack does not wait for FSx.
"""


from __future__ import annotations

import json
from dataclasses import dataclass

from troposphere import GetAtt, If, Join, Ref, Select, Split, Sub, awslambda, cloudformation, iam, s3

from hpq.cfn import common
from hpq.lifecycle import names
from hpq.vocab import EKS, SLURM

HANDLER = "bucket_cleanup"
_LOGIN_PLACEHOLDER = "__hpq_login_group__"
_PROLOG_PLACEHOLDER = "__hpq_node_prolog__"
PREFIX_PATTERN = r"^[A-Za-z0-9!_.*'()/-]*/$"
FSX_DNS_PATTERN = r"^(fs|fc)i?-[0-9a-f]{8,}(\.[A-Za-z0-9](-*[A-Za-z0-9])*)+$"
FSX_MOUNT_PATTERN = r"^[A-Za-z0-9_-]{1,8}$"
# Why checkov's access-logging and VPC checks do not apply here (tests/cfn/test_cfn_checkov.py runs checkov).
ACCESS_LOGGING_REASON = (
    "Server access logs need a second bucket (itself a candidate for the same finding) for a bucket that holds only "
    "hpq's node bundle and hpq-cluster.json (no secrets), written by this stack's own function and read by the "
    "cluster's node role. Where object-level auditing is wanted, CloudTrail S3 data events cover it account-wide.")
OUTSIDE_VPC_REASON = (
    "The function talks only to S3 and to CloudFormation's pre-signed response URL, both over HTTPS. Attached to the "
    "VPC it would need the Networking stack's NAT or endpoints (so the S3 stack would wait for the VPC) and its ENIs "
    "would hold up deletion of the subnet and security group.")


class LifecycleContents(cloudformation.CustomResource):
    resource_type = "Custom::LifecycleBucketContents"


# What the Observability stack's PrometheusRemoteWriteUrl output looks like, or "" (lifecycle/observability.py
# checks the same shape on the node).
REMOTE_WRITE_URL_PATTERN = (r"^$|^https://aps-workspaces\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/workspaces/"
                            r"ws-[a-zA-Z0-9-]+/api/v1/remote_write$")


@dataclass(frozen=True)
class S3Config:
    slurm: bool  # hpq-cluster.json names controller/login groups, the partition and the FSx names only for Slurm
    worker_groups: tuple[str, ...] = (names.WORKER_GROUP,)
    controller_group: str = names.CONTROLLER_GROUP
    login_group: str = names.LOGIN_GROUP
    partition: str = common.SLURM_PARTITION
    lambda_timeout_s: int = 600


def cluster_config(cfg: S3Config) -> Sub:
    """hpq-cluster.json as a JSON string (CloudFormation properties cannot carry null), e.g.

    {"schema_version": 1, "orchestrator": "slurm", "cluster_name": "<ClusterName>",
     "controller_group": "controller", "login_group": "login" | null, "worker_groups": ["worker"],
     "partition": "workers", "fsx_dns_name": "<FsxDnsName>", "fsx_mountname": "<FsxMountName>"};
    EKS: orchestrator "eks", controller/login/partition and the FSx names null."""
    doc = {
        "schema_version": names.HPQ_CLUSTER_CONFIG_SCHEMA,
        "orchestrator": SLURM if cfg.slurm else EKS,
        "cluster_name": "${ClusterName}",
        "controller_group": cfg.controller_group if cfg.slurm else None,
        "login_group": _LOGIN_PLACEHOLDER if cfg.slurm else None,
        "worker_groups": list(cfg.worker_groups),
        "partition": cfg.partition if cfg.slurm else None,
        "fsx_dns_name": "${FsxDnsName}" if cfg.slurm else None,
        "fsx_mountname": "${FsxMountName}" if cfg.slurm else None,
    }
    if cfg.slurm:  # the Observability stack's remote-write URL ("" when off): lifecycle/observability.py ships there
        doc["prometheus_remote_write_url"] = "${PrometheusRemoteWriteUrl}"
        doc["node_prolog"] = _PROLOG_PLACEHOLDER  # a JSON true/false: the parameter's own value, unquoted
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    if not cfg.slurm:
        return Sub(text)
    text = text.replace(json.dumps(_LOGIN_PLACEHOLDER), "${LoginGroup}")
    text = text.replace(json.dumps(_PROLOG_PLACEHOLDER), "${EnableNodeProlog}")  # lifecycle/prolog.py reads it
    return Sub(text, LoginGroup=If("HasLoginGroup", json.dumps(cfg.login_group), "null"))


def lifecycle_uri(bucket) -> Sub:
    return Sub(f"s3://${{Bucket}}/{names.LIFECYCLE_PREFIX}", Bucket=bucket)


def build(cfg: S3Config) -> common.Template:
    t = common.new_template("hpq s3: lifecycle bucket, node bundle copy, cleanup of every version on delete.")
    common.cluster_name_param(t)  # hpq-cluster.json names it through ${ClusterName}
    assets_bucket = common.param(t, "AssetsBucket", "Bucket holding the node bundle.",
                                 AllowedPattern=common.BUCKET_NAME_PATTERN, ConstraintDescription="an S3 bucket name.")
    assets_prefix = common.param(t, "AssetsPrefix", "Key prefix of the node bundle, ending in '/'.",
                                 AllowedPattern=PREFIX_PATTERN, ConstraintDescription="a key prefix ending in '/'.")
    if cfg.slurm:
        common.param(t, "EnableLoginGroup", "Whether the cluster has a login group.", Default="false",
                     AllowedValues=["true", "false"])
        t.add_condition("HasLoginGroup", {"Fn::Equals": [Ref("EnableLoginGroup"), "true"]})
        # The Storage stack's outputs: names the FSx API gives, so the patterns are botocore's FSx model's
        # (DNSName; LustreFileSystemMountName), held to what hpq-cluster.json's reader accepts (lifecycle/fields.py).
        common.param(t, "FsxDnsName", "DNS name of the cluster's FSx for Lustre filesystem (Storage stack output).",
                     AllowedPattern=FSX_DNS_PATTERN, ConstraintDescription="an FSx DNS name.")
        common.param(t, "FsxMountName", "Lustre mount name of that filesystem (Storage stack output).",
                     AllowedPattern=FSX_MOUNT_PATTERN, ConstraintDescription="1 to 8 of A-Z a-z 0-9 _ -.")
        common.param(t, "PrometheusRemoteWriteUrl", "AMP remote-write URL (Observability stack output); empty: "
                     "no metrics are shipped.", Default="", AllowedPattern=REMOTE_WRITE_URL_PATTERN,
                     ConstraintDescription="an AMP remote-write URL, or empty.")
        common.param(t, "EnableNodeProlog", "Run hpq's quick node checks as the Slurm Prolog before each job; a node "
                     "with a critical finding is drained with the reason and the job requeued (docs/doctor.md).",
                     Default="false", AllowedValues=["true", "false"])

    # sagemaker-hpq-<account>-<region>-<8 hex of this stack's id>: unique, <= 63 chars, lowercase, and
    # readable by AmazonSageMakerClusterInstanceRolePolicy too (it grants sagemaker-* buckets).
    stack_suffix = Select(0, Split("-", Select(2, Split("/", Ref("AWS::StackId")))))
    bucket = t.add_resource(s3.Bucket(
        "LifecycleBucket",
        DeletionPolicy="Delete", UpdateReplacePolicy="Delete",
        BucketName=Join("-", ["sagemaker-hpq", Ref("AWS::AccountId"), Ref("AWS::Region"), stack_suffix]),
        BucketEncryption=s3.BucketEncryption(ServerSideEncryptionConfiguration=[
            s3.ServerSideEncryptionRule(ServerSideEncryptionByDefault=s3.ServerSideEncryptionByDefault(
                SSEAlgorithm="AES256"))]),
        PublicAccessBlockConfiguration=s3.PublicAccessBlockConfiguration(
            BlockPublicAcls=True, BlockPublicPolicy=True, IgnorePublicAcls=True, RestrictPublicBuckets=True),
        OwnershipControls=s3.OwnershipControls(Rules=[s3.OwnershipControlsRule(ObjectOwnership="BucketOwnerEnforced")]),
        VersioningConfiguration=s3.VersioningConfiguration(Status="Enabled"),
        Tags=common.tags(Sub("${ClusterName}-lifecycle")),
        Metadata=common.checkov_skips(CKV_AWS_18=ACCESS_LOGGING_REASON),
    ))
    bucket_arn = GetAtt(bucket, "Arn")
    t.add_resource(s3.BucketPolicy(
        "LifecycleBucketPolicy", Bucket=Ref(bucket),
        PolicyDocument={"Version": "2012-10-17", "Statement": [{
            "Sid": "TlsOnly", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
            "Resource": [bucket_arn, Join("", [bucket_arn, "/*"])],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }]},
    ))

    log_group = common.encrypted_log_group(t, "ContentsFunctionLogs", "lifecycle-bucket-contents")
    assets_arn = Sub("arn:${AWS::Partition}:s3:::${AssetsBucket}")
    role = t.add_resource(iam.Role(
        "ContentsFunctionRole",
        AssumeRolePolicyDocument=common.assume_role("lambda"),
        Policies=[iam.Policy(PolicyName="lifecycle-bucket-contents", PolicyDocument={
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                 "Resource": GetAtt(log_group, "Arn")},
                {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:ListBucketVersions"], "Resource": bucket_arn},
                # Writes the bundle copy and hpq-cluster.json, deletes; never reads its own objects.
                {"Effect": "Allow", "Action": ["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"],
                 "Resource": Join("", [bucket_arn, "/*"])},
                {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": assets_arn,
                 "Condition": {"StringLike": {"s3:prefix": [Sub("${AssetsPrefix}*")]}}},
                {"Effect": "Allow", "Action": "s3:GetObject",
                 "Resource": Sub("arn:${AWS::Partition}:s3:::${AssetsBucket}/${AssetsPrefix}*")},
            ],
        })],
        Tags=common.tags(),
    ))
    fn = t.add_resource(awslambda.Function(
        "ContentsFunction",
        Description="Copies the node bundle into the lifecycle bucket; empties every version on delete.",
        Runtime=common.LAMBDA_RUNTIME, Handler="index.handler", Timeout=cfg.lambda_timeout_s, MemorySize=256,
        Role=GetAtt(role, "Arn"),
        Code=awslambda.Code(ZipFile=common.handler_source(HANDLER)),
        LoggingConfig=awslambda.LoggingConfig(LogGroup=Ref(log_group)),
        Tags=common.tags(),
        Metadata=common.checkov_skips(**common.custom_resource_function_skips(OUTSIDE_VPC_REASON)),
    ))

    prefix = names.LIFECYCLE_PREFIX + "/"
    t.add_resource(LifecycleContents(
        "LifecycleContents",
        ServiceToken=GetAtt(fn, "Arn"),
        ServiceTimeout=cfg.lambda_timeout_s + 60,
        BucketName=Ref(bucket),
        SourceBucket=assets_bucket,
        SourcePrefix=assets_prefix,
        DestinationPrefix=prefix,
        ClusterConfigKey=prefix + names.HPQ_CLUSTER_CONFIG,
        ClusterConfig=cluster_config(cfg),
    ))

    common.output(t, names.OUT_LIFECYCLE_BUCKET, Ref(bucket), "Lifecycle bucket name.")
    common.output(t, names.OUT_LIFECYCLE_URI, lifecycle_uri(Ref(bucket)),
                  "LifeCycleConfig.SourceS3Uri (holds on_create.sh, the node bundle and hpq-cluster.json).")
    return t
