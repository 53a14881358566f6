"""Who this node is: its entry in resource_config.json, its role from its instance group.

The entry is matched by the instance id from IMDSv2, else by ``InstanceName == "hyperpod-" + id`` (EKS,
where InstanceId may be absent), else by this node's own address against ``CustomerIpAddress``; an
unreachable IMDS falls back to the address match instead of failing (resource_config.find).

The role comes from the instance group name and hpq-cluster.json, else the documented
provisioning_parameters.json (roles.find); on EKS every node is a worker. Without either file on Slurm,
HyperPod's own ``SlurmConfig.PrimaryControllerIp``/``SecondaryControllerIps`` still tell the controller
apart (login nodes then count as workers). Never from the instance type: an "m5 means controller" guess
breaks as soon as someone picks another controller type.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass, field, fields
from typing import List, Optional

from . import catalog, files, names, roles
from .imds import ImdsError
from .resource_config import EKS, SLURM, ResourceConfig, ResourceConfigError, slurm_node_name

CONTROLLER = "controller"
LOGIN = "login"
WORKER = "worker"


class IdentityError(Exception):
    pass


@dataclass
class NodeInfo:
    cluster_name: str
    instance_id: str
    instance_name: str
    group: str
    role: str
    ip: str
    instance_type: Optional[str]
    controller_ips: List[str] = field(default_factory=list)
    controller_names: List[str] = field(default_factory=list)
    worker_count: int = 0  # instances of the worker groups (without a role file: all but the controllers)
    orchestrator: str = SLURM
    slurm_node_name: str = ""
    partition: Optional[str] = None
    cluster_arn: str = ""
    region: Optional[str] = None
    fsx_dns_name: Optional[str] = None
    fsx_mountname: Optional[str] = None
    fsx_source: str = ""  # the role file that named the FSx filesystem (hpq-cluster.json or provisioning params)
    cluster_ips: List[str] = field(default_factory=list)  # every CustomerIpAddress in resource_config.json
    cluster_hostnames: List[str] = field(default_factory=list)  # InstanceNames and ip-a-b-c-d names
    worker_nodes: List[str] = field(default_factory=list)  # Slurm NodeNames (ip-a-b-c-d) of the workers
    login_nodes: List[str] = field(default_factory=list)  # ... and of the login nodes
    matched_by: str = ""
    role_source: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, doc: dict) -> "NodeInfo":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})


# ---------------------------------------------------------------------------- this node's addresses


def local_addresses(fib_trie: str = "/proc/net/fib_trie") -> List[str]:
    """This host's IPv4 addresses, loopback excluded: the source address the kernel picks for a VPC
    destination first (what AWS's reference lifecycle_script.py get_ip_address uses: a UDP socket
    "connected" to 10.254.254.254, nothing sent), then every LOCAL /32 route in /proc/net/fib_trie."""
    out: List[str] = []
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.connect(("10.254.254.254", 1))
            out.append(s.getsockname()[0])
        finally:
            s.close()
    except OSError:
        pass
    try:
        with open(fib_trie) as fh:
            last = ""
            for line in fh:
                text = line.strip()
                if text.startswith("|--"):
                    last = text[3:].strip()
                elif "/32 host LOCAL" in text and last:
                    out.append(last)
    except OSError:
        pass
    seen: List[str] = []
    for ip in out:
        if ip and not ip.startswith("127.") and ip != "0.0.0.0" and ip not in seen:
            seen.append(ip)
    return seen


# ---------------------------------------------------------------------------- role


def orchestrator_of(rc: ResourceConfig, role_file: Optional[roles.RoleFile]) -> str:
    theirs = rc.orchestrator
    ours = role_file.orchestrator if role_file else None
    if theirs and ours and theirs != ours:
        raise IdentityError("%s says ClusterType %r but %s says orchestrator %r"
                            % (rc.path, rc.cluster_type, role_file.label, ours))
    return theirs or ours or SLURM


def role_of(group: str, ip: str, orchestrator: str, role_file: Optional[roles.RoleFile],
            controller_ips: List[str]) -> str:
    if orchestrator == EKS:
        return WORKER
    if role_file is None:
        return CONTROLLER if ip and ip in controller_ips else WORKER
    if role_file.controller_group and group == role_file.controller_group:
        return CONTROLLER
    if role_file.login_group and group == role_file.login_group:
        return LOGIN
    if group in role_file.worker_groups:
        return WORKER
    raise IdentityError(
        "instance group %r is none of controller %r, login %r, workers %s in %s (a group renamed in the "
        "cluster but not in that file?)" % (group, role_file.controller_group, role_file.login_group,
                                            role_file.worker_groups, role_file.label))


def instance_id_from_name(instance_name: Optional[str]) -> str:
    """EKS entries may lack InstanceId but are named ``hyperpod-<instance id>`` (resource_config.py)."""
    prefix = "hyperpod-"
    if instance_name and instance_name.startswith(prefix + "i-"):
        return instance_name[len(prefix):]
    return ""


def roles_from_provisioning_parameters(node: "NodeInfo") -> bool:
    """Whether the roles came from the documented provisioning_parameters.json (a cluster hpq did not deploy)."""
    return node.role_source.endswith("(%s)" % names.PROVISIONING_PARAMETERS)


def identify(rc: ResourceConfig, instance_id: Optional[str], node_ips: List[str],
             sources: roles.RoleSources, imds_type: Optional[str] = None) -> NodeInfo:
    """This node's NodeInfo from HyperPod's resource config and the role files."""
    role_file = sources.roles
    orchestrator = orchestrator_of(rc, role_file)
    if orchestrator == SLURM and role_file is None and not rc.slurm_controller_ips:
        raise IdentityError("no role for this Slurm node: none of %s exists and %s has no "
                            "ClusterConfig.SlurmConfig.PrimaryControllerIp" % (", ".join(sources.looked), rc.path))
    try:
        mine, how = rc.find(instance_id, node_ips)
    except ResourceConfigError as exc:
        raise IdentityError(str(exc)) from None
    if orchestrator == SLURM:
        controllers = rc.in_group(role_file.controller_group) if role_file else []
        controller_ips = rc.slurm_controller_ips or [c.customer_ip for c in controllers if c.customer_ip]
        if not controller_ips:
            raise IdentityError("no controller address in %s: no SlurmConfig.PrimaryControllerIp and no instance "
                                "in controller group %r" % (rc.path, role_file.controller_group if role_file else None))
        controller_names = [c.name for c in controllers] or [
            i.name for i in rc.instances if i.customer_ip in controller_ips]
    else:
        controller_ips, controller_names = [], []
    role = role_of(mine.group, mine.customer_ip, orchestrator, role_file, controller_ips)
    cluster_name = rc.cluster_name or (role_file.cluster_name if role_file else None) or ""
    itype = mine.instance_type or imds_type
    fsx = sources.fsx
    if role_file and orchestrator == SLURM:
        workers = [i for i in rc.instances if i.group in role_file.worker_groups]
    else:
        workers = [i for i in rc.instances if i.customer_ip not in controller_ips]
    hostnames: List[str] = []
    for inst in rc.instances:
        for name in (inst.name, slurm_node_name(inst.customer_ip)):
            if name and name not in hostnames:
                hostnames.append(name)
    return NodeInfo(
        cluster_name=cluster_name,
        instance_id=mine.instance_id or instance_id or instance_id_from_name(mine.name),
        instance_name=mine.name,
        group=mine.group,
        role=role,
        ip=mine.customer_ip,
        instance_type=catalog.normalize(itype) if itype else None,
        controller_ips=controller_ips,
        controller_names=controller_names,
        worker_count=len(workers),
        orchestrator=orchestrator,
        slurm_node_name=slurm_node_name(mine.customer_ip) if orchestrator == SLURM else "",
        partition=role_file.partitions.get(mine.group) if role_file else None,
        cluster_arn=rc.cluster_arn,
        region=rc.region,
        fsx_dns_name=fsx.fsx_dns_name if fsx else None,
        fsx_mountname=fsx.fsx_mountname if fsx else None,
        fsx_source=fsx.label if fsx and fsx.fsx_dns_name else "",
        cluster_ips=sorted({i.customer_ip for i in rc.instances if i.customer_ip}),
        cluster_hostnames=hostnames,
        worker_nodes=[slurm_node_name(i.customer_ip) for i in workers if i.customer_ip] if orchestrator == SLURM
        else [],
        login_nodes=[slurm_node_name(i.customer_ip) for i in rc.in_group(role_file.login_group if role_file else None)
                     if i.customer_ip] if orchestrator == SLURM else [],
        matched_by=how,
        role_source=role_file.label if role_file else (
            "resource_config.json ClusterType Kubernetes" if orchestrator == EKS
            else "resource_config.json SlurmConfig controller addresses"),
    )


def run(ctx) -> str:
    """The identify step: writes names.NODE_INFO and sets ctx.node."""
    try:
        sources = roles.find(ctx.s)
    except roles.RoleFileError as exc:
        raise IdentityError(str(exc)) from None
    for warning in sources.warnings:
        ctx.log.warning("%s", warning)
    try:
        rc = ResourceConfig.load(ctx.s.resource_config)
    except ResourceConfigError as exc:
        raise IdentityError(str(exc)) from None
    instance_id = None
    try:
        instance_id = ctx.imds.instance_id()
    except ImdsError as exc:
        ctx.log.warning("no instance id (%s): matching this node by its own address instead", exc)
    node_ips = ctx.s.node_ips or local_addresses()
    node = identify(rc, instance_id, node_ips, sources)
    if not node.instance_type and instance_id:
        try:
            node.instance_type = catalog.normalize(ctx.imds.instance_type())
        except ImdsError as exc:
            ctx.log.warning("no instance type in %s for group %s and none from IMDS: %s", rc.path, node.group, exc)
    if not node.cluster_name:
        ctx.log.warning("no cluster name in %s (ClusterConfig.ClusterName) nor in the role file: FSx discovery "
                        "by tag will be skipped", rc.path)
    ctx.node = node
    changed = files.write_file(ctx.path(names.NODE_INFO), node.to_json())
    return "%s is %s in group %s of %s cluster %s (%s, %s; matched by %s; roles from %s)%s" % (
        node.instance_id or node.ip, node.role, node.group, node.orchestrator, node.cluster_name or "?",
        node.ip or "no ip", node.instance_type, node.matched_by, node.role_source,
        "" if changed else "; node info unchanged")


def load_node(ctx) -> NodeInfo:
    """The node info an earlier identify step wrote (when a step runs on its own)."""
    if ctx.node is None:
        try:
            ctx.node = NodeInfo.from_dict(ctx.node_info())
        except FileNotFoundError as exc:
            raise IdentityError("no node info at %s (run the identify step first): %s"
                                % (ctx.path(names.NODE_INFO), exc.strerror)) from None
        except (files.InputError, TypeError) as exc:
            raise IdentityError("node info at %s is not what the identify step writes: %s (run identify again)"
                                % (ctx.path(names.NODE_INFO), exc)) from None
    return ctx.node
