"""Every command-line value hpq accepts, checked in one place before any AWS call or file write.

Each check is a click parameter type (or a small function for checks that span several
options), so a bad value ends as ``hpq: error: Invalid value for 'X': ...`` with exit 2 before
the command body runs: no credentials lookup, no network, nothing written.

The name rules are AWS's and Kubernetes' own, not guesses:
- HyperPod (SageMaker API): ``ClusterName``, ``ClusterNameOrArn``, ``ClusterNodeId``,
  ``ClusterInstanceGroupName``, ``ClusterInstanceCount`` and ``ClusterEbsVolumeConfig`` shapes of
  botocore's sagemaker service model (``botocore/data/sagemaker/*/service-2.json``);
- CloudFormation: ``StackNameOrId`` in botocore's cloudformation model, and the CreateStack
  rule "alphanumeric characters and hyphens, starting with a letter, at most 128 characters"
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html);
- EKS: ``ClusterName`` in botocore's eks model (1-100 characters);
- FSx: ``FileSystemId``, ``DNSName``, ``LustreFileSystemMountName``, ``StorageCapacity`` in botocore's fsx model;
- Kubernetes object names: RFC 1123 labels and DNS subdomains
  (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/);
- container image references: the grammar of github.com/distribution/reference (regexp.go);
- regions: botocore's own endpoint data (``endpoints.json``), read locally.
tests/test_inputs.py compares these patterns with botocore's models so they cannot drift.
"""

from __future__ import annotations

import functools
import math
import os
import re
import shlex
import stat
from collections.abc import Callable, Iterable
from typing import Any

import click

from hpq.errors import UsageError

# --------------------------------------------------------------------------- reference patterns

# sagemaker ClusterName / EntityName (also ClusterInstanceGroupName): 1-63 characters.
HYPERPOD_NAME_RE = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
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
FSX_DNS_RE = r"(fs|fc)i?-[0-9a-f]{8,}\..{4,253}"
FSX_MOUNT_NAME_RE = r"[A-Za-z0-9_-]{1,8}"
FSX_CAPACITY_MAX = 2147483647  # fsx StorageCapacity
MAX_INSTANCES = 6758  # sagemaker ClusterInstanceCount
EBS_GIB_MAX = 16384  # sagemaker ClusterEbsVolumeConfig.VolumeSizeInGB
# Kubernetes: RFC 1123 label (namespaces) and DNS subdomain (most object names, e.g. a PVC).
K8S_LABEL_RE = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
K8S_SUBDOMAIN_RE = rf"{K8S_LABEL_RE}(\.{K8S_LABEL_RE})*"
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

# Commands that talk to AWS name the services they need; a region must be one botocore knows for each.
SERVICES_STACKS = ("cloudformation",)
SERVICES_DEPLOY = ("cloudformation", "s3", "ec2", "sagemaker")
SERVICES_PUBLISH = ("cloudformation", "s3")
SERVICES_NODES = ("sagemaker", "ssm")
SERVICES_EKS = ("eks", "sts")
SERVICES_QUOTAS = ("service-quotas", "sagemaker")


def show(value: object, limit: int = 100) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error line quotes what was given, not a megabyte of it."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'" + f" ({len(str(value))} characters)"


