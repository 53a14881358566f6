"""Custom resource for the lifecycle bucket (embedded verbatim as the Lambda's inline code).

Create/Update: copy the node bundle from the assets bucket into the lifecycle
prefix (so a console deploy of the published root needs nothing else), write hpq's
own node settings (hpq-cluster.json, the ClusterConfig property: a JSON object as a
string) next to it, and drop keys that left the bundle, a provisioning_parameters.json
of an older hpq among them (HyperPod reads that file and refuses it together with the
API-driven Slurm configuration). Delete: remove ALL object versions and delete markers, because a
versioned bucket that still holds any of them blocks stack deletion.

It ALWAYS answers CloudFormation: on success, on any exception, and shortly
before the Lambda timeout (otherwise the stack hangs for an hour).
Runs on the Lambda python3.12 runtime; boto3 comes with the runtime.
"""

import json
import logging
import threading
import time
import urllib.request

import boto3

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)

# Answer this long before the Lambda is killed; one response attempt is bounded well below it.
TIMEOUT_MARGIN_S = 15
RESPONSE_TIMEOUT_S = 10
MAX_REASON = 1000


class Responder:
    """Sends exactly one response to CloudFormation's pre-signed URL, whoever asks first."""

    def __init__(self, event):
        self.event = event
        self.lock = threading.Lock()
        self.sent = False

    def send(self, status, reason="", physical_id=None, data=None):
        with self.lock:
            if self.sent:
                return False
            self.sent = True
        event = self.event
        body = json.dumps({
            "Status": status,
            "Reason": (reason or status)[:MAX_REASON],
            "PhysicalResourceId": physical_id or event.get("PhysicalResourceId") or event["LogicalResourceId"],
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "NoEcho": False,
            "Data": data or {},
        }).encode("utf-8")
        req = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                     headers={"Content-Type": "", "Content-Length": str(len(body))})
        for attempt in range(3):
            if attempt:
                time.sleep(1)
            try:
                with urllib.request.urlopen(req, timeout=RESPONSE_TIMEOUT_S) as resp:
                    LOG.info("answered %s (HTTP %s)", status, resp.status)
                    return True
            except Exception as exc:  # keep trying: an unanswered stack hangs for an hour
                LOG.warning("response attempt %d failed: %s", attempt + 1, exc)
        return False


def _s3():
    return boto3.client("s3")


def copy_bundle(s3, source_bucket, source_prefix, bucket, dest_prefix):
    """Copy every object under source_prefix to dest_prefix; return the destination keys."""
    keys = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=source_bucket, Prefix=source_prefix):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(source_prefix):]
            if not rel or rel.endswith("/"):
                continue
            dest = dest_prefix + rel
            s3.copy({"Bucket": source_bucket, "Key": obj["Key"]}, bucket, dest)
            keys.append(dest)
    if not keys:
        raise RuntimeError(f"no node bundle under s3://{source_bucket}/{source_prefix} "
                           "(upload it first: hpq deploy or hpq publish)")
    return keys


def delete_objects(s3, bucket, objects):
    """DeleteObjects in batches of 1000 (the API's limit); raise if S3 refuses any of them."""
    for i in range(0, len(objects), 1000):
        resp = s3.delete_objects(Bucket=bucket, Delete={"Objects": objects[i:i + 1000], "Quiet": True})
        errors = resp.get("Errors", [])
        if errors:
            first = errors[0].get("Message", errors[0])
            raise RuntimeError(f"could not delete {len(errors)} objects from {bucket}: {first}")
    return len(objects)


def remove_stale(s3, bucket, dest_prefix, keep):
    """Delete current objects under dest_prefix that are not in keep (files removed from the bundle)."""
    keep = set(keep)
    stale = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=dest_prefix):
        stale.extend(o["Key"] for o in page.get("Contents", []) if o["Key"] not in keep)
    delete_objects(s3, bucket, [{"Key": k} for k in stale])
    return stale


def empty_bucket(s3, bucket):
    """Delete every object version and delete marker; a missing bucket counts as empty."""
    deleted = 0
    try:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            deleted += delete_objects(s3, bucket, [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])])
    except s3.exceptions.NoSuchBucket:
        LOG.info("bucket %s is already gone", bucket)
    return deleted


def cluster_config_body(raw):
    """The ClusterConfig property (a JSON object given as a string) as the file's text; refuses anything else."""
    try:
        doc = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        raise ValueError(f"ClusterConfig is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise ValueError("ClusterConfig must be a JSON object with a schema_version")
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def apply(event, s3):
    """Do the work for one request; return (physical id, data). Raises on failure."""
    props = event.get("ResourceProperties", {})
    bucket = props["BucketName"]
    if event["RequestType"] == "Delete":
        n = empty_bucket(s3, bucket)
        LOG.info("deleted %d versions and markers from %s", n, bucket)
        return bucket, {"Deleted": str(n)}
    dest_prefix = props.get("DestinationPrefix", "")
    keys = copy_bundle(s3, props["SourceBucket"], props["SourcePrefix"], bucket, dest_prefix)
    config_key = props.get("ClusterConfigKey")
    if config_key:
        body = cluster_config_body(props.get("ClusterConfig"))
        s3.put_object(Bucket=bucket, Key=config_key, Body=body.encode("utf-8"), ContentType="application/json")
        keys.append(config_key)
    stale = remove_stale(s3, bucket, dest_prefix, keys)
    LOG.info("copied %d objects into s3://%s/%s, removed %d stale", len(keys), bucket, dest_prefix, len(stale))
    return bucket, {"Objects": str(len(keys))}


def handler(event, context):
    LOG.info("request %s for %s", event.get("RequestType"), event.get("LogicalResourceId"))
    responder = Responder(event)
    physical = event.get("PhysicalResourceId") or event.get("ResourceProperties", {}).get("BucketName")
    remaining_s = context.get_remaining_time_in_millis() / 1000.0
    timer = threading.Timer(max(remaining_s - TIMEOUT_MARGIN_S, 1.0), responder.send,
                            args=("FAILED", "timed out before finishing", physical))
    timer.daemon = True
    timer.start()
    try:
        physical, data = apply(event, _s3())
        responder.send("SUCCESS", "", physical, data)
    except Exception as exc:
        LOG.exception("request failed")
        responder.send("FAILED", f"{type(exc).__name__}: {exc}", physical)
    finally:
        timer.cancel()
