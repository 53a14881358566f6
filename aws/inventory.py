"""The HyperPod clusters hpq deployed, and one cluster's nodes, controller or EKS cluster and FSx, for list/status.

How hpq knows its own clusters: every stack ``hpq deploy`` creates carries the stack tags ``hpq:managed-by =
hyperpod-quickstart`` and ``hpq:variant = <variant>`` (aws/deploy.py), which CloudFormation propagates to the
resources it creates, and the HyperPod stack also sets ``hpq:managed-by`` and ``hpq:cluster-name`` on the
``AWS::SageMaker::Cluster`` itself (cfn/hyperpod.py). A cluster is hpq's when its tags (SageMaker ListTags) say
so; a root stack is hpq's when its stack tags say so, and names its cluster in its ``ClusterName`` parameter or
output. Both are read, so a stack whose cluster is still being created (or failed to be) is listed too.

AWS shapes, from the SageMaker API reference: ListClusters (``ClusterSummaries[]``: ClusterName, ClusterArn,
ClusterStatus, CreationTime; https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ListClusters.html),
DescribeCluster (``InstanceGroups[]``: InstanceGroupName, InstanceType, CurrentCount, TargetCount;
``Orchestrator.Eks.ClusterArn``; https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeCluster.html),
ListClusterNodes (``ClusterNodeSummaries[]``: InstanceGroupName, InstanceId, InstanceType, LaunchTime,
``InstanceStatus.Status`` Running | Failure | Pending | ShuttingDown | SystemUpdating | DeepHealthCheckInProgress |
NotFound; https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ListClusterNodes.html), ListTags
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ListTags.html).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hpq.aws import hyperpod, pricing, stacks
from hpq.aws.session import NotFound, aws_errors, client, error_code, make_session
from hpq.lifecycle import catalog, names

VARIANT_TAG_KEY = "hpq:variant"
HOURS = Decimal(pricing.HOURS_PER_MONTH)


def is_hpq(tags: dict[str, str]) -> bool:
    return tags.get(names.MANAGED_BY_TAG_KEY) == names.MANAGED_BY_TAG_VALUE


@dataclass
class Group:
    name: str
    instance_type: str
    count: int  # CurrentCount
    target: int  # TargetCount

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "instance_type": self.instance_type, "count": self.count, "target": self.target}


@dataclass
class ClusterRow:
    """One line of ``hpq list``."""

    name: str
    region: str
    state: str
    variant: str = ""
    hpq: bool = False
    arn: str = ""
    created: dt.datetime | None = None
    groups: list[Group] = field(default_factory=list)
    stack: str = ""
    stack_status: str = ""
    hourly: Decimal | None = None
    unpriced: list[str] = field(default_factory=list)
    price_sources: list[str] = field(default_factory=list)
    shared_with: list[str] = field(default_factory=list)  # the other hpq stacks naming the same cluster

    def age_seconds(self, now: dt.datetime) -> int | None:
        return int((now - self.created).total_seconds()) if self.created else None

    def as_dict(self, now: dt.datetime) -> dict[str, Any]:
        return {"name": self.name, "region": self.region, "variant": self.variant or None, "state": self.state,
                "deployed_by_hpq": self.hpq, "arn": self.arn or None,
                "created": self.created.isoformat() if self.created else None,
                "age_seconds": self.age_seconds(now), "groups": [g.as_dict() for g in self.groups],
                "stack": self.stack or None, "stack_status": self.stack_status or None,
                "hourly_cost_usd": None if self.hourly is None else str(self.hourly.quantize(Decimal("0.0001"))),
                "cost_covers": "HyperPod instances at their current counts, on-demand list prices",
                "cost_complete": not self.unpriced, "unpriced": self.unpriced,
                "price_sources": sorted(set(self.price_sources)), "cluster_also_named_by": self.shared_with}


def tags_of(sm: Any, arn: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with aws_errors(f"sagemaker:ListTags {arn}"):
        for page in sm.get_paginator("list_tags").paginate(ResourceArn=arn):
            out.update({t["Key"]: t.get("Value", "") for t in page.get("Tags", [])})
    return out


@dataclass
class HpqStack:
    """One root stack of hpq's and the HyperPod cluster it names ("" when it names no valid one)."""

    stack: str
    status: str
    variant: str
    cluster: str
    created: dt.datetime | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)


