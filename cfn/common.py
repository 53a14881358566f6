"""Small helpers shared by the stack modules: partition-aware ARNs, tags, parameters, handler code.

Kept here so no stack module reaches into another one; each stack only talks to
the others through its parameters and outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from troposphere import GetAtt, Output, Parameter, Ref, Sub, Tags, Template, kms, logs

from hpq.lifecycle import names

HANDLER_DIR = Path(__file__).resolve().parent / "handlers"
# CloudFormation zips inline code itself; the zipped package may not exceed 4 MB (the older limit
# was 4096 characters). A template body fetched from S3 may not exceed 1 MB, which binds first.
ZIPFILE_MAX_BYTES = 1_000_000

LAMBDA_RUNTIME = "python3.12"
# HyperPod's own partition: it adds every node of a Slurm cluster, login nodes included, to the universal
# partition "dev" (SageMaker HyperPod developer guide, getting started with the AWS CLI for Slurm,
# smcluster-getting-started-slurm-cli.html: "All nodes are automatically added to the universal dev partition";
# docs/design.md, "Slurm partitions"). A group that names "dev" itself puts its nodes in that partition twice over, with the login nodes.
HYPERPOD_UNIVERSAL_PARTITION = "dev"
# The one Slurm partition of the worker group: HyperPod's API-driven Slurm configuration puts the workers
# in it (ClusterSlurmConfig.PartitionNames: at most one, pattern [a-zA-Z0-9](-*[a-zA-Z0-9])*; SageMaker API
# reference API_ClusterSlurmConfig.html), and hpq-cluster.json tells the nodes its name. Only Compute groups
# name one: the controller and login groups (NodeType Controller / Login) have no PartitionNames, so login nodes
# are only in HyperPod's universal partition, as AWS's API-driven configuration documents them.
SLURM_PARTITION = "workers"
assert SLURM_PARTITION != HYPERPOD_UNIVERSAL_PARTITION
TEMPLATE_VERSION = "2010-09-09"


def new_template(description: str) -> Template:
    t = Template(Description=description)
    t.set_version(TEMPLATE_VERSION)
    return t


def handler_path(name: str) -> Path:
    return HANDLER_DIR / f"{name}.py"


def handler_source(name: str) -> str:
    """The handler file's text, embedded verbatim as Code.ZipFile (one source of truth)."""
    text = handler_path(name).read_text(encoding="utf-8")
    if len(text.encode("utf-8")) > ZIPFILE_MAX_BYTES:
        raise ValueError(f"cfn/handlers/{name}.py is too large to embed inline")
    return text


def arn(service: str, resource: str, region: bool = True, account: bool = True) -> Sub:
    """``arn:<partition>:service:region:account:resource`` so templates work in every partition."""
    r = "${AWS::Region}" if region else ""
    a = "${AWS::AccountId}" if account else ""
    return Sub(f"arn:${{AWS::Partition}}:{service}:{r}:{a}:{resource}")


def managed_policy(name: str) -> Sub:
    return Sub(f"arn:${{AWS::Partition}}:iam::aws:policy/{name}")


def service_principal(service: str) -> str:
    return f"{service}.amazonaws.com"


def assume_role(service: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": service_principal(service)}, "Action": "sts:AssumeRole"}
        ],
    }


def tags(name: Any = None, extra: dict[str, Any] | None = None) -> Tags:
    """Every taggable resource carries managed-by (and a Name where the console shows one)."""
    out: dict[str, Any] = {names.MANAGED_BY_TAG_KEY: names.MANAGED_BY_TAG_VALUE}
    if name is not None:
        out["Name"] = name
    out.update(extra or {})
    return Tags(out)


def param(t: Template, name: str, description: str, type_: str = "String", **kw: Any) -> Ref:
    t.add_parameter(Parameter(name, Type=type_, Description=description, **kw))
    return Ref(name)


def output(t: Template, name: str, value: Any, description: str) -> None:
    t.add_output(Output(name, Value=value, Description=description))


# Shared parameter constraints (nested stacks repeat them so each template validates on its own).
CLUSTER_NAME_PATTERN = f"^{names.HYPERPOD_NAME_PATTERN}$"  # hpq.lifecycle.names: the one rule
BUCKET_NAME_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
ROLE_ARN_PATTERN = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$"
CLUSTER_NAME_HELP = "1-63 letters, digits and hyphens; starts with a letter or digit."


def cluster_name_param(t: Template) -> Ref:
    return param(
        t, "ClusterName", "HyperPod cluster name (also tags FSx for exact-match discovery).",
        AllowedPattern=CLUSTER_NAME_PATTERN, ConstraintDescription=CLUSTER_NAME_HELP,
        MinLength=1, MaxLength=63,
    )


