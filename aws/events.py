"""Root cause of a failed stack operation, through every nested stack.

CloudFormation reports one real failure and then a cascade: "Resource creation cancelled" for
every sibling, "Embedded stack ... was not successfully created" in each parent, and "The
following resource(s) failed" on each stack. Only the first real failure per stack says what
to fix, so everything else is dropped here. deploy, destroy and stack-errors share this logic.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from hpq.aws.session import aws_errors
from hpq.aws.stacks import NESTED_TYPE, stack_tree

OPERATION_STARTS = {"CREATE_IN_PROGRESS", "UPDATE_IN_PROGRESS", "DELETE_IN_PROGRESS", "IMPORT_IN_PROGRESS"}
NOISE = (
    "resource creation cancelled", "resource update cancelled", "resource deletion cancelled",
    "resource import cancelled", "the following resource(s) failed to",
)
PROPAGATED = ("embedded stack ",)

# reason substring (lowercase) -> what to do about it.
HINTS: tuple[tuple[str, str], ...] = (
    ("is not empty", "a versioned bucket still holds object versions: `hpq destroy STACK --empty-buckets`"),
    ("bucketnotempty", "a versioned bucket still holds object versions: `hpq destroy STACK --empty-buckets`"),
    ("has dependencies and cannot be deleted", "something outside the stack still uses it (ENIs of Lambda, "
     "EKS or HyperPod nodes take minutes to go): wait and run `hpq destroy STACK` again"),
    ("dependencyviolation", "something outside the stack still uses it: wait a few minutes and retry the delete"),
    ("resourcelimitexceeded", "a service quota is too low: run `hpq check-quotas INSTANCE_TYPE NODES`"),
    ("limitexceeded", "a service quota is too low: run `hpq check-quotas INSTANCE_TYPE NODES`"),
    ("quota", "a service quota is too low: run `hpq check-quotas INSTANCE_TYPE NODES`"),
    ("insufficient capacity", "no capacity for that instance type in the AZ: try another AvailabilityZoneId"),
    ("insufficientinstancecapacity", "no capacity for that instance type in the AZ: try another AvailabilityZoneId"),
    ("efa health check", "EFA health checks need the security group to allow all traffic to and from itself"),
    ("lifecycle", "a lifecycle script failed on a node: read CloudWatch log group /aws/sagemaker/Clusters/<name>/<id>"),
    # before the generic 'access denied' below: the first phrase found wins (hint_for)
    ("templateurl", "CloudFormation could not read a nested template: check the bucket policy and region"),
    ("s3 error: access denied", "CloudFormation could not read a nested template: check the bucket policy and region"),
    ("not authorized", "the deploying identity or the execution role lacks a permission named in the reason"),
    ("accessdenied", "the deploying identity or the execution role lacks a permission named in the reason"),
    ("access denied", "the deploying identity or the execution role lacks a permission named in the reason"),
    ("failed to receive", "a custom resource did not answer: read its Lambda's CloudWatch logs"),
    ("custom resource", "a custom resource failed: read its Lambda's CloudWatch logs"),
)


def hint_for(reason: str) -> str:
    low = reason.lower()
    for needle, hint in HINTS:
        if needle in low:
            return hint
    return ""


@dataclass
class Failure:
    stack_path: str
    stack_id: str
    logical_id: str
    resource_type: str
    status: str
    reason: str
    timestamp: dt.datetime
    physical_id: str = ""
    hint: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "stack": self.stack_path, "stack_id": self.stack_id, "resource": self.logical_id,
            "type": self.resource_type, "status": self.status, "reason": self.reason,
            "time": self.timestamp.isoformat(), "hint": self.hint,
        }

    def line(self) -> str:
        where = f"{self.stack_path}/{self.logical_id}" if self.logical_id else self.stack_path
        text = f"{self.timestamp:%H:%M:%S} {where} ({self.resource_type}) {self.status}: {self.reason}"
        return text + (f"\n    hint: {self.hint}" if self.hint else "")


@dataclass
class RootCause:
    """The first real failure of each stack, oldest first; ``root`` is the earliest of all."""

    stack: str
    since: dt.datetime | None
    failures: list[Failure] = field(default_factory=list)

    @property
    def root(self) -> Failure | None:
        return self.failures[0] if self.failures else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack, "since": self.since.isoformat() if self.since else None,
            "root_cause": self.root.as_dict() if self.root else None,
            "failures": [f.as_dict() for f in self.failures],
        }


def stack_events(cfn: Any, stack_id: str, since: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Events of one stack, oldest first; stops paging once events are older than ``since``."""
    events: list[dict[str, Any]] = []
    with aws_errors(f"cloudformation:DescribeStackEvents {stack_id}"):
        for page in cfn.get_paginator("describe_stack_events").paginate(StackName=stack_id):
            batch = page.get("StackEvents", [])
            events.extend(batch)
            if since and batch and batch[-1]["Timestamp"] < since:
                break
    events.sort(key=lambda e: e["Timestamp"])
    return [e for e in events if since is None or e["Timestamp"] >= since]


