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

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hpq.aws import hyperpod, pricing
from hpq.aws.session import NotFound, aws_errors, client, error_code, make_session
from hpq.lifecycle import catalog, names

VARIANT_TAG_KEY = "hpq:variant"
HOURS = Decimal(pricing.HOURS_PER_MONTH)
# Where validation results live: hpq keeps none on this machine; the node commands write them on the cluster.
RESULTS_NOTE = ("hpq keeps no validation results on this machine: the node commands write them on the cluster "
                "(/fsx/hpq-results/, or ~/hpq-results/ without FSx); run `hpq test validate CLUSTER` for new ones")


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
                "price_sources": sorted(set(self.price_sources))}


def tags_of(sm: Any, arn: str) -> dict[str, str]:
    out: dict[str, str] = {}
    with aws_errors(f"sagemaker:ListTags {arn}"):
        for page in sm.get_paginator("list_tags").paginate(ResourceArn=arn):
            out.update({t["Key"]: t.get("Value", "") for t in page.get("Tags", [])})
    return out


def hpq_stacks(cfn: Any) -> dict[str, dict[str, Any]]:
    """hpq's root stacks in the region, by the cluster name they create: name, status, variant."""
    out: dict[str, dict[str, Any]] = {}
    with aws_errors("cloudformation:DescribeStacks"):
        for page in cfn.get_paginator("describe_stacks").paginate():
            for st in page.get("Stacks", []):
                tags = {t["Key"]: t.get("Value", "") for t in st.get("Tags") or []}
                if st.get("ParentId") or not is_hpq(tags) or st.get("StackStatus") == "DELETE_COMPLETE":
                    continue
                params = {p["ParameterKey"]: p.get("ParameterValue", "") for p in st.get("Parameters") or []}
                outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in st.get("Outputs") or []}
                cluster = outputs.get(names.OUT_CLUSTER_NAME) or params.get("ClusterName") or st["StackName"]
                out[cluster] = {"stack": st["StackName"], "status": st.get("StackStatus", ""),
                                "variant": tags.get(VARIANT_TAG_KEY, ""), "created": st.get("CreationTime"),
                                "parameters": params, "outputs": outputs}
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


def list_region(session: Any, region: str, include_all: bool, prices: pricing.Prices) -> list[ClusterRow]:
    """hpq's clusters in one region (every cluster with ``include_all``), with their stacks' state."""
    sm = client(session, "sagemaker", region)
    stacks = hpq_stacks(client(session, "cloudformation", region))
    rows: list[ClusterRow] = []
    seen: set[str] = set()
    for summary in hyperpod.list_clusters(sm):
        name = summary["ClusterName"]
        arn = summary.get("ClusterArn", "")
        tags = tags_of(sm, arn)
        stack = stacks.get(name)
        mine = is_hpq(tags) or stack is not None
        if not mine and not include_all:
            continue
        seen.add(name)
        with aws_errors(f"sagemaker:DescribeCluster {name}"):
            described = sm.describe_cluster(ClusterName=arn or name)
        groups = groups_of(described)
        orchestrator = "eks" if (described.get("Orchestrator") or {}).get("Eks") else "slurm"
        row = ClusterRow(name, region, described.get("ClusterStatus", summary.get("ClusterStatus", "")),
                         (stack or {}).get("variant") or (variant_of(tags, orchestrator, groups) if mine else ""),
                         mine, arn, described.get("CreationTime") or summary.get("CreationTime"), groups,
                         (stack or {}).get("stack", ""), (stack or {}).get("status", ""))
        price_row(row, prices)
        rows.append(row)
    for cluster, stack in stacks.items():  # a stack whose cluster does not exist (yet, or any more)
        if cluster in seen:
            continue
        rows.append(ClusterRow(cluster, region, "no cluster", stack["variant"], True, created=stack["created"],
                               stack=stack["stack"], stack_status=stack["status"]))
    return sorted(rows, key=lambda r: (r.region, r.name))


def age(seconds: int | None) -> str:
    if seconds is None:
        return ""
    days, rest = divmod(max(seconds, 0), 86400)
    hours, rest = divmod(rest, 3600)
    return f"{days}d {hours}h" if days else f"{hours}h {rest // 60}m" if hours else f"{rest // 60}m"


# --- one cluster, for status -----------------------------------------------------------------------------


def cluster_detail(session: Any, cluster_name: str, region: str, outputs: dict[str, str]) -> dict[str, Any]:
    """The HyperPod cluster a stack made: groups, every node with its status, the Slurm controller or the EKS
    cluster, the FSx file system, and where validation results are."""
    sm = client(session, "sagemaker", region)
    out: dict[str, Any] = {"name": cluster_name, "validation": RESULTS_NOTE}
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
        stacks = hpq_stacks(cfn)
    except Exception:  # noqa: BLE001 - completion answers what it can, never a traceback on a TAB
        return []
    return sorted(stacks) if kind == "cluster" else sorted(v["stack"] for v in stacks.values())