def _printable(value: str) -> str | None:
    """Why ``value`` cannot be a name at all (not UTF-8, control characters), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return "contains control characters"
    return None


class Text(click.ParamType):
    """A non-empty string of printable UTF-8; subclasses add a pattern."""

    name = "text"

    def __init__(self, what: str = "value", allow_empty: bool = False) -> None:
        self.what = what
        self.allow_empty = allow_empty

    def check(self, value: str) -> str | None:
        """Why ``value`` is refused (one clause), or None when it is fine."""
        return None

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        bad = _printable(value)
        if bad is None and not value.strip() and not (self.allow_empty and value == ""):
            bad = "is empty"
        if bad is None and value:
            bad = self.check(value)
        if bad:
            self.fail(f"{self.what} {show(value)} {bad}", param, ctx)
        return value


class Pattern(Text):
    """A name that must match a documented pattern (full match) and length."""

    def __init__(self, what: str, patterns: Iterable[str], rule: str, max_len: int | None = None,
                 min_len: int = 1) -> None:
        super().__init__(what)
        self.patterns = [re.compile(p) for p in patterns]
        self.rule = rule
        self.max_len = max_len
        self.min_len = min_len

    def check(self, value: str) -> str | None:
        if self.max_len is not None and not self.min_len <= len(value) <= self.max_len:
            return f"must be {self.min_len}-{self.max_len} characters ({self.rule})"
        if not any(p.fullmatch(value) for p in self.patterns):
            return f"is invalid: {self.rule}"
        return None


STACK_NAME = Pattern("stack name", [STACK_NAME_RE],
                     "CloudFormation stack names have letters, digits and '-', starting with a letter",
                     STACK_NAME_MAX)




class NameOrArn(Pattern):
    """A name (its own pattern and length) or, starting with ``arn:``, an ARN of a fixed pattern.

    The length is checked on its own: the repetition counts in AWS's patterns do not bound it
    ("a-b" is one repetition of ``(-*[a-zA-Z0-9])``).
    """

    def __init__(self, what: str, name_re: str, name_max: int, arn_re: str, rule: str) -> None:
        super().__init__(what, [name_re], rule, name_max)
        self.arn = re.compile(arn_re)

    def check(self, value: str) -> str | None:
        if value.startswith("arn:"):
            return None if self.arn.fullmatch(value) else f"is not a valid ARN ({self.rule})"
        return super().check(value)


HYPERPOD_CLUSTER = NameOrArn("HyperPod cluster", HYPERPOD_NAME_RE, 63, HYPERPOD_ARN_RE,
                             "give a HyperPod cluster name (letters, digits and '-', 1-63 characters, starting "
                             "and ending with a letter or digit) or its ARN")
STACK = NameOrArn("stack", STACK_NAME_RE, STACK_NAME_MAX, STACK_ARN_RE,
                  "give a CloudFormation stack name (letters, digits and '-', starting with a letter, at most 128) "
                  "or a stack ARN")
INSTANCE_GROUP = Pattern("instance group", [HYPERPOD_NAME_RE],
                         "HyperPod instance group names have letters, digits and '-', 1-63 characters", 63)
EKS_CLUSTER = NameOrArn("cluster", EKS_NAME_RE, EKS_NAME_MAX, HYPERPOD_ARN_RE,
                        "give an EKS cluster name (letters, digits, '-' and '_', starting with a letter or digit, "
                        "1-100 characters) or a HyperPod cluster ARN")
NAMESPACE = Pattern("namespace", [K8S_LABEL_RE],
                    "Kubernetes namespaces are lowercase letters, digits and '-', starting and ending with a "
                    "letter or digit, 1-63 characters", 63)
JOB_NAME = Pattern("name", [K8S_LABEL_RE],
                   f"lowercase letters, digits and '-', starting and ending with a letter or digit, "
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
IFACE = Pattern("interface", [IFACE_RE], "a Linux interface name: 1-15 characters without '/', ':' or spaces")
HOST = Pattern("host", [r"[^\s'\"`$;|&<>]+"], "a host name or SSM target without spaces or shell characters", 253)


class NcclDebug(Text):
    """NCCL_DEBUG level (manifests.render.NCCL_DEBUG_LEVELS, any case) or 'off'."""

    name = "level"

    def __init__(self) -> None:
        super().__init__("NCCL_DEBUG level")

    def check(self, value: str) -> str | None:
        from hpq.manifests.render import NCCL_DEBUG_LEVELS

        if value.lower() == "off" or value.upper() in NCCL_DEBUG_LEVELS:
            return None
        return f"is not one of {', '.join(NCCL_DEBUG_LEVELS)} or off"


NCCL_DEBUG = NcclDebug()
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


class ShellWords(Text):
    """A string split like a shell would (quotes kept together); unbalanced quotes are refused."""

    name = "words"

    def __init__(self, what: str = "value", allow_empty: bool = True) -> None:
        super().__init__(what, allow_empty=allow_empty)

    def check(self, value: str) -> str | None:
        try:
            shlex.split(value)
        except ValueError as exc:
            return f"cannot be split into words ({exc})"
        return None


class Variant(Text):
    name = "variant"

    def __init__(self) -> None:
        super().__init__("variant")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from hpq.lifecycle.names import VARIANTS

        value = super().convert(value, param, ctx)
        if isinstance(value, str) and value not in VARIANTS:  # the wording every hpq command uses
            self.fail(f"unknown variant {show(value)}; choose one of: {', '.join(VARIANTS)}", param, ctx)
        return value


class Size(Text):
    name = "size"

    def __init__(self) -> None:
        super().__init__("size")

    def check(self, value: str) -> str | None:
        from hpq.lifecycle.names import SIZES

        return None if value in SIZES else f"is unknown; choose one of: {', '.join(SIZES)}"


VARIANT = Variant()
SIZE = Size()


class Bucket(Text):
    """An S3 bucket name by S3's naming rules (hpq.cli.aws.s3.validate_bucket_name)."""

    name = "bucket"

    def __init__(self) -> None:
        super().__init__("bucket")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        value = super().convert(value, param, ctx)
        from hpq.cli.aws.s3 import validate_bucket_name

        try:
            return validate_bucket_name(value)
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


