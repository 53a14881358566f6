"""The artifact bucket: name checks, region check, and the versioned upload of templates + node bundle.

Everything a deploy needs lives under one key prefix ``hpq/<version>-<content hash>/`` so a
re-deploy of changed code gets a new prefix (CloudFormation sees a new TemplateURL and HyperPod
new lifecycle files) while re-uploading identical content is a no-op.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from hpq.aws.session import AccessDenied, NotFound, aws_errors, error_code
from hpq.errors import OperationFailed, UsageError

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP_RE = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


def validate_bucket_name(name: str) -> str:
    """S3 bucket naming rules, checked locally so a typo exits 2 before any AWS call."""
    if name.startswith("s3://"):
        raise UsageError(f"give the bucket name, not a URL: {name[5:].split('/')[0]!r}")
    problem = ""
    if not 3 <= len(name) <= 63:
        problem = "must be 3-63 characters"
    elif not _BUCKET_RE.match(name):
        problem = "use lowercase letters, digits, '.' and '-', starting and ending with a letter or digit"
    elif ".." in name or ".-" in name or "-." in name:
        problem = "no adjacent '.', '.-' or '-.'"
    elif _IP_RE.match(name):
        problem = "must not look like an IP address"
    elif name.startswith(("xn--", "sthree-")) or name.endswith(("-s3alias", "--ol-s3", "--x-s3")):
        problem = "reserved prefix or suffix"
    if problem:
        raise UsageError(f"invalid S3 bucket name {name!r}: {problem}")
    return name


def bucket_region(s3: Any, bucket: str) -> str:
    """The bucket's region; one-line errors for missing or forbidden buckets."""
    import botocore.exceptions

    try:
        s3.head_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError as exc:
        code = error_code(exc)
        if code in ("404", "NoSuchBucket", "NotFound"):
            raise NotFound(
                f"bucket {bucket!r} does not exist; create it with `aws s3 mb s3://{bucket} --region REGION`"
            ) from None
        if code in ("403", "AccessDenied", "Forbidden"):
            raise AccessDenied(f"access denied to bucket {bucket!r} (s3:ListBucket); it may belong to another account") from None
        if code == "301":
            region = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("x-amz-bucket-region")
            if region:
                return str(region)
        with aws_errors(f"s3:HeadBucket {bucket}"):
            raise
    with aws_errors(f"s3:GetBucketLocation {bucket}"):
        loc = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
    if not loc:
        return "us-east-1"
    return "eu-west-1" if loc == "EU" else str(loc)


def check_bucket(s3: Any, bucket: str, region: str) -> None:
    """The bucket must exist and be in the stack's region (CloudFormation reads TemplateURLs cross-region,
    but HyperPod lifecycle S3 URIs must be in the cluster's region)."""
    validate_bucket_name(bucket)
    actual = bucket_region(s3, bucket)
    if actual != region:
        raise UsageError(f"bucket {bucket!r} is in {actual}, not {region}: pass --region {actual} or use a bucket in {region}")


def dns_suffix(region: str) -> str:
    return "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"


def object_url(bucket: str, region: str, key: str) -> str:
    """The https URL CloudFormation accepts as a TemplateURL (path style for dotted names: TLS-safe)."""
    quoted = urllib.parse.quote(key)
    if "." in bucket:
        return f"https://s3.{region}.{dns_suffix(region)}/{bucket}/{quoted}"
    return f"https://{bucket}.s3.{region}.{dns_suffix(region)}/{quoted}"


@dataclass
class Upload:
    """What a release consists of: key -> bytes, plus which keys were actually written."""

    objects: dict[str, bytes] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # absent or different, not put (a check only: put=False)
    versions: dict[str, str] = field(default_factory=dict)  # key -> VersionId PutObject answered (versioned buckets)


def content_hash(files: dict[str, bytes]) -> str:
    """Stable hash of (relative name, bytes) pairs: identical content, identical prefix."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0")
        digest.update(hashlib.sha256(files[name]).digest())
    return digest.hexdigest()[:12]


def upload_objects(s3: Any, bucket: str, objects: dict[str, bytes], on_progress: Any = None,
                   put: bool = True) -> Upload:
    """Put each object unless an object with the same MD5 is already there (idempotent re-runs); ``put=False``
    only checks, listing what is absent or different as ``missing``.

    ``on_progress(done, total, key, upload)`` after each object: ``upload.written`` and ``upload.skipped`` say
    how many were put and how many were already there, so progress tells the two apart."""
    import botocore.exceptions

    result = Upload(objects=dict(objects))
    for i, key in enumerate(sorted(objects), 1):
        body = objects[key]
        md5 = hashlib.md5(body, usedforsecurity=False).hexdigest()
        try:
            head = s3.head_object(Bucket=bucket, Key=key)
            if head.get("ETag", "").strip('"') == md5:
                result.skipped.append(key)
                if on_progress:
                    on_progress(i, len(objects), key, result)
                continue
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) not in ("404", "NoSuchKey", "NotFound"):
                with aws_errors(f"s3:GetObject s3://{bucket}/{key}"):
                    raise
        if not put:
            result.missing.append(key)
            if on_progress:
                on_progress(i, len(objects), key, result)
            continue
        ctype = "application/json" if key.endswith(".json") else "application/octet-stream"
        with aws_errors(f"s3:PutObject s3://{bucket}/{key}"):
            put = s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType=ctype)
        result.written.append(key)
        if put.get("VersionId"):
            result.versions[key] = put["VersionId"]
        if on_progress:
            on_progress(i, len(objects), key, result)
    return result


def empty_bucket(s3: Any, bucket: str) -> int:
    """Delete every object version and delete marker (a versioned bucket otherwise blocks deletion)."""
    deleted = 0
    paginator = s3.get_paginator("list_object_versions")
    with aws_errors(f"s3:DeleteObjectVersion s3://{bucket}"):
        for page in paginator.paginate(Bucket=bucket):
            batch = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for kind in ("Versions", "DeleteMarkers")
                for v in page.get(kind, []) or []
            ]
            for start in range(0, len(batch), 1000):
                chunk = batch[start:start + 1000]
                # DeleteObjects answers 200 even when some keys fail: those come back under Errors.
                errors = s3.delete_objects(Bucket=bucket, Delete={"Objects": chunk, "Quiet": True}).get("Errors") or []
                deleted += len(chunk) - len(errors)
                if errors:
                    first = errors[0]
                    raise OperationFailed(
                        f"could not delete {len(errors)} object version(s) in s3://{bucket}, e.g. "
                        f"{first.get('Key')}: {first.get('Code')} {first.get('Message', '')}".rstrip()
                    )
    return deleted
