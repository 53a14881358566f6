"""One rehearsal's names, addresses and identities, all derived from its run id.

Two rehearsals on one machine (or a rehearsal and the test suite) never share a name: every
interface, namespace, directory and the cluster name carry the run id, and the /24 is one no
route on the host already covers (``netns.pick_subnet``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import secrets
from dataclasses import asdict, dataclass, field

from hpq.lifecycle import catalog

CONTROLLER, LOGIN, WORKER = "controller", "login", "worker"
# The node's only interface inside its namespace: a Nitro instance's primary ENI name, so transport
# code that excludes virtual interfaces (docker, lo, veth) treats it like the real one.
NODE_IFACE = "ens5"
CONTROLLER_TYPE = "ml.m5.xlarge"  # the templates' controller default (cfn/hyperpod.py)
REGION = "us-west-2"
ZONE = "us-west-2a"
ACCOUNT = "123456789012"  # moto's default account
RUN_ID_RE = re.compile(r"^[0-9a-f]{6}$")


def new_run_id() -> str:
    return secrets.token_hex(3)


def hyperpod_hostname(ip: str) -> str:
    """HyperPod's Slurm node names: ip-a-b-c-d from the customer-VPC address (awsome-distributed-ai
    1.architectures/5.sagemaker-hyperpod/tools/devops-agent/docs/hyperpod-mental-model.md)."""
    return "ip-" + ip.replace(".", "-")


def instance_id(run_id: str, index: int) -> str:
    """An EC2-shaped instance id (i- and 17 hex digits), stable for the run."""
    return "i-0" + hashlib.sha256(f"{run_id}/{index}".encode()).hexdigest()[:16]


@dataclass
class NodeSpec:
    name: str  # controller, worker-1.., login-1: the rehearsal's own handle (hpq rehearse shell NAME)
    role: str  # CONTROLLER | WORKER | LOGIN
    group: str  # HyperPod instance group name (names.CONTROLLER_GROUP ...)
    instance_type: str  # with ml. (the API's form)
    index: int  # position in the group, from 1
    ip: str
    instance_id: str
    netns: str
    host_iface: str  # the veth end on the bridge (host side)

    @property
    def hostname(self) -> str:
        return hyperpod_hostname(self.ip)

    @property
    def instance_name(self) -> str:
        """resource_config.json's InstanceName for Slurm: <group>-<index> (mental-model doc above)."""
        return f"{self.group}-{self.index}"


@dataclass
class Plan:
    run_id: str
    variant: str
    orchestrator: str  # "slurm" | "eks"
    worker_type: str
    workers: int
    login: bool
    subnet: str  # 10.x.y.0/24
    cluster_name: str = ""
    nodes: list[NodeSpec] = field(default_factory=list)
    eks: dict = field(default_factory=dict)  # EKS variants: the emulated EKS cluster (name, endpoint, ca)

    @property
    def bridge(self) -> str:
        return f"hpqbr-{self.run_id}"

    @property
    def gateway(self) -> str:
        return str(ipaddress.ip_network(self.subnet).network_address + 1)

    @property
    def fsx_ip(self) -> str:
        """The address FSx's DNS name resolves to in the stand-in VPC (the mount shows it as the NID)."""
        return str(ipaddress.ip_network(self.subnet).network_address + 4)

    @property
    def prefix_len(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name or n.hostname == name or n.ip == name or n.instance_id == name:
                return n
        raise KeyError(name)

    @property
    def controller(self) -> NodeSpec | None:
        return next((n for n in self.nodes if n.role == CONTROLLER), None)

    @property
    def worker_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.role == WORKER]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Plan:
        nodes = [NodeSpec(**n) for n in data.get("nodes", [])]
        return cls(**{**data, "nodes": nodes})


def new_plan(run_id: str, variant: str, workers: int, worker_type: str, login: bool, subnet: str) -> Plan:
    orchestrator = "eks" if variant.startswith("eks") else "slurm"
    return Plan(run_id, variant, orchestrator, catalog.normalize(worker_type), workers, login,
                str(ipaddress.ip_network(subnet)), cluster_name=f"hpq-rehearse-{run_id}")


def add_nodes(plan: Plan, groups: list[tuple[str, str, str, int]]) -> None:
    """Nodes for (group, role, instance type, count) as the deployed cluster asks for them.

    Addresses: controller .10, login nodes .11.., workers .21..; names controller, login-N, worker-N.
    """
    base = ipaddress.ip_network(plan.subnet).network_address
    counters = {CONTROLLER: 0, LOGIN: 0, WORKER: 0}
    octets = {CONTROLLER: 10, LOGIN: 11, WORKER: 21}
    order = {CONTROLLER: 0, LOGIN: 1, WORKER: 2}
    for group, role, itype, count in sorted(groups, key=lambda g: order[g[1]]):
        for pos in range(1, count + 1):
            counters[role] += 1
            index = len(plan.nodes)
            name = "controller" if role == CONTROLLER and counters[role] == 1 else f"{role}-{counters[role]}"
            plan.nodes.append(NodeSpec(
                name=name, role=role, group=group, instance_type=itype, index=pos,
                ip=str(base + octets[role] + counters[role] - 1), instance_id=instance_id(plan.run_id, index),
                netns=f"hpq-{plan.run_id}-{name}", host_iface=f"hpq{plan.run_id}n{index}"))
