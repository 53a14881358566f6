"""Small helpers shared by the stack modules: partition-aware ARNs, tags, parameters, handler code.

Kept here so no stack module reaches into another one; each stack only talks to
the others through its parameters and outputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from troposphere import Output, Parameter, Ref, Sub, Tags, Template

from hpq.lifecycle import names

HANDLER_DIR = Path(__file__).resolve().parent / "handlers"
# CloudFormation zips inline code itself; the zipped package may not exceed 4 MB (the older limit
# was 4096 characters). A template body fetched from S3 may not exceed 1 MB, which binds first.
ZIPFILE_MAX_BYTES = 1_000_000

LAMBDA_RUNTIME = "python3.12"
# The one Slurm partition of the worker group: HyperPod's API-driven Slurm configuration puts the workers
# in it (ClusterSlurmConfig.PartitionNames, at most one), and hpq-cluster.json tells the nodes its name.
# "dev" is the partition HyperPod's agent defines by default and AWS's samples use
# (awslabs/awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/README.md, partition_name "dev").
SLURM_PARTITION = "dev"
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
CLUSTER_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
BUCKET_NAME_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
ROLE_ARN_PATTERN = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/.+$"
CLUSTER_NAME_HELP = "1-63 letters, digits and hyphens; starts with a letter or digit."


def cluster_name_param(t: Template) -> Ref:
    return param(
        t, "ClusterName", "HyperPod cluster name (also tags FSx for exact-match discovery).",
        AllowedPattern=CLUSTER_NAME_PATTERN, ConstraintDescription=CLUSTER_NAME_HELP,
        MinLength=1, MaxLength=63,
    )