# ---------------------------------------------------------------------------------------------- KMS and logs
# A key deleted with its stack waits this many days (the KMS minimum) before it is gone; nothing outlives the
# stack that could still need it (the EKS cluster, log group or topic it encrypts is deleted first).
KEY_PENDING_WINDOW_DAYS = 7
# What AWS's key-policy examples grant a service with the wildcards kms:GenerateDataKey* and (CloudWatch Logs)
# kms:Encrypt*, kms:Decrypt*, kms:ReEncrypt*, kms:Describe*, spelled out (IAM Service Authorization Reference, KMS;
# kms:DescribeCustomKeyStores left out: it is not an action on a key),
# so no policy here carries a wildcard action other than the account root's own kms:*.
KMS_GENERATE_DATA_KEY_ACTIONS = (
    "kms:GenerateDataKey", "kms:GenerateDataKeyPair", "kms:GenerateDataKeyPairWithoutPlaintext",
    "kms:GenerateDataKeyWithoutPlaintext",
)
KMS_SERVICE_ACTIONS = ("kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", *KMS_GENERATE_DATA_KEY_ACTIONS,
                       "kms:ReEncryptFrom", "kms:ReEncryptTo")


def account_root() -> Sub:
    return Sub("arn:${AWS::Partition}:iam::${AWS::AccountId}:root")


def key_policy(*statements: dict[str, Any]) -> dict[str, Any]:
    """A key policy that starts with KMS's default statement: the account root may do everything, so the
    account's IAM policies (not this key policy) decide who administers and uses the key, and the key can never
    become unmanageable (AWS KMS Developer Guide, "Default key policy", key-policy-default.html)."""
    root = {"Sid": "AccountAdministersThroughIam", "Effect": "Allow", "Principal": {"AWS": account_root()},
            "Action": "kms:*", "Resource": "*"}
    return {"Version": "2012-10-17", "Statement": [root, *statements]}


def kms_key(t: Template, logical: str, description: str, *statements: dict[str, Any]) -> kms.Key:
    """A customer-managed symmetric key with yearly automatic rotation, deleted (after the pending window) with
    its stack. In a key policy, Resource "*" means this key."""
    return t.add_resource(kms.Key(
        logical, Description=description, EnableKeyRotation=True, PendingWindowInDays=KEY_PENDING_WINDOW_DAYS,
        KeyPolicy=key_policy(*statements), DeletionPolicy="Delete", UpdateReplacePolicy="Delete", Tags=tags(),
    ))


def log_group_path(suffix: str) -> str:
    """``/hpq/${AWS::StackName}/<suffix>`` (an Fn::Sub text): one log group per stack and purpose."""
    return f"/hpq/${{AWS::StackName}}/{suffix}"


def encrypted_log_group(t: Template, logical: str, suffix: str, retention_days: int = 30,
                        path: str | None = None, description: str | None = None, **extra: Any) -> logs.LogGroup:
    """A log group named after its stack, encrypted with a key of its own that CloudWatch Logs may use for this
    log group only.

    CloudWatch Logs encrypts with the key itself, as the service principal logs.<region>.<url suffix>, and the
    key policy must allow it, limited by the encryption context kms:EncryptionContext:aws:logs:arn to the log
    group's ARN (CloudWatch Logs User Guide, "Encrypt log data in CloudWatch Logs using AWS KMS",
    encrypt-log-data-kms.html). The writer (a Lambda function's role) needs no KMS permission of its own.
    ``path`` (an Fn::Sub text) names a log group another service writes to by name instead."""
    path = path or log_group_path(suffix)
    group_arn = Sub(f"arn:${{AWS::Partition}}:logs:${{AWS::Region}}:${{AWS::AccountId}}:log-group:{path}")
    key = kms_key(t, f"{logical}Key", description or f"Encrypts the log group /hpq/<stack>/{suffix}.", {
        "Sid": "CloudWatchLogsEncryptsThisLogGroup", "Effect": "Allow",
        "Principal": {"Service": Sub("logs.${AWS::Region}.${AWS::URLSuffix}")},
        "Action": list(KMS_SERVICE_ACTIONS), "Resource": "*",
        "Condition": {"ArnEquals": {"kms:EncryptionContext:aws:logs:arn": group_arn}},
    })
    return t.add_resource(logs.LogGroup(
        logical, LogGroupName=Sub(path), RetentionInDays=retention_days, KmsKeyId=GetAtt(key, "Arn"),
        DeletionPolicy="Delete", UpdateReplacePolicy="Delete", **extra,
    ))


def checkov_skips(**reasons: str) -> dict[str, Any]:
    """Resource Metadata that tells checkov (``checkov --framework cloudformation``) why a check does not apply.

    Every skip carries its reason; tests/cfn/test_cfn_checkov.py fails on a skip without one."""
    return {"checkov": {"skip": [{"id": check, "comment": reason} for check, reason in sorted(reasons.items())]}}


def custom_resource_function_skips(vpc_reason: str) -> dict[str, str]:
    """Why checkov's Lambda dead-letter-queue, reserved-concurrency and VPC checks do not fit a function that backs
    a CloudFormation custom resource (the VPC reason depends on what the function talks to)."""
    return {
        "CKV_AWS_116": "CloudFormation invokes this custom-resource function asynchronously, once per stack "
                       "operation, and waits for its answer. The handler answers on every path (a watchdog answers "
                       "before the Lambda timeout) and ServiceTimeout bounds the wait otherwise; a dead-letter queue "
                       "would keep an event that nothing can replay into a finished stack operation.",
        "CKV_AWS_115": "Only CloudFormation invokes this function, a few times in the stack's life. Reserved "
                       "concurrency would take capacity from the account's unreserved pool for nothing, and a small "
                       "reservation could throttle CloudFormation's own retry.",
        "CKV_AWS_117": vpc_reason,
    }