def is_stack_event(event: dict[str, Any]) -> bool:
    """An event about the stack itself (not one of its resources)."""
    return event.get("ResourceType") == NESTED_TYPE and event.get("PhysicalResourceId") == event.get("StackId")


def operation_start(events: list[dict[str, Any]]) -> dt.datetime | None:
    """When the latest user operation on the stack began (events oldest first)."""
    start = None
    for e in events:
        if is_stack_event(e) and e.get("ResourceStatus") in OPERATION_STARTS:
            reason = (e.get("ResourceStatusReason") or "").lower()
            if not reason or "user initiated" in reason:
                start = e["Timestamp"]
    return start


def _is_failure(event: dict[str, Any]) -> bool:
    return str(event.get("ResourceStatus", "")).endswith("_FAILED")


def _is_stack_level_failure(event: dict[str, Any]) -> bool:
    """A stack's own failed or rolling-back status, e.g. a rejected parameter before any resource ran."""
    status = str(event.get("ResourceStatus", ""))
    return is_stack_event(event) and (status.endswith("_FAILED") or "ROLLBACK_IN_PROGRESS" in status)


def _is_noise(event: dict[str, Any]) -> bool:
    reason = (event.get("ResourceStatusReason") or "").lower()
    return any(n in reason for n in NOISE)


@dataclass
class StackEvents:
    """Events of one stack in the tree (oldest first) and every id it is known by (name, ARN)."""

    path: str
    stack_id: str
    events: list[dict[str, Any]]
    aliases: set[str] = field(default_factory=set)

    def known_as(self, ident: str) -> bool:
        if not ident:
            return False
        names = {self.stack_id, *self.aliases}
        names |= {n.split("/")[1] for n in list(names) if n.startswith("arn:") and n.count("/") >= 2}
        return ident in names or (ident.startswith("arn:") and ident.count("/") >= 2 and ident.split("/")[1] in names)


def _failure(st: StackEvents, e: dict[str, Any]) -> Failure:
    reason = " ".join(str(e.get("ResourceStatusReason") or "(no reason given)").split())
    return Failure(
        stack_path=st.path, stack_id=st.stack_id, logical_id=e.get("LogicalResourceId", ""),
        resource_type=e.get("ResourceType", ""), status=e.get("ResourceStatus", ""), reason=reason,
        timestamp=e["Timestamp"], physical_id=e.get("PhysicalResourceId", "") or "", hint=hint_for(reason),
    )


def analyse(stacks: list[StackEvents], stack: str, since: dt.datetime | None) -> RootCause:
    """Pure logic over the events of every stack in the tree: easy to test, shared by all commands."""
    real: dict[str, Failure] = {}
    propagated: list[Failure] = []
    stack_level: list[Failure] = []
    for st in stacks:
        for e in st.events:
            if _is_noise(e):
                continue
            if is_stack_event(e):
                # Stack-level events usually only summarise their resources' failures; kept aside for
                # the case where no resource failed at all.
                if _is_stack_level_failure(e) and e.get("ResourceStatusReason"):
                    stack_level.append(_failure(st, e))
                continue
            if not _is_failure(e):
                continue
            f = _failure(st, e)
            reason = f.reason
            if e.get("ResourceType") == NESTED_TYPE and reason.lower().startswith(PROPAGATED):
                propagated.append(f)
                continue
            if st.stack_id not in real or f.timestamp < real[st.stack_id].timestamp:
                real[st.stack_id] = f
    # An embedded-stack failure is a root cause only when that nested stack reports no failure itself
    # (e.g. its template could not be read, so it never produced events of its own).
    for f in propagated:
        child_failed = any(st.known_as(f.physical_id) and st.stack_id in real for st in stacks)
        if not child_failed and f.stack_id not in real:
            real[f.stack_id] = f
    if not real and stack_level:
        first = min(stack_level, key=lambda x: x.timestamp)
        real[first.stack_id] = first
    return RootCause(stack=stack, since=since, failures=sorted(real.values(), key=lambda x: x.timestamp))


def root_cause(cfn: Any, stack: str, all_history: bool = False, label: str | None = None) -> RootCause:
    """Walk the stack tree, read events since the root's latest operation, and analyse them.

    ``stack`` may be a name or an id (ids still work after deletion); ``label`` names it in the output.
    """
    tree = stack_tree(cfn, stack, label=label)
    root_events = stack_events(cfn, tree[0].stack_id)
    since = None if all_history else operation_start(root_events)
    collected = [StackEvents(
        tree[0].path, root_events[0]["StackId"] if root_events else tree[0].stack_id,
        [e for e in root_events if since is None or e["Timestamp"] >= since], {tree[0].stack_id},
    )]
    for node in tree[1:]:
        try:
            events = stack_events(cfn, node.stack_id, since)
        except Exception:  # noqa: BLE001 - a nested stack we cannot read must not hide the others
            continue
        sid = events[0]["StackId"] if events else node.stack_id
        collected.append(StackEvents(node.path, sid, events, {node.stack_id}))
    return analyse(collected, label or stack, since)
