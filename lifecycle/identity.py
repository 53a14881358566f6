"""Who this node is: instance id from IMDS, found in resource_config.json, role from its group name.

The role comes only from the instance group name compared with the provisioning
parameters (controller, login, worker groups); never from the instance type (an
"m5 means controller" guess breaks as soon as someone picks another controller type).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from . import files, names

CONTROLLER = "controller"
LOGIN = "login"
WORKER = "worker"


class IdentityError(Exception):
    pass


SLURM = "slurm"
EKS = "eks"
ORCHESTRATORS = (SLURM, EKS)


@dataclass
class ProvisioningParameters:
    cluster_name: str
    controller_group: Optional[str]
    worker_groups: List[str]
    login_group: Optional[str] = None
    fsx_dns_name: Optional[str] = None
    fsx_mountname: Optional[str] = None
    version: str = "1.0.0"
    orchestrator: str = SLURM

    @classmethod
    def load(cls, path: str) -> "ProvisioningParameters":
        try:
            with open(path) as fh:
                raw = json.load(fh)
        except (OSError, ValueError) as exc:
            raise IdentityError("cannot read provisioning parameters %s: %s" % (path, exc)) from None
        orchestrator = str(raw.get("orchestrator") or SLURM)
        if orchestrator not in ORCHESTRATORS:
            raise IdentityError("provisioning parameters %s: orchestrator %r is none of %s"
                                % (path, orchestrator, ", ".join(ORCHESTRATORS)))
        # EKS clusters have no Slurm controller: only worker groups.
        required = ("cluster_name", "worker_groups") if orchestrator == EKS else (
            "cluster_name", "controller_group", "worker_groups")
        missing = [k for k in required if not raw.get(k)]
        if missing:
            raise IdentityError("provisioning parameters %s lack %s" % (path, ", ".join(missing)))
        workers = raw["worker_groups"]
        if isinstance(workers, str):
            workers = [workers]
        return cls(
            cluster_name=str(raw["cluster_name"]),
            controller_group=str(raw["controller_group"]) if raw.get("controller_group") else None,
            worker_groups=[str(w) for w in workers],
            login_group=raw.get("login_group") or None,
            fsx_dns_name=raw.get("fsx_dns_name") or None,
            fsx_mountname=raw.get("fsx_mountname") or None,
            version=str(raw.get("version", "1.0.0")),
            orchestrator=orchestrator,
        )


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
    worker_count: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def find_provisioning_parameters(settings) -> str:
    """The explicit path, else provisioning_parameters.json next to the scripts or at the bundle root."""
    if settings.provisioning_parameters:
        return settings.provisioning_parameters
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(d, names.PROVISIONING_PARAMETERS)
                  for d in (here, os.path.dirname(here), settings.bundle_root, os.getcwd())]
    for cand in candidates:
        if os.path.isfile(cand):
            return cand
    raise IdentityError("%s not found (looked in %s)" % (names.PROVISIONING_PARAMETERS, ", ".join(candidates)))


def role_of(group: str, params: ProvisioningParameters) -> str:
    if params.controller_group and group == params.controller_group:
        return CONTROLLER
    if params.login_group and group == params.login_group:
        return LOGIN
    if group in params.worker_groups:
        return WORKER
    raise IdentityError(
        "instance group %r is none of controller %r, login %r, workers %s in the provisioning parameters"
        % (group, params.controller_group, params.login_group, params.worker_groups))


def identify(resource_config: Dict, instance_id: str, params: ProvisioningParameters,
             instance_type: Optional[str] = None) -> NodeInfo:
    """Match ``instance_id`` in the resource config and derive role and controller addresses."""
    groups = resource_config.get("InstanceGroups") or []
    mine = None
    for group in groups:
        for inst in group.get("Instances") or []:
            if inst.get("InstanceId") == instance_id:
                mine = (group, inst)
    if mine is None:
        known = sorted(i.get("InstanceId", "?") for g in groups for i in (g.get("Instances") or []))
        raise IdentityError("instance %s is not in resource_config.json (it lists %d instance(s): %s)"
                            % (instance_id, len(known), ", ".join(known[:8]) or "none"))
    group, inst = mine
    name = group.get("Name") or group.get("InstanceGroupName") or ""
    role = role_of(name, params)
    controllers = [i for g in groups if (g.get("Name") or g.get("InstanceGroupName")) == params.controller_group
                   for i in (g.get("Instances") or [])]
    if not controllers and params.orchestrator == SLURM:
        raise IdentityError("no instance of controller group %r in resource_config.json" % params.controller_group)
    workers = sum(len(g.get("Instances") or []) for g in groups
                  if (g.get("Name") or g.get("InstanceGroupName")) in params.worker_groups)
    return NodeInfo(
        cluster_name=params.cluster_name,
        instance_id=instance_id,
        instance_name=inst.get("InstanceName", ""),
        group=name,
        role=role,
        ip=inst.get("CustomerIpAddress", ""),
        instance_type=group.get("InstanceType") or instance_type,
        controller_ips=[c.get("CustomerIpAddress", "") for c in controllers if c.get("CustomerIpAddress")],
        controller_names=[c.get("InstanceName", "") for c in controllers],
        worker_count=workers,
    )


def run(ctx) -> str:
    """The identify step: writes names.NODE_INFO and sets ctx.node / ctx.params."""
    params_path = find_provisioning_parameters(ctx.s)
    ctx.params = ProvisioningParameters.load(params_path)
    rc_path = ctx.path(ctx.s.resource_config)
    try:
        with open(rc_path) as fh:
            rc = json.load(fh)
    except (OSError, ValueError) as exc:
        raise IdentityError("cannot read %s: %s" % (rc_path, exc)) from None
    client = ctx.imds
    instance_id = client.instance_id()
    node = identify(rc, instance_id, ctx.params)
    if not node.instance_type:
        node.instance_type = client.instance_type()
    ctx.node = node
    changed = files.write_file(ctx.path(names.NODE_INFO), node.to_json())
    return "%s is %s in group %s (%s, %s)%s" % (
        instance_id, node.role, node.group, node.ip or "no ip", node.instance_type,
        "" if changed else "; node info unchanged")


def load_node(ctx) -> NodeInfo:
    """The node info an earlier identify step wrote (when a step runs on its own)."""
    if ctx.node is None:
        ctx.node = NodeInfo(**ctx.node_info())
        ctx.params = ProvisioningParameters.load(find_provisioning_parameters(ctx.s))
    return ctx.node
