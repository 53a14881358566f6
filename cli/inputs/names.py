"""Names by their services' own rules: HyperPod, CloudFormation, EKS, FSx, Kubernetes, images, S3.

The patterns are AWS's and Kubernetes' own (the package docstring lists the sources);
tests/cli/test_inputs.py compares them with botocore's models so they cannot drift.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

import click

from hpq.aws.s3 import validate_bucket_name
from hpq.cli.inputs.completion import aws_names
from hpq.cli.inputs.numbers import MAX_INSTANCES
from hpq.cli.inputs.text import NameOrArn, Pattern, Text, show
from hpq.errors import UsageError
from hpq.lifecycle.names import HYPERPOD_NAME_MAX, HYPERPOD_NAME_PATTERN, valid_hyperpod_name

# sagemaker ClusterArn.
HYPERPOD_ARN_RE = r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:cluster/[a-z0-9]{12}"
# sagemaker ClusterNodeId.
NODE_ID_RE = r"i-[a-f0-9]{8}(?:[a-f0-9]{9})?"
# cloudformation StackNameOrId: a name, or a stack ARN (its id).
STACK_NAME_RE = r"[a-zA-Z][-a-zA-Z0-9]*"
STACK_ARN_RE = r"arn:\b(aws|aws-us-gov|aws-cn)\b:[-a-zA-Z0-9:/._+]*"
STACK_NAME_MAX = 128
# eks ClusterName.
EKS_NAME_RE = r"[0-9A-Za-z][A-Za-z0-9\-_]*"
EKS_NAME_MAX = 100
# fsx FileSystemId, DNSName, LustreFileSystemMountName.
FSX_ID_RE = r"fs-[0-9a-f]{8,}"
FSX_DNS_RE = r"(fs|fc)i?-[0-9a-f]{8,}\.[a-z0-9.-]{4,253}"
FSX_MOUNT_NAME_RE = r"[A-Za-z0-9_-]{1,8}"
# Kubernetes: RFC 1123 label (namespaces) and DNS subdomain (most object names, e.g. a PVC).
K8S_LABEL_RE = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
K8S_SUBDOMAIN_RE = rf"{K8S_LABEL_RE}(\.{K8S_LABEL_RE})*"
# RFC 1035 label (a letter first): what the training and MPI operators accept as a job name.
K8S_DNS1035_RE = r"[a-z]([-a-z0-9]*[a-z0-9])?"
# hpq's job names become pod names with suffixes (<name>-launcher, <name>-worker-N): hpq keeps
# them to 42 characters so every derived name stays a 63-character label (manifests/render.py).
JOB_NAME_MAX = 42
# distribution/reference: [domain[:port]/]path-component(/path-component)*[:tag][@digest].
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
IMAGE_RE = (rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
            r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
IMAGE_NAME_MAX = 255
# useradd's default NAME_REGEX (shadow-utils), at most 32 characters.
USER_RE = r"[a-z_][-a-z0-9_]*\$?"
# Linux dev_valid_name (net/core/dev.c): 1-15 bytes, no '/', ':' or whitespace, not '.' or '..'.
IFACE_RE = r"[^/:\s]{1,15}"


STACK_NAME = Pattern("stack name", [STACK_NAME_RE],
                     "CloudFormation stack names have letters, digits and '-', starting with a letter",
                     STACK_NAME_MAX)


HYPERPOD_CLUSTER = NameOrArn("HyperPod cluster", HYPERPOD_NAME_PATTERN, HYPERPOD_NAME_MAX, HYPERPOD_ARN_RE,
                             "give a HyperPod cluster name (letters, digits and '-', 1-63 characters, starting "
                             "and ending with a letter or digit) or its ARN",
                             complete=functools.partial(aws_names, "cluster"))
STACK = NameOrArn("stack", STACK_NAME_RE, STACK_NAME_MAX, STACK_ARN_RE,
                  "give a CloudFormation stack name (letters, digits and '-', starting with a letter, at most 128) "
                  "or a stack ARN", complete=functools.partial(aws_names, "stack"))
INSTANCE_GROUP = Pattern("instance group", [HYPERPOD_NAME_PATTERN],
                         "HyperPod instance group names have letters, digits and '-', 1-63 characters", HYPERPOD_NAME_MAX)
EKS_CLUSTER = NameOrArn("cluster", EKS_NAME_RE, EKS_NAME_MAX, HYPERPOD_ARN_RE,
                        "give an EKS cluster name (letters, digits, '-' and '_', starting with a letter or digit, "
                        "1-100 characters) or a HyperPod cluster ARN")
NAMESPACE = Pattern("namespace", [K8S_LABEL_RE],
                    "Kubernetes namespaces are lowercase letters, digits and '-', starting and ending with a "
                    "letter or digit, 1-63 characters", 63)
JOB_NAME = Pattern("name", [K8S_DNS1035_RE],
                   f"lowercase letters, digits and '-', starting with a letter and ending with a letter or digit, "
                   f"1-{JOB_NAME_MAX} characters (pod names append -launcher, -worker-N)", JOB_NAME_MAX)
CLAIM_NAME = Pattern("claim", [K8S_SUBDOMAIN_RE],
                     "a PersistentVolumeClaim name is lowercase letters, digits, '-' and '.', starting and "
                     "ending with a letter or digit, 1-253 characters", 253)
IMAGE = Pattern("image", [IMAGE_RE],
                "expected a container image reference like public.ecr.aws/hpc-cloud/nccl-tests:latest or "
                "123456789012.dkr.ecr.us-west-2.amazonaws.com/nccl-tests:2.23", IMAGE_NAME_MAX)
FSX_ID = Pattern("FSx filesystem id", [FSX_ID_RE], "expected fs- and hex digits, e.g. fs-0123456789abcdef0", 21, 11)
FSX_DNS = Pattern("FSx DNS name", [FSX_DNS_RE],
                  "expected the filesystem's DNS name, e.g. fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
                  275, 16)
FSX_MOUNT_NAME = Pattern("FSx mount name", [FSX_MOUNT_NAME_RE],
                         "1-8 letters, digits, '_' or '-' (stack output FsxMountName)", 8)
USER = Pattern("user", [USER_RE], "a Linux user name: lowercase letters, digits, '_' and '-', at most 32", 32)
class Iface(Pattern):
    """A Linux interface name as dev_valid_name counts it: bytes, not characters."""

    def __init__(self) -> None:
        super().__init__("interface", [IFACE_RE], "a Linux interface name: 1-15 bytes without '/', ':' or spaces, "
                         "not '.' or '..'")

    def check(self, value: str) -> str | None:
        if value in (".", "..") or len(value.encode("utf-8", "surrogateescape")) > 15:
            return f"is invalid: {self.rule}"
        return super().check(value)


IFACE = Iface()
HOST = Pattern("host", [r"[^\s'\"`$;|&<>]+"], "a host name or SSM target without spaces or shell characters", 253)


# An absolute path inside the container image, without spaces (the launcher's command is a word list).
IMAGE_PATH = Pattern("path", [r"/[^\s]*"], "give an absolute path in the image, e.g. /opt/amazon/openmpi/bin/mpirun",
                     4096)


class NodeRef(Text):
    """``--node``: a 0-based index within the group, or a HyperPod node (instance) id."""

    name = "node"

    def __init__(self) -> None:
        super().__init__("node")

    def check(self, value: str) -> str | None:
        if value.isdigit() and value.isascii():
            return None if int(value) < MAX_INSTANCES else f"is past the largest group ({MAX_INSTANCES} nodes)"
        if re.fullmatch(NODE_ID_RE, value):
            return None
        return "is neither a 0-based index (0, 1, ...) nor an instance id like i-0123456789abcdef0"


NODE = NodeRef()


class Bucket(Text):
    """An S3 bucket name by S3's naming rules (hpq.aws.s3.validate_bucket_name)."""

    name = "bucket"

    def __init__(self) -> None:
        super().__init__("bucket")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        value = super().convert(value, param, ctx)
        try:
            return validate_bucket_name(value)
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


BUCKET = Bucket()


def check_cluster_name_for_stack(stack_name: str, params: Iterable[str]) -> None:
    """``hpq deploy``: the stack name is also the HyperPod cluster name unless ClusterName is given."""
    if any(p.partition("=")[0] == "ClusterName" for p in params):
        return
    if not valid_hyperpod_name(stack_name):
        raise UsageError(f"--stack-name {show(stack_name)} is also the HyperPod cluster name, which must be 1-63 "
                         "letters, digits and '-': shorten it or pass --param ClusterName=NAME")