BUCKET = Bucket()


class InstanceType(Text):
    """A type from hpq's catalog (``p5.48xlarge`` or ``ml.p5.48xlarge``); returns the ``ml.`` name."""

    name = "instance-type"

    def __init__(self, kind: str | None = None) -> None:
        super().__init__("instance type")
        self.kind = kind  # None, "accelerated" or "cpu"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        value = super().convert(value, param, ctx)
        if not isinstance(value, str):
            return value
        from hpq.lifecycle import catalog

        try:
            entry = catalog.lookup(value)
        except catalog.UnknownInstanceType as exc:
            self.fail(str(exc), param, ctx)
        if self.kind == "accelerated" and not entry.is_accelerated:
            self.fail(f"{entry.name} has no GPU or Trainium accelerator (e.g. ml.g5.16xlarge, ml.p5.48xlarge)",
                      param, ctx)
        if self.kind == "cpu" and entry.is_accelerated:
            self.fail(f"{entry.name} is an accelerated type; a controller is a CPU type such as ml.m5.xlarge",
                      param, ctx)
        return entry.name


INSTANCE_TYPE = InstanceType()
ACCELERATED_TYPE = InstanceType("accelerated")
CPU_TYPE = InstanceType("cpu")


def _max_accelerators() -> int:
    from hpq.lifecycle import catalog

    return max(e.accelerator_count for e in catalog.CATALOG.values())


class Count(click.ParamType):
    """A whole number in a range; the error says what it counts and the range."""

    name = "integer"

    def __init__(self, lo: int, hi: int | Callable[[], int], what: str) -> None:
        self.lo, self._hi, self.what = lo, hi, what

    @property
    def hi(self) -> int:
        return self._hi() if callable(self._hi) else self._hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, bool):
            self.fail(f"{show(value)} is not a whole number ({self.what})", param, ctx)
        if isinstance(value, str):
            if not re.fullmatch(r"\s*[+-]?[0-9]{1,30}\s*", value):
                self.fail(f"{show(value)} is not a whole number ({self.what})", param, ctx)
            value = int(value)
        if not isinstance(value, int):
            self.fail(f"{show(value)} is not a whole number ({self.what})", param, ctx)
        if not self.lo <= value <= self.hi:
            self.fail(f"{value} is out of range {self.lo}-{self.hi} ({self.what})", param, ctx)
        return value


NODES = Count(1, MAX_INSTANCES, "nodes")
GPUS = Count(1, _max_accelerators, "GPUs or Neuron devices per node")
INSTANCE_COUNT = Count(1, MAX_INSTANCES, "instances")
PORT = Count(1, 65535, "TCP port")
TIMEOUT = Count(1, 7 * 24 * 3600, "seconds")


class FsxCapacity(Count):
    """FSx for Lustre SSD capacity: 1200 GiB, 2400 GiB, then increments of 2400 GiB (CreateFileSystem
    StorageCapacity, https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html)."""

    def __init__(self, allow_none: bool) -> None:
        super().__init__(0 if allow_none else 1200, FSX_CAPACITY_MAX,
                         "GiB of FSx for Lustre: 1200, 2400 or a multiple of 2400" + ("; 0 for none" if allow_none else ""))

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number and number != 1200 and number % 2400:
            self.fail(f"{number} is not a valid size ({self.what})", param, ctx)
        return number


FSX_GIB = FsxCapacity(allow_none=True)
FSX_CAPACITY = FsxCapacity(allow_none=False)
EBS_GIB = Count(1, EBS_GIB_MAX, "GiB per node")


class Seconds(click.ParamType):
    """A finite, positive number of seconds (``nan``, ``inf`` and 0 are refused)."""

    name = "seconds"

    def __init__(self, lo: float = 0.01, hi: float = 3600.0) -> None:
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{show(value)} is not a number of seconds", param, ctx)
        if not math.isfinite(number) or not self.lo <= number <= self.hi:
            self.fail(f"{show(value)} must be a number of seconds between {self.lo:g} and {self.hi:g}", param, ctx)
        return number


