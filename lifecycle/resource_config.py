"""HyperPod's ``/opt/ml/config/resource_config.json``: the cluster's instances, as HyperPod writes them.

Shapes (awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/tools/devops-agent/docs/
hyperpod-mental-model.md, "Key config files"; LifecycleScripts/base-config/lifecycle_script.py,
class ResourceConfig; Extensions/detect-node/detect_node.sh):
- ``ClusterConfig {ClusterArn, ClusterName, ClusterType}``; Slurm clusters add
  ``SlurmConfig {PrimaryControllerIp, SecondaryControllerIps}`` (ClusterType ``Slurm``), EKS clusters
  ``KubernetesConfig {EksClusterName, EksClusterEndpoint, ...}`` (ClusterType ``Kubernetes``);
- ``InstanceGroups [{Name, InstanceType, Instances [{InstanceName, InstanceId, AgentIpAddress,
  CustomerIpAddress, InstanceLabel}]}]``. On EKS the instances are named ``hyperpod-i-<instance id>``
  and ``InstanceId`` may be absent; ``Instances`` may be null for a group scaled to 0.
This node is found by instance id, else by ``InstanceName == "hyperpod-" + instance id``, else by one of
its own addresses equal to ``CustomerIpAddress`` (what AWS's reference scripts match on).

Every value that later lands in a node file (ssh_config host lists, known_hosts, the Slurm drop-in) is checked
here (fields.py): ``CustomerIpAddress`` dotted IPv4, ``InstanceName``/``InstanceId`` one host-like token,
group and cluster names HyperPod's name pattern. A value that fails is a ResourceConfigError naming the
field, so a blank or a line break never reaches a line-based file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hpq.vocab import EKS, SLURM

from . import fields, files

CLUSTER_TYPES = {"Slurm": SLURM, "Kubernetes": EKS}


class ResourceConfigError(Exception):
    pass


@dataclass(frozen=True)
class Instance:
    group: str
    instance_type: Optional[str]
    name: str
    instance_id: str
    customer_ip: str
    agent_ip: str

    @property
    def label(self) -> str:
        return self.instance_id or self.name or self.customer_ip or "?"


def _str(value) -> str:
    return value if isinstance(value, str) else ""


def _field(value, check: Callable, what: str, path: str) -> str:
    """``value`` when it is a string passing ``check``; "" when absent, null or empty (not given)."""
    text = _str(value)
    if not text:
        return ""
    try:
        return check(text, what)
    except fields.FieldError as exc:
        raise ResourceConfigError("%s: %s" % (path, exc)) from None


class ResourceConfig:
    def __init__(self, doc: Dict, path: str = "resource_config.json"):
        if not isinstance(doc, dict) or not isinstance(doc.get("InstanceGroups"), list):
            raise ResourceConfigError("%s has no InstanceGroups list" % path)
        self.path = path
        self.doc = doc
        cc = doc.get("ClusterConfig") if isinstance(doc.get("ClusterConfig"), dict) else {}
        self.cluster = cc
        self.cluster_name = _field(cc.get("ClusterName"), fields.group_name, "ClusterConfig.ClusterName", path)
        self.cluster_arn = _str(cc.get("ClusterArn"))
        self.cluster_type = _str(cc.get("ClusterType"))
        self.instances: List[Instance] = []
        for g, group in enumerate(doc["InstanceGroups"]):
            if not isinstance(group, dict):
                continue
            where = "InstanceGroups[%d]" % g
            name = _field(group.get("Name") or group.get("InstanceGroupName"), fields.group_name, where + ".Name",
                          path)
            itype = _field(group.get("InstanceType"), fields.token, where + ".InstanceType", path)
            instances = group.get("Instances") or []
            for i, inst in enumerate(instances if isinstance(instances, list) else []):
                if isinstance(inst, dict):
                    at = "%s.Instances[%d]." % (where, i)
                    self.instances.append(Instance(
                        group=name, instance_type=itype or None,
                        name=_field(inst.get("InstanceName"), fields.token, at + "InstanceName", path),
                        instance_id=_field(inst.get("InstanceId"), fields.token, at + "InstanceId", path),
                        customer_ip=_field(inst.get("CustomerIpAddress"), fields.ipv4, at + "CustomerIpAddress", path),
                        agent_ip=_str(inst.get("AgentIpAddress"))))
        _ = self.slurm_controller_ips  # checked now, not at first use

    @classmethod
    def load(cls, path: str) -> "ResourceConfig":
        try:
            doc = files.read_json(path)
        except files.InputError as exc:
            raise ResourceConfigError(str(exc)) from None
        return cls(doc, path)

    @property
    def orchestrator(self) -> Optional[str]:
        """slurm or eks from ClusterType (else from which config block is there); None when neither says."""
        if self.cluster_type in CLUSTER_TYPES:
            return CLUSTER_TYPES[self.cluster_type]
        if isinstance(self.cluster.get("KubernetesConfig"), dict):
            return EKS
        if isinstance(self.cluster.get("SlurmConfig"), dict):
            return SLURM
        return None

    @property
    def region(self) -> Optional[str]:
        """The region field of ClusterArn (arn:aws:sagemaker:<region>:<account>:cluster/<id>)."""
        parts = self.cluster_arn.split(":")
        return parts[3] if len(parts) > 5 and parts[3] else None

    @property
    def slurm_controller_ips(self) -> List[str]:
        """PrimaryControllerIp then SecondaryControllerIps from SlurmConfig (HyperPod's own answer)."""
        sc = self.cluster.get("SlurmConfig")
        if not isinstance(sc, dict):
            return []
        what = "ClusterConfig.SlurmConfig."
        ips = [_field(sc.get("PrimaryControllerIp"), fields.ipv4, what + "PrimaryControllerIp", self.path)]
        secondary = sc.get("SecondaryControllerIps") or []
        ips += [_field(ip, fields.ipv4, what + "SecondaryControllerIps", self.path)
                for ip in (secondary if isinstance(secondary, list) else [secondary])]
        return [ip for ip in ips if ip]

    def in_group(self, group: Optional[str]) -> List[Instance]:
        return [i for i in self.instances if group and i.group == group]

    def find(self, instance_id: Optional[str], node_ips: Sequence[str]) -> Tuple[Instance, str]:
        """This node's entry and how it was matched; ResourceConfigError when it is not there or ambiguous."""
        if instance_id:
            for what, matches in (
                ("InstanceId", [i for i in self.instances if i.instance_id == instance_id]),
                ("InstanceName hyperpod-%s" % instance_id,
                 [i for i in self.instances if i.name == "hyperpod-" + instance_id]),
            ):
                if len(matches) == 1:
                    return matches[0], what
                if len(matches) > 1:
                    raise ResourceConfigError("%s lists %d instances matching %s" % (self.path, len(matches), what))
        mine = [i for i in self.instances if i.customer_ip and i.customer_ip in node_ips]
        if len(mine) == 1:
            return mine[0], "CustomerIpAddress %s" % mine[0].customer_ip
        if len(mine) > 1:
            raise ResourceConfigError("%s: this node's addresses %s match %d instances (%s); cannot tell which "
                                      "is this node" % (self.path, ", ".join(node_ips), len(mine),
                                                        ", ".join(i.label for i in mine)))
        known = [i.label for i in self.instances]
        raise ResourceConfigError(
            "this node (instance %s, addresses %s) is not in %s: no InstanceId, no InstanceName hyperpod-<id>, "
            "no CustomerIpAddress matches; it lists %d instance(s): %s"
            % (instance_id or "unknown: IMDS unreachable", ", ".join(node_ips) or "none found", self.path,
               len(known), ", ".join(known[:8]) or "none"))


def slurm_node_name(ip: str) -> str:
    """HyperPod's Slurm NodeName for a customer IP: ``ip-a-b-c-d`` (hyperpod-mental-model.md, slurm.conf)."""
    return "ip-" + ip.replace(".", "-") if ip else ""
