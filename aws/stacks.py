"""CloudFormation stack operations: describe, walk nested stacks, create or update via change set, delete.

Pure boto3 calls with one-line errors; display lives in aws_progress, failure analysis in aws_events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hpq.aws import deploy_plan
from hpq.aws.s3 import empty_bucket
from hpq.aws.session import NotFound, aws_errors, client, error_code, error_message
from hpq.errors import OperationFailed
from hpq.lifecycle import names

CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
NESTED_TYPE = "AWS::CloudFormation::Stack"

FAILED_STATES = {
    "CREATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED", "UPDATE_FAILED",
    "UPDATE_ROLLBACK_COMPLETE", "UPDATE_ROLLBACK_FAILED", "IMPORT_ROLLBACK_COMPLETE", "IMPORT_ROLLBACK_FAILED",
}
_NO_CHANGE_MARKERS = ("didn't contain changes", "No updates are to be performed", "no changes")


def is_terminal(status: str) -> bool:
    return not status.endswith("_IN_PROGRESS")


def is_failed(status: str) -> bool:
    return status in FAILED_STATES or status.endswith("_FAILED")


@dataclass
class StackInfo:
    name: str
    stack_id: str
    status: str
    reason: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)
    created: Any = None
    updated: Any = None
    parent_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "id": self.stack_id, "status": self.status, "reason": self.reason,
            "outputs": self.outputs, "parameters": self.parameters,
            "created": str(self.created or ""), "updated": str(self.updated or ""),
        }


CLUSTER_NAME_PARAMETER = "ClusterName"  # every variant's root parameter, passed to AWS::SageMaker::Cluster


def cluster_name_of(parameters: dict[str, str], outputs: dict[str, str], stack_name: str = "") -> str:
    """The HyperPod cluster a root stack of hpq's creates, "" when it names none.

    The ``ClusterName`` parameter first: it is what the template passes to ``AWS::SageMaker::Cluster``
    (cfn/hyperpod.py), known from the moment the stack exists. The ``ClusterName`` output only without it
    (an emulator may answer a placeholder there: moto's rendition gives ``moto-HyperPodStack-Outputs.ClusterName``),
    then the stack name (``hpq deploy``'s default cluster name). Only a value that is a valid HyperPod cluster name
    is taken (CreateCluster's ClusterName pattern and length,
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateCluster.html): anything else is no
    cluster's name.
    """
    for value in (parameters.get(CLUSTER_NAME_PARAMETER), outputs.get(names.OUT_CLUSTER_NAME), stack_name):
        if value and names.valid_hyperpod_name(value):
            return value
    return ""


def describe(cfn: Any, stack: str) -> StackInfo:
    """One stack by name or id; a missing stack is a one-line NotFound (exit 2)."""
    import botocore.exceptions

    try:
        data = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    except botocore.exceptions.ClientError as exc:
        if error_code(exc) == "ValidationError" and "does not exist" in error_message(exc):
            raise NotFound(f"stack {stack!r} does not exist in this region (check --region)") from None
        with aws_errors(f"cloudformation:DescribeStacks {stack}"):
            raise
    return StackInfo(
        name=data["StackName"], stack_id=data["StackId"], status=data["StackStatus"],
        reason=data.get("StackStatusReason", "") or "",
        outputs={o["OutputKey"]: o.get("OutputValue", "") for o in data.get("Outputs") or []},
        parameters={p["ParameterKey"]: p.get("ParameterValue", "") for p in data.get("Parameters") or []},
        created=data.get("CreationTime"), updated=data.get("LastUpdatedTime"), parent_id=data.get("ParentId", "") or "",
    )


def exists(cfn: Any, stack: str) -> StackInfo | None:
    """The stack if it exists and is not DELETE_COMPLETE, else None."""
    try:
        info = describe(cfn, stack)
    except NotFound:
        return None
    return None if info.status == "DELETE_COMPLETE" else info


def list_resources(cfn: Any, stack: str) -> list[dict[str, Any]]:
    with aws_errors(f"cloudformation:ListStackResources {stack}"):
        out: list[dict[str, Any]] = []
        for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack):
            out.extend(page.get("StackResourceSummaries", []))
        return out


@dataclass
class StackNode:
    """One stack in the tree: its id, the logical path from the root, and its resources."""

    stack_id: str
    path: str
    resources: list[dict[str, Any]] = field(default_factory=list)


def stack_tree(cfn: Any, root: str, max_depth: int = 5, label: str | None = None) -> list[StackNode]:
    """Root and every nested stack (breadth-first), found through AWS::CloudFormation::Stack resources.

    Deleted nested stacks stay reachable by their id (an ARN), which ListStackResources still reports.
    """
    nodes: list[StackNode] = []
    todo: list[tuple[str, str, int]] = [(root, label or root, 0)]
    seen: set[str] = set()
    while todo:
        sid, path, depth = todo.pop(0)
        if sid in seen:
            continue
        seen.add(sid)
        try:
            resources = list_resources(cfn, sid)
        except NotFound:
            resources = []
        nodes.append(StackNode(sid, path, resources))
        if depth >= max_depth:
            continue
        for res in resources:
            phys = res.get("PhysicalResourceId")
            if res.get("ResourceType") == NESTED_TYPE and phys:
                todo.append((phys, f"{path}/{res['LogicalResourceId']}", depth + 1))
    return nodes


# --- create / update ---------------------------------------------------------------------------------


@dataclass
class SubmitResult:
    """What deploy did: created, updated (with the changes), nothing to do, or only planned (dry run)."""

    kind: str  # "create" | "update" | "no-changes" | "dry-run"
    stack_id: str
    changes: list[Any] = field(default_factory=list)  # deploy_plan.ResourceAction, nested stacks' included
    started: float = 0.0


def _params(params: dict[str, str], previous: set[str] | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"ParameterKey": k, "ParameterValue": v} for k, v in sorted(params.items())]
    for key in sorted((previous or set()) - set(params)):
        out.append({"ParameterKey": key, "UsePreviousValue": True})
    return out


def create_stack(cfn: Any, name: str, template_url: str, params: dict[str, str], tags: dict[str, str]) -> SubmitResult:
    started = time.time()
    with aws_errors(f"cloudformation:CreateStack {name}"):
        resp = cfn.create_stack(
            StackName=name, TemplateURL=template_url, Parameters=_params(params), Capabilities=CAPABILITIES,
            Tags=[{"Key": k, "Value": v} for k, v in sorted(tags.items())], OnFailure="ROLLBACK",
        )
    return SubmitResult("create", resp["StackId"], started=started)


def _describe_all(cfn: Any, stack: str | None, cs_id: str) -> dict[str, Any]:
    """DescribeChangeSet with every page of Changes (NextToken: API reference, DescribeChangeSet)."""
    kw = {"StackName": stack} if stack else {}
    with aws_errors(f"cloudformation:DescribeChangeSet {stack or cs_id}"):
        data = cfn.describe_change_set(ChangeSetName=cs_id, **kw)
        changes = list(data.get("Changes", []))
        token = data.get("NextToken")
        while token:
            more = cfn.describe_change_set(ChangeSetName=cs_id, NextToken=token, **kw)
            changes.extend(more.get("Changes", []))
            token = more.get("NextToken")
    return {**data, "Changes": changes}


def _wait_change_set(cfn: Any, stack: str | None, cs_id: str, deadline: float) -> dict[str, Any]:
    """Describe until the change set is computed (CREATE_COMPLETE, FAILED) or the deadline passes."""
    delay = 0.2
    while True:
        data = _describe_all(cfn, stack, cs_id)
        if data.get("Status", "") in ("CREATE_COMPLETE", "FAILED", "DELETE_COMPLETE") or time.time() > deadline:
            return data
        time.sleep(delay)
        delay = min(delay * 2, 5)


def change_set_actions(cfn: Any, stack: str, cs_id: str, timeout: float = 600,
                       max_depth: int = 5) -> tuple[str, str, list[Any]]:
    """(status, reason, actions) of a change set and, depth first, of each nested stack's change set.

    With IncludeNestedStacks a nested stack's ResourceChange carries ``ChangeSetId``, its own change set
    (API reference, ResourceChange.ChangeSetId; user guide, "Change sets for nested stacks"); a stand-in
    that does not nest (moto) simply has none.
    """
    deadline = time.time() + timeout
    data = _wait_change_set(cfn, stack, cs_id, deadline)
    actions: list[Any] = []

    def walk(path: str, changes: list[dict[str, Any]], depth: int) -> None:
        for c in changes:
            if c.get("Type", "Resource") != "Resource":
                continue
            act = deploy_plan.resource_action(path, c)
            actions.append(act)
            if act.nested_change_set and depth < max_depth:
                inner = _wait_change_set(cfn, None, act.nested_change_set, deadline)
                walk(act.where, inner.get("Changes", []), depth + 1)

    walk("", data.get("Changes", []), 0)
    return data.get("Status", ""), data.get("StatusReason", "") or "", actions


def check_updatable(info: StackInfo) -> None:
    """Refuse, before anything is uploaded, a stack that cannot take an update now."""
    if info.status in ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED"):
        raise OperationFailed(
            f"stack {info.name} is {info.status} (its creation failed) and cannot be updated: "
            f"see `hpq stack-errors {info.name}`, then `hpq destroy {info.name}` and deploy again"
        )
    if not is_terminal(info.status):
        raise OperationFailed(
            f"stack {info.name} is {info.status}; wait for it (`hpq status {info.name} --follow`) and deploy again"
        )


def update_via_change_set(
    cfn: Any, info: StackInfo, template_url: str, params: dict[str, str], tags: dict[str, str],
    on_changes: Any = None, declared: set[str] | None = None, dry_run: bool = False, confirm: Any = None,
) -> SubmitResult:
    """Create a change set with EVERY parameter given explicitly, show it (``on_changes``), and execute exactly it.

    CreateChangeSet / DescribeChangeSet / ExecuteChangeSet / DeleteChangeSet (CloudFormation API reference:
    https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateChangeSet.html and its
    siblings). 'No changes' is success, not an error. ``dry_run`` deletes the change set after showing it;
    ``confirm(actions)`` may raise to refuse (the change set is deleted then too). ``declared``: parameters
    the template declares that ``params`` leaves out keep their value through UsePreviousValue (callers that
    compute the full set, as ``hpq deploy`` does, pass none).
    """
    check_updatable(info)
    name = "hpq-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{int(time.time() * 1000) % 1000:03d}"
    previous = set(info.parameters) & declared if declared is not None else set()
    with aws_errors(f"cloudformation:CreateChangeSet {info.name}"):
        resp = cfn.create_change_set(
            StackName=info.name, ChangeSetName=name, ChangeSetType="UPDATE", TemplateURL=template_url,
            Parameters=_params(params, previous), Capabilities=CAPABILITIES,
            Tags=[{"Key": k, "Value": v} for k, v in sorted(tags.items())],
            IncludeNestedStacks=True,
        )
    cs_id = resp["Id"]
    try:
        status, reason, changes = change_set_actions(cfn, info.name, cs_id)
        if status == "FAILED" and any(m.lower() in reason.lower() for m in _NO_CHANGE_MARKERS):
            _delete_change_set(cfn, info.name, cs_id)
            return SubmitResult("no-changes", info.stack_id)
        if status != "CREATE_COMPLETE":
            raise OperationFailed(f"change set for {info.name} is {status}: {reason or 'not ready after 10 minutes'}")
        if on_changes:
            on_changes(changes)
        if dry_run:
            _delete_change_set(cfn, info.name, cs_id)
            return SubmitResult("dry-run", info.stack_id, changes)
        if confirm:
            confirm(changes)
        started = time.time()
        with aws_errors(f"cloudformation:ExecuteChangeSet {info.name}"):
            cfn.execute_change_set(StackName=info.name, ChangeSetName=cs_id)
    except BaseException:
        # A failed, refused or abandoned (Ctrl-C, error) change set would linger on the stack: remove it.
        _delete_change_set(cfn, info.name, cs_id)
        raise
    return SubmitResult("update", info.stack_id, changes, started=started)


def _delete_change_set(cfn: Any, stack: str, cs_id: str) -> None:
    """Best effort: a change set that cannot be deleted only clutters the console."""
    try:
        cfn.delete_change_set(StackName=stack, ChangeSetName=cs_id)
    except Exception:  # noqa: BLE001 - cleanup must not hide the error that led here
        pass


def delete_stack(cfn: Any, stack_id: str) -> float:
    started = time.time()
    with aws_errors(f"cloudformation:DeleteStack {stack_id}"):
        cfn.delete_stack(StackName=stack_id)
    return started


def stack_buckets(cfn: Any, stack_id: str) -> list[str]:
    """Physical names of every S3 bucket in the stack tree (for ``hpq destroy --empty-buckets``)."""
    out = []
    for node in stack_tree(cfn, stack_id):
        for res in node.resources:
            if res.get("ResourceType") == "AWS::S3::Bucket" and res.get("PhysicalResourceId") \
                    and res.get("ResourceStatus") != "DELETE_COMPLETE":
                out.append(res["PhysicalResourceId"])
    return out


@dataclass
class Deletion:
    """A stack deletion just started: what to follow, and the buckets emptied first (name -> versions)."""

    info: StackInfo
    started: float
    emptied: dict[str, int] = field(default_factory=dict)


def start_destroy(session: Any, stack: str, empty_buckets: bool = False) -> Deletion:
    """Delete a stack, emptying its versioned buckets first when asked (a versioned bucket blocks deletion)."""
    cfn = client(session, "cloudformation")
    info = describe(cfn, stack)
    emptied: dict[str, int] = {}
    if empty_buckets:
        s3 = client(session, "s3")
        for bucket in stack_buckets(cfn, info.stack_id):
            try:
                emptied[bucket] = empty_bucket(s3, bucket)
            except NotFound:  # already deleted
                continue
    return Deletion(info, delete_stack(cfn, info.stack_id), emptied)


def template_resource_count(cfn: Any, stack_id: str) -> int | None:
    """How many resources a stack's template declares (the progress total); None if unreadable."""
    import json

    try:
        body = cfn.get_template(StackName=stack_id, TemplateStage="Original")["TemplateBody"]
    except Exception:  # noqa: BLE001 - progress is best effort
        return None
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:  # YAML templates: hpq only deploys JSON, so no total
            return None
    resources = (body or {}).get("Resources") or {}
    return len(resources)