def hpq_stacks(cfn: Any) -> list[HpqStack]:
    """hpq's root stacks in the region, every one (two stacks may name one cluster: both are kept).

    CloudFormation DescribeStacks (``Stacks[]``: StackName, StackStatus, ParentId, Parameters[ParameterKey,
    ParameterValue], Outputs[OutputKey, OutputValue], Tags, CreationTime;
    https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DescribeStacks.html). The cluster is
    the root's ClusterName parameter (stacks.cluster_name_of says why not the output first)."""
    out: list[HpqStack] = []
    with aws_errors("cloudformation:DescribeStacks"):
        for page in cfn.get_paginator("describe_stacks").paginate():
            for st in page.get("Stacks", []):
                tags = {t["Key"]: t.get("Value", "") for t in st.get("Tags") or []}
                if st.get("ParentId") or not is_hpq(tags) or st.get("StackStatus") == "DELETE_COMPLETE":
                    continue
                params = {p["ParameterKey"]: p.get("ParameterValue", "") for p in st.get("Parameters") or []}
                outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in st.get("Outputs") or []}
                out.append(HpqStack(st["StackName"], st.get("StackStatus", ""), tags.get(VARIANT_TAG_KEY, ""),
                                    stacks.cluster_name_of(params, outputs, st["StackName"]), st.get("CreationTime"),
                                    params, outputs))
    return sorted(out, key=lambda s: s.stack)


def by_cluster(found: list[HpqStack]) -> dict[str, list[HpqStack]]:
    """The stacks naming each cluster (stacks that name none are left out)."""
    out: dict[str, list[HpqStack]] = {}
    for st in found:
        if st.cluster:
            out.setdefault(st.cluster, []).append(st)
    return out


def variant_of(tags: dict[str, str], orchestrator: str, groups: list[Group]) -> str:
    """The tag when present; else the orchestrator and the workers' accelerator (a cluster hpq did not deploy)."""
    if tags.get(VARIANT_TAG_KEY):
        return tags[VARIANT_TAG_KEY]
    kinds = {catalog.CATALOG[g.instance_type].accelerator for g in groups if g.instance_type in catalog.CATALOG
             and catalog.CATALOG[g.instance_type].is_accelerated}
    accel = "trn" if kinds == {catalog.TRAINIUM} else "gpu" if kinds == {catalog.GPU} else "?"
    return f"{orchestrator}-{accel}"


def groups_of(described: dict[str, Any]) -> list[Group]:
    return [Group(g.get("InstanceGroupName", ""), g.get("InstanceType", ""), int(g.get("CurrentCount", 0) or 0),
                  int(g.get("TargetCount", g.get("CurrentCount", 0)) or 0))
            for g in described.get("InstanceGroups", []) or []]


def price_row(row: ClusterRow, prices: pricing.Prices) -> None:
    """The row's hourly cost: every group's current count times its type's on-demand price."""
    total, priced = Decimal(0), False
    for g in row.groups:
        if g.count == 0:
            continue
        rate = prices.rate(pricing.hyperpod_instance(g.instance_type), row.region)
        if rate is None:
            row.unpriced.append(f"{g.instance_type} in {row.region}")
            continue
        total += rate.usd * g.count
        priced = True
        row.price_sources.append(rate.source.split(":", 1)[0] if rate.source != pricing.API_SOURCE else rate.source)
    row.hourly = total if priced or not row.unpriced else None


