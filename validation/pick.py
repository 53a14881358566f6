"""Which backend serves a cluster, decided by what DescribeCluster says the cluster is.

A HyperPod cluster orchestrated by EKS (``Orchestrator.Eks``) runs the tests as Kubernetes jobs; any other
runs them from its Slurm controller over SSH through SSM. The user names the cluster, never the backend.
Source of the field: DescribeCluster's response (Orchestrator -> Eks -> ClusterArn),
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeCluster.html
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpq.aws import hyperpod, ssh
from hpq.aws.session import client, make_session
from hpq.errors import UsageError
from hpq.lifecycle import catalog
from hpq.validation.backend import Backend, ClusterFacts
from hpq.validation.eks import EksBackend
from hpq.validation.slurm import SlurmBackend, SshShell


@dataclass(frozen=True)
class Reach:
    """How to reach a real cluster: the AWS session, and for Slurm the SSH hop to the controller."""

    region: str | None = None
    profile: str | None = None
    user: str = "ubuntu"
    key: str | None = None
    known_hosts: str = "~/.ssh/hpq_known_hosts"
    port: int = 22
    proxy_command: str | None = None
    host: str | None = None
    group: str | None = None
    node: str | None = None
    eks: dict[str, Any] = field(default_factory=dict)  # EKS only: validation/eks.EksOptions' fields


def worker_type(groups: list[dict[str, Any]]) -> str | None:
    """The accelerated group's type (what the tests measure), from DescribeCluster's InstanceGroups."""
    for g in groups:
        entry = catalog.CATALOG.get(g.get("InstanceType", ""))
        if entry and entry.is_accelerated:
            return entry.name
    return None


def backend_for(cluster: str, reach: Reach, programs: dict[str, list[str]] | None = None) -> Backend:
    """The backend that serves ``cluster``: EKS jobs or the Slurm controller, from what DescribeCluster says.
    With ``--proxy-command`` and ``--host`` the controller is reached without AWS (a Slurm cluster by
    definition: there is no controller to SSH into on EKS)."""
    if reach.host and not reach.proxy_command:
        raise UsageError("--host does not apply without --proxy-command: hpq reaches the node through SSM")
    if reach.proxy_command and reach.host:
        return SlurmBackend(SshShell(controller_target(cluster, reach)[0]), ClusterFacts(cluster, "slurm", None),
                            programs=programs)
    session = make_session(reach.region, reach.profile)
    sm = client(session, "sagemaker")
    cl = hyperpod.describe_cluster(sm, cluster)
    facts = ClusterFacts(cl.name, cl.orchestrator, worker_type(cl.groups))
    if cl.orchestrator == "eks":
        return EksBackend.for_cluster(cl, facts, reach, session)
    target, _ = controller_target(cluster, reach, (sm, session, cl))
    return SlurmBackend(SshShell(target), facts, programs=programs)


def controller_target(cluster: str, reach: Reach, described: tuple[Any, Any, Any] | None = None) -> tuple[Any, Any]:
    """(aws.ssh.SshTarget, aws.hyperpod.Cluster or None): the node to SSH into (the Slurm controller unless
    ``reach.group``/``reach.node`` say otherwise), through SSM unless a ProxyCommand and host are given."""
    if reach.host and not reach.proxy_command:
        raise UsageError("--host does not apply without --proxy-command: hpq reaches the node through SSM")
    if reach.proxy_command and reach.host:
        proxy = reach.proxy_command.replace("%h", reach.host).replace("%p", str(reach.port))
        return ssh.SshTarget(reach.host, proxy, reach.user, reach.port, reach.key, reach.known_hosts,
                                 via_ssm=False), None
    if described is None:
        session = make_session(reach.region, reach.profile)
        sm = client(session, "sagemaker")
        described = (sm, session, hyperpod.describe_cluster(sm, cluster))
    sm, session, cl = described
    picked = hyperpod.resolve_node(sm, cl, reach.group, reach.node)
    proxy = (reach.proxy_command.replace("%h", picked.target).replace("%p", str(reach.port)) if reach.proxy_command
             else hyperpod.ssh_proxy_command(picked.target, reach.region or session.region_name, reach.profile,
                                                 reach.port))
    return ssh.SshTarget(picked.target, proxy, reach.user, reach.port, reach.key, reach.known_hosts,
                             via_ssm=not reach.proxy_command), cl
