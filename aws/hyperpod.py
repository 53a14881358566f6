"""HyperPod clusters and nodes: resolve a cluster, pick a node, build its SSM target.

SSM does not know HyperPod nodes by their instance id: the target is
``sagemaker-cluster:<cluster-id>_<group>-<instance-id>`` (the raw id gives TargetNotConnected).
Clusters have hundreds of nodes, so listing always follows NextToken.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from hpq.aws.session import NotFound, aws_errors, error_code
from hpq.errors import UsageError
from hpq.lifecycle import catalog, names
from hpq.vocab import EKS, SLURM

# SageMaker answers an unknown cluster or node with either code.
_NOT_FOUND_CODES = ("ResourceNotFound", "ValidationException", "ResourceNotFoundException")


@dataclass
class Cluster:
    name: str
    arn: str
    status: str
    orchestrator: str  # SLURM or EKS
    groups: list[dict[str, Any]] = field(default_factory=list)
    # Orchestrator.Eks.ClusterArn of DescribeCluster: the EKS cluster an EKS-orchestrated one runs on
    # (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ClusterOrchestratorEksConfig.html)
    eks_cluster_arn: str | None = None

    @property
    def cluster_id(self) -> str:
        """The id part of the ARN (``arn:...:cluster/<id>``), which SSM targets use."""
        return self.arn.rsplit("/", 1)[-1]

    @property
    def group_names(self) -> list[str]:
        return [g["InstanceGroupName"] for g in self.groups]


def describe_cluster(sm: Any, ident: str) -> Cluster:
    """By name or ARN; an unknown name lists the clusters that partly match."""
    import botocore.exceptions

    try:
        data = sm.describe_cluster(ClusterName=ident)
    except botocore.exceptions.ClientError as exc:
        if error_code(exc) not in _NOT_FOUND_CODES:
            with aws_errors(f"sagemaker:DescribeCluster {ident}"):
                raise
        near = [c["ClusterName"] for c in list_clusters(sm) if ident.lower() in c["ClusterName"].lower()]
        hint = f"; did you mean {', '.join(near[:5])}?" if near else "; list them with `aws sagemaker list-clusters`"
        raise NotFound(f"HyperPod cluster {ident!r} not found in this region{hint}") from None
    eks_arn = ((data.get("Orchestrator") or {}).get("Eks") or {}).get("ClusterArn")
    orchestrator = EKS if (data.get("Orchestrator") or {}).get("Eks") else SLURM
    return Cluster(data["ClusterName"], data["ClusterArn"], data.get("ClusterStatus", ""), orchestrator,
                   list(data.get("InstanceGroups", [])), eks_arn)


def list_clusters(sm: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with aws_errors("sagemaker:ListClusters"):
        for page in sm.get_paginator("list_clusters").paginate():
            out.extend(page.get("ClusterSummaries", []))
    return out


def default_group(cluster: Cluster) -> str:
    """The Slurm controller group (where sbatch/srun and the node commands live); EKS: the first group."""
    groups = cluster.group_names
    if not groups:
        raise UsageError(f"cluster {cluster.name} has no instance groups")
    if cluster.orchestrator == SLURM:
        for wanted in (names.CONTROLLER_GROUP, "controller-machine", "head", "head-node"):
            if wanted in groups:
                return wanted
        for g in cluster.groups:
            if "controller" in g["InstanceGroupName"].lower():
                return str(g["InstanceGroupName"])
        for g in cluster.groups:  # a single CPU node is the controller in every HyperPod Slurm layout
            entry = catalog.CATALOG.get(g.get("InstanceType", ""))
            if entry and not entry.is_accelerated and int(g.get("CurrentCount", g.get("InstanceCount", 0)) or 0) == 1:
                return str(g["InstanceGroupName"])
    return groups[0]


def list_nodes(sm: Any, cluster: Cluster, group: str | None = None) -> list[dict[str, Any]]:
    """Every node (following NextToken), optionally of one group, oldest first then by instance id."""
    nodes: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"ClusterName": cluster.arn or cluster.name}
    if group:
        kwargs["InstanceGroupNameContains"] = group
    with aws_errors(f"sagemaker:ListClusterNodes {cluster.name}"):
        for page in sm.get_paginator("list_cluster_nodes").paginate(**kwargs):
            nodes.extend(page.get("ClusterNodeSummaries", []))
    if group:
        nodes = [n for n in nodes if n.get("InstanceGroupName") == group]
    nodes.sort(key=lambda n: (str(n.get("LaunchTime", "")), _natural(n.get("InstanceId", ""))))
    return nodes


def _natural(text: str) -> tuple[Any, ...]:
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


@dataclass
class Node:
    cluster: Cluster
    group: str
    instance_id: str

    @property
    def target(self) -> str:
        return ssm_target(self.cluster.cluster_id, self.group, self.instance_id)


def ssm_target(cluster_id: str, group: str, instance_id: str) -> str:
    return f"sagemaker-cluster:{cluster_id}_{group}-{instance_id}"


def resolve_node(sm: Any, cluster: Cluster, group: str | None = None, node: str | None = None) -> Node:
    """Pick the node: ``node`` is an instance id (looked up directly) or a 0-based index in its group."""
    import botocore.exceptions

    if group and group not in cluster.group_names:
        raise UsageError(f"cluster {cluster.name} has no group {group!r}; groups: {', '.join(cluster.group_names)}")
    if node and not node.isdigit():
        try:
            details = sm.describe_cluster_node(ClusterName=cluster.arn or cluster.name, NodeId=node)["NodeDetails"]
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) not in _NOT_FOUND_CODES:  # denied, throttled...: say so, do not guess
                with aws_errors(f"sagemaker:DescribeClusterNode {node}"):
                    raise
            details = None
        if not details:
            raise NotFound(f"node {node!r} is not in cluster {cluster.name}")
        actual = details.get("InstanceGroupName", "")
        if group and actual != group:
            raise UsageError(f"node {node} is in group {actual!r}, not {group!r}")
        return Node(cluster, actual, details.get("InstanceId", node))
    grp = group or default_group(cluster)
    nodes = list_nodes(sm, cluster, grp)
    if not nodes:
        raise NotFound(f"group {grp!r} of cluster {cluster.name} has no nodes yet")
    index = int(node) if node else 0
    if index >= len(nodes):
        raise UsageError(f"--node {index}: group {grp!r} has {len(nodes)} node(s) (0-{len(nodes) - 1})")
    return Node(cluster, grp, nodes[index]["InstanceId"])


def ssm_command(target: str, region: str | None = None, profile: str | None = None,
                document: str | None = None, parameters: str | None = None) -> list[str]:
    cmd = ["aws", "ssm", "start-session", "--target", target]
    if document:
        cmd += ["--document-name", document]
    if parameters:
        cmd += ["--parameters", parameters]
    if region:
        cmd += ["--region", region]
    if profile:
        cmd += ["--profile", profile]
    return cmd


def ssh_proxy_command(target: str, region: str | None = None, profile: str | None = None, port: int = 22) -> str:
    """The ProxyCommand that tunnels SSH through SSM to the node's sshd."""
    return shlex.join(ssm_command(target, region, profile, "AWS-StartSSHSession", f"portNumber={port}"))