POLL_SECONDS = Seconds()


class InputFile(click.ParamType):
    """A regular file to read (or '-' for stdin): never a directory, FIFO, socket or device, which
    would fail late or block forever; ``text`` also requires UTF-8 content."""

    name = "file"

    def __init__(self, allow_dash: bool = False, text: bool = False, max_bytes: int | None = None,
                 what: str = "file") -> None:
        self.allow_dash, self.text, self.max_bytes, self.what = allow_dash, text, max_bytes, what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        if value == "-" and self.allow_dash:
            return value
        bad = _printable(value)
        if bad or not value:
            self.fail(f"{self.what} path {show(value)} {bad or 'is empty'}", param, ctx)
        path = os.path.expanduser(value)
        try:
            st = os.stat(path)  # stat never blocks, even on a FIFO
        except OSError as exc:
            self.fail(f"cannot read {show(value)}: {exc.strerror}", param, ctx)
        if not stat.S_ISREG(st.st_mode):
            self.fail(f"{show(value)} is {_file_kind(st.st_mode)}, not a regular file", param, ctx)
        if self.max_bytes is not None and st.st_size > self.max_bytes:
            self.fail(f"{show(value)} is {st.st_size} bytes; at most {self.max_bytes} are accepted", param, ctx)
        try:
            with open(path, "rb") as fh:
                data = fh.read() if self.text else fh.read(0)
        except OSError as exc:
            self.fail(f"cannot read {show(value)}: {exc.strerror}", param, ctx)
        if self.text:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.fail(f"{show(value)} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); "
                          f"give a source file", param, ctx)
        return value


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a regular file"


class OutputDir(click.ParamType):
    """A folder to write into: a non-empty path that is not an existing file."""

    name = "dir"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        bad = _printable(value)
        if bad or not value.strip():
            self.fail(f"output folder {show(value)} {bad or 'is empty'} (use -o . for the current folder)",
                      param, ctx)
        path = os.path.expanduser(value)
        if os.path.lexists(path) and not os.path.isdir(path):
            self.fail(f"{show(value)} exists and is not a folder", param, ctx)
        return value


class WritableFile(click.ParamType):
    """A file hpq may create or update (e.g. known hosts): not empty, and not a folder or a FIFO."""

    name = "file"

    def __init__(self, what: str = "file") -> None:
        self.what = what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        bad = _printable(value)
        if bad or not value.strip():
            self.fail(f"{self.what} path {show(value)} {bad or 'is empty'}", param, ctx)
        path = os.path.expanduser(value)
        if os.path.lexists(path):
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:
                self.fail(f"cannot use {show(value)}: {exc.strerror}", param, ctx)
            if not stat.S_ISREG(mode):
                self.fail(f"{show(value)} is {_file_kind(mode)}, not a regular file", param, ctx)
        return value


class ExistingDir(click.ParamType):
    name = "dir"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        bad = _printable(value)
        if bad or not value.strip():
            self.fail(f"folder {show(value)} {bad or 'is empty'}", param, ctx)
        if not os.path.isdir(os.path.expanduser(value)):
            what = "does not exist" if not os.path.lexists(value) else "is not a folder"
            self.fail(f"{show(value)} {what}", param, ctx)
        return value


class KeyValue(Text):
    """``KEY=VALUE``; the key is a CloudFormation parameter name (letters and digits)."""

    name = "key=value"

    def __init__(self) -> None:
        super().__init__("parameter", allow_empty=False)

    def check(self, value: str) -> str | None:
        key, sep, _ = value.partition("=")
        if not sep:
            return "is not KEY=VALUE"
        if not re.fullmatch(r"[A-Za-z0-9]{1,255}", key):
            return "has an invalid KEY: parameter names are letters and digits"
        return None


KEY_VALUE = KeyValue()