def list_region(session: Any, region: str, include_all: bool, prices: pricing.Prices | None,
                lock: Any = None) -> list[ClusterRow]:
    """hpq's clusters in one region (every cluster with ``include_all``), with their stacks' state: one row per
    hpq stack (two stacks naming one cluster are two rows, each naming the other), and one per cluster of hpq's
    that no stack names. ``prices`` None: leave the cost to the caller (price_row). ``lock``: held while the
    clients are made (a boto3 Session is not thread-safe; its clients are), for callers asking regions at once."""
    with lock or contextlib.nullcontext():
        sm = client(session, "sagemaker", region)
        cfn = client(session, "cloudformation", region)
    found = hpq_stacks(cfn)
    claims = by_cluster(found)
    rows: list[ClusterRow] = []
    seen: set[str] = set()
    for summary in hyperpod.list_clusters(sm):
        name = summary["ClusterName"]
        arn = summary.get("ClusterArn", "")
        tags = tags_of(sm, arn)
        mine = is_hpq(tags) or name in claims
        if not mine and not include_all:
            continue
        seen.add(name)
        with aws_errors(f"sagemaker:DescribeCluster {name}"):
            described = sm.describe_cluster(ClusterName=arn or name)
        groups = groups_of(described)
        orchestrator = "eks" if (described.get("Orchestrator") or {}).get("Eks") else "slurm"
        named_by = claims.get(name) or [None]
        for stack in named_by:
            row = ClusterRow(name, region, described.get("ClusterStatus", summary.get("ClusterStatus", "")),
                             (stack.variant if stack else "") or (variant_of(tags, orchestrator, groups) if mine
                                                                   else ""),
                             mine, arn, described.get("CreationTime") or summary.get("CreationTime"), groups,
                             stack.stack if stack else "", stack.status if stack else "",
                             shared_with=[s.stack for s in named_by if s is not None and s is not stack])
            if prices is not None:
                price_row(row, prices)
            rows.append(row)
    for stack in found:  # a stack whose cluster does not exist (yet, or any more), or that names none
        if stack.cluster in seen:
            continue
        rows.append(ClusterRow(stack.cluster, region, "no cluster" if stack.cluster else "no cluster name",
                               stack.variant, True, created=stack.created, stack=stack.stack,
                               stack_status=stack.status,
                               shared_with=[s.stack for s in claims.get(stack.cluster, []) if s is not stack]))
    return sorted(rows, key=lambda r: (r.region, r.name, r.stack))


def age(seconds: int | None) -> str:
    if seconds is None:
        return ""
    days, rest = divmod(max(seconds, 0), 86400)
    hours, rest = divmod(rest, 3600)
    return f"{days}d {hours}h" if days else f"{hours}h {rest // 60}m" if hours else f"{rest // 60}m"


# --- one cluster, for status -----------------------------------------------------------------------------


def cluster_detail(session: Any, cluster_name: str, region: str, outputs: dict[str, str]) -> dict[str, Any]:
    """The HyperPod cluster a stack made: groups, every node with its status, the Slurm controller or the EKS
    cluster and the FSx file system. Node health: ListClusterNodes gives InstanceStatus (Status, Message) and no
    other health field (ClusterNodeSummary; DescribeClusterNode's ClusterNodeDetails neither); HyperPod's EKS
    health is a Kubernetes node label (sagemaker.amazonaws.com/node-health-status,
    https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-node-labels.html), not read
    here. The validation results saved on this machine are the status command's (hpq.validation.saved)."""
    sm = client(session, "sagemaker", region)
    out: dict[str, Any] = {"name": cluster_name}
    try:
        cluster = hyperpod.describe_cluster(sm, cluster_name)
    except NotFound:
        out["status"] = "not found"
        out["groups"], out["nodes"] = [], []
    else:
        with aws_errors(f"sagemaker:DescribeCluster {cluster_name}"):
            described = sm.describe_cluster(ClusterName=cluster.arn or cluster_name)
        nodes = hyperpod.list_nodes(sm, cluster)
        out.update({"arn": cluster.arn, "status": cluster.status, "orchestrator": cluster.orchestrator,
                    "failure": described.get("FailureMessage") or None,
                    "groups": [g.as_dict() for g in groups_of(described)],
                    "nodes": [{"instance_id": n.get("InstanceId", ""), "group": n.get("InstanceGroupName", ""),
                               "instance_type": n.get("InstanceType", ""),
                               "status": (n.get("InstanceStatus") or {}).get("Status", ""),
                               "message": (n.get("InstanceStatus") or {}).get("Message") or None,
                               "launched": str(n.get("LaunchTime") or "") or None} for n in nodes]})
        if cluster.orchestrator == "slurm" and cluster.groups:
            group = hyperpod.default_group(cluster)
            out["slurm_controller"] = {"group": group,
                                       "nodes": [n["instance_id"] for n in out["nodes"] if n["group"] == group]}
        eks_arn = ((described.get("Orchestrator") or {}).get("Eks") or {}).get("ClusterArn", "")
        if cluster.orchestrator == "eks" or outputs.get(names.OUT_EKS_CLUSTER_NAME):
            out["eks"] = eks_detail(session, region, outputs.get(names.OUT_EKS_CLUSTER_NAME)
                                    or eks_arn.rsplit("/", 1)[-1], eks_arn)
    fsx_id = outputs.get(names.OUT_FSX_ID)
    if fsx_id:
        out["fsx"] = fsx_detail(session, region, fsx_id)
    return out