def unique_keys(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Callback for a repeatable KEY=VALUE option: the same KEY twice is a mistake, not 'last wins'."""
    seen: dict[str, str] = {}
    for pair in values or ():
        key = pair.partition("=")[0]
        if key in seen:
            raise click.BadParameter(f"{key} is given twice ({show(seen[key])} and {show(pair)}); give it once",
                                     ctx=ctx, param=param)
        seen[key] = pair
    return values


def non_empty_command(ctx: click.Context, param: click.Parameter, words: tuple[str, ...]) -> tuple[str, ...]:
    """Callback for a remote COMMAND: at least one non-blank word, all printable UTF-8."""
    for word in words:
        bad = _printable(word.replace("\n", " ").replace("\t", " "))
        if bad:
            raise click.BadParameter(f"{show(word)} {bad}", ctx=ctx, param=param)
    if not any(w.strip() for w in words):
        raise click.BadParameter("the command is empty", ctx=ctx, param=param)
    return words


def refuse_repeated_options(command: click.Command) -> click.Command:
    """Make ``command`` (and a group's subcommands) refuse a single-value option given twice.

    click keeps the last of ``--region a --region b`` silently; which one the user meant is a guess.
    Repeatable options (``--param``) and flags are left alone.
    """
    if getattr(command, "_hpq_strict", False):
        return command
    command._hpq_strict = True  # type: ignore[attr-defined]
    if isinstance(command, click.Group):  # a group's own parsing may rewrite its args (hpq rehearse): leave it
        for sub in command.commands.values():
            refuse_repeated_options(sub)
        return command
    original = command.parse_args

    def parse_args(ctx: click.Context, args: list[str]) -> list[str]:
        _, _, order = command.make_parser(ctx).parse_args(args=list(args))
        seen: set[str | None] = set()
        for param in order:
            if isinstance(param, click.Option) and not (param.multiple or param.count or param.is_flag):
                if param.name in seen:
                    raise click.UsageError(f"{param.opts[-1]} is given more than once; give it once", ctx)
                seen.add(param.name)
        return original(ctx, args)

    command.parse_args = parse_args  # type: ignore[method-assign]
    return command


# --------------------------------------------------------------------------- regions and endpoints


@functools.lru_cache(maxsize=1)
def known_regions() -> frozenset[str]:
    """Every region in botocore's endpoint data, all partitions (read from disk, no network)."""
    import botocore.loaders

    data = botocore.loaders.create_loader().load_data("endpoints")
    return frozenset(r for part in data.get("partitions", []) for r in part.get("regions", {}))


@functools.lru_cache(maxsize=32)
def service_regions(service: str) -> frozenset[str]:
    """Regions botocore knows an endpoint for ``service`` in, all partitions (empty: a global service)."""
    import botocore.session

    session = botocore.session.get_session()
    out: set[str] = set()
    for partition in session.get_available_partitions():
        out.update(session.get_available_regions(service, partition_name=partition))
    return frozenset(out)


class Region(Text):
    """A region botocore knows (e.g. us-west-2); which services it has is checked per command."""

    name = "region"

    def __init__(self) -> None:
        super().__init__("region")

    def check(self, value: str) -> str | None:
        return region_problem(value, ())


REGION = Region()


def region_problem(region: str, services: Iterable[str]) -> str | None:
    """Why ``region`` cannot serve ``services`` according to botocore's endpoint data, or None."""
    if not re.fullmatch(r"[a-z]{2}(-[a-z0-9]+)+-[0-9]+", region):
        return "is not an AWS region name (like us-west-2)"
    if region not in known_regions():
        return "is not a region this botocore knows (upgrade botocore if the region is new)"
    for service in services:
        regions = service_regions(service)
        if regions and region not in regions:
            return f"has no {service} endpoint in botocore's endpoint data"
    return None


def endpoint_problem(url: str) -> str | None:
    """Why an endpoint URL cannot work, or None (botocore itself raises ValueError at client creation)."""
    from urllib.parse import urlsplit

    from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url

    if _printable(url) or not url.strip():
        return "is empty or not printable UTF-8"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:5000"
    if not (is_valid_endpoint_url(url) or is_valid_ipv6_endpoint_url(url)):
        return "is not a URL botocore accepts"
    return None


def check_endpoint_environment(environ: dict[str, str] | None = None) -> None:
    """AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> must be URLs botocore can use."""
    env = os.environ if environ is None else environ
    for key in sorted(env):
        if key == "AWS_ENDPOINT_URL" or key.startswith("AWS_ENDPOINT_URL_"):
            bad = endpoint_problem(env[key])
            if bad:
                raise UsageError(f"{key}={show(env[key])} {bad}")


# Settings botocore reads from the environment, with the values it accepts (botocore/configprovider.py,
# https://docs.aws.amazon.com/sdkref/latest/guide/settings-reference.html). A bad one would otherwise
# surface as a confusing error at the first client or request.
_ENV_CHOICES = {
    "AWS_RETRY_MODE": ("legacy", "standard", "adaptive"),
    "AWS_STS_REGIONAL_ENDPOINTS": ("legacy", "regional"),
    "AWS_USE_FIPS_ENDPOINT": ("true", "false"),
    "AWS_USE_DUALSTACK_ENDPOINT": ("true", "false"),
}


def check_aws_environment(environ: dict[str, str] | None = None) -> None:
    """Endpoints, retry settings and the files botocore will read, checked before any client exists."""
    env = os.environ if environ is None else environ
    check_endpoint_environment(env)
    if env.get("AWS_MAX_ATTEMPTS", "").strip():
        value = env["AWS_MAX_ATTEMPTS"]
        if not re.fullmatch(r"\s*[0-9]{1,4}\s*", value) or int(value) < 1:
            raise UsageError(f"AWS_MAX_ATTEMPTS={show(value)} must be a whole number of attempts, at least 1")
    for key, allowed in _ENV_CHOICES.items():
        value = env.get(key)
        if value and value.strip().lower() not in allowed:
            raise UsageError(f"{key}={show(value)} must be one of: {', '.join(allowed)}")
    for key in ("AWS_CA_BUNDLE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        value = env.get(key)
        if not value:
            continue
        path = os.path.expanduser(value)
        must_exist = key == "AWS_CA_BUNDLE"  # a missing config file is just an empty one
        if not os.path.lexists(path):
            if must_exist:
                raise UsageError(f"{key}={show(value)} does not exist")
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise UsageError(f"{key}={show(value)}: {exc.strerror}") from None
        if not stat.S_ISREG(mode):
            raise UsageError(f"{key}={show(value)} is {_file_kind(mode)}, not a regular file")


def resolve_region(region: str | None, profile: str | None) -> str | None:
    """The region a command will use: --region, AWS_REGION, AWS_DEFAULT_REGION, then the profile's config.

    AWS_REGION is what the AWS SDKs and CLI v2 read first; boto3 alone reads only AWS_DEFAULT_REGION.
    """
    if region:
        return region
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(key):
            return os.environ[key]
    import botocore.exceptions
    import botocore.session

    try:
        return botocore.session.Session(profile=profile or None).get_config_variable("region") or None
    except botocore.exceptions.ProfileNotFound:
        name = profile or os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE")
        raise UsageError(f"AWS profile {show(name)} not found; list them with `aws configure list-profiles`") from None


def check_profile(profile: str | None) -> None:
    """The AWS config files must parse; --profile (or AWS_PROFILE) must name a profile in them."""
    import botocore.exceptions
    import botocore.session

    name = profile if profile is not None else (os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE"))
    if name is not None:
        bad = _printable(name)
        if bad or not name.strip():
            raise UsageError(f"AWS profile {show(name)} {bad or 'is empty'}")
    try:
        profiles = botocore.session.Session(profile=None).available_profiles
    except botocore.exceptions.ConfigParseError as exc:
        raise UsageError(f"{exc}: fix or move it (see `aws configure`)") from None
    # botocore treats a missing "default" profile as empty, any other missing profile as an error.
    if name is not None and name != "default" and name not in profiles:
        raise UsageError(f"AWS profile {show(name)} not found; list them with `aws configure list-profiles`")


def check_aws_inputs(region: str | None, profile: str | None, services: Iterable[str]) -> str | None:
    """Everything about reaching AWS that can be checked offline; returns the region to use, if any."""
    check_aws_environment()
    check_profile(profile)
    chosen = resolve_region(region, profile)
    if not chosen:  # some paths need no AWS at all (hpq remote --proxy-command); client() insists later
        return None
    source = "--region" if region else next((k for k in ("AWS_REGION", "AWS_DEFAULT_REGION")
                                             if os.environ.get(k) == chosen), "the profile's region")
    bad = region_problem(chosen, services)
    if bad:
        raise UsageError(f"{source} {show(chosen)} {bad}")
    return chosen


def check_cluster_name_for_stack(stack_name: str, params: Iterable[str]) -> None:
    """``hpq deploy``: the stack name is also the HyperPod cluster name unless ClusterName is given."""
    if any(p.partition("=")[0] == "ClusterName" for p in params):
        return
    if len(stack_name) > 63 or not re.fullmatch(HYPERPOD_NAME_RE, stack_name):
        raise UsageError(f"--stack-name {show(stack_name)} is also the HyperPod cluster name, which must be 1-63 "
                         "letters, digits and '-': shorten it or pass --param ClusterName=NAME")