def eks_detail(session: Any, region: str, name: str, arn: str = "") -> dict[str, Any]:
    import botocore.exceptions

    if not name:
        return {"name": None, "status": "unknown"}
    try:
        data = client(session, "eks", region).describe_cluster(name=name)["cluster"]
    except botocore.exceptions.ClientError as exc:
        if error_code(exc) in ("ResourceNotFoundException", "NotFoundException"):
            return {"name": name, "arn": arn or None, "status": "not found"}
        with aws_errors(f"eks:DescribeCluster {name}"):
            raise
    return {"name": name, "arn": data.get("arn") or arn or None, "status": data.get("status", ""),
            "version": data.get("version")}


def fsx_detail(session: Any, region: str, fsx_id: str) -> dict[str, Any]:
    """FSx DescribeFileSystems (https://docs.aws.amazon.com/fsx/latest/APIReference/API_DescribeFileSystems.html)."""
    import botocore.exceptions

    try:
        found = client(session, "fsx", region).describe_file_systems(FileSystemIds=[fsx_id]).get("FileSystems", [])
    except botocore.exceptions.ClientError as exc:
        if error_code(exc) in ("FileSystemNotFound", "BadRequest", "ValidationException"):
            return {"id": fsx_id, "status": "not found"}
        with aws_errors(f"fsx:DescribeFileSystems {fsx_id}"):
            raise
    if not found:
        return {"id": fsx_id, "status": "not found"}
    fs = found[0]
    lustre = fs.get("LustreConfiguration") or {}
    return {"id": fsx_id, "status": fs.get("Lifecycle", ""), "capacity_gib": fs.get("StorageCapacity"),
            "throughput_per_tib": lustre.get("PerUnitStorageThroughput"),
            "deployment_type": lustre.get("DeploymentType"), "dns_name": fs.get("DNSName"),
            "mount_name": lustre.get("MountName")}


def completion_names(kind: str, region: str | None, profile: str | None) -> list[str]:
    """hpq's cluster names (``kind`` "cluster") or root stack names ("stack") for shell completion.

    A TAB must never hang or print an error: one attempt, 2 s to connect, 4 s to read, and any failure
    (no credentials, no network, no region) answers nothing.
    """
    import botocore.config

    try:
        session = make_session(region, profile)
        cfn = session.client("cloudformation", config=botocore.config.Config(
            connect_timeout=2, read_timeout=4, retries={"max_attempts": 1, "mode": "standard"}))
        found = hpq_stacks(cfn)
    except Exception:  # noqa: BLE001 - completion answers what it can, never a traceback on a TAB
        return []
    return sorted(by_cluster(found)) if kind == "cluster" else [st.stack for st in found]
