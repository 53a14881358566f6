"""What ``hpq deploy`` will do, decided before it does it: every root parameter's value and why, and the
change set's resource actions.

The parameter rule (docs/updates.md says the same to users). For each parameter the new root template
declares, the FIRST rule that applies gives its value:

1. ``release``: where this release lies (TemplateBaseUrl, AssetsBucket, AssetsPrefix, HelmLayerS3Key):
   always the release being deployed;
2. ``--param``: the value the user passed now;
3. ``--size NAME``: the size preset's value for WorkerCount, FsxStorageCapacityGiB and EbsVolumeSizeGB,
   only when ``--size`` was given (a new stack without ``--size`` gets ``small``);
4. ``kept``: on an update, the value the stack has now (earlier ``--param``s and sizes stay, visibly);
5. ``stack name`` / ``chosen``: on a new stack, ClusterName from the stack name and AZ ids hpq picks;
6. ``default``: the template's default (a new stack, or a parameter this release adds).

A parameter the stack has and the new template no longer declares is listed as ``removed``. Every
parameter is then sent with an explicit ParameterValue, never UsePreviousValue, so what the plan shows is
exactly what CloudFormation gets.

Resource actions come from the change set (CloudFormation API reference, DescribeChangeSet and
ResourceChange: https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_DescribeChangeSet.html,
https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ResourceChange.html). With
IncludeNestedStacks each nested stack's ResourceChange carries the ``ChangeSetId`` of its own change set
(user guide, "Change sets for nested stacks"), which aws/stacks.py describes in turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RELEASE_PARAMETERS = ("TemplateBaseUrl", "AssetsBucket", "AssetsPrefix", "HelmLayerS3Key")

RULE_RELEASE, RULE_PARAM, RULE_KEPT, RULE_DEFAULT = "release", "--param", "kept", "default"
RULE_STACK_NAME, RULE_CHOSEN, RULE_REMOVED = "stack name", "chosen", "removed"

# Resources whose replacement (or removal) loses data or running nodes: an update that would replace one
# needs --yes. The types are the CloudFormation resource types cfn/storage.py, cfn/hyperpod.py, cfn/eks.py use.
GUARDED_TYPES = {
    "AWS::FSx::FileSystem": "the FSx for Lustre file system (its data)",
    "AWS::SageMaker::Cluster": "the HyperPod cluster (every node)",
    "AWS::EKS::Cluster": "the EKS cluster",
}
# ResourceChange.Replacement: True | False | Conditional (API reference, ResourceChange).
REPLACING = ("True", "Conditional")

# What a changed root parameter replaces, derived from the CloudFormation resource reference: a property marked
# "Update requires: Replacement" is a createOnlyProperty in the type's registry schema (checked against cfn-lint's
# copy of the schemas in tests/aws/test_aws_deploy_update.py). (resource type, property path the parameter feeds).
# docs/updates.md explains each chain; the change set remains the authority and the --yes guard reads it.
REPLACED_BY: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "ClusterName": ("the HyperPod cluster (and on EKS the EKS cluster)", [
        ("AWS::SageMaker::Cluster", "/properties/ClusterName"), ("AWS::EKS::Cluster", "/properties/Name"),
        ("AWS::SageMaker::Cluster", "/properties/Orchestrator/Eks")]),
    "AvailabilityZoneId": ("the node subnet, so FSx and the HyperPod cluster", [
        ("AWS::EC2::Subnet", "/properties/AvailabilityZoneId"), ("AWS::FSx::FileSystem", "/properties/SubnetIds"),
        ("AWS::SageMaker::Cluster", "/properties/VpcConfig")]),
    "VpcCidr": ("the VPC, its subnets and security group, so FSx and the HyperPod cluster", [
        ("AWS::EC2::VPC", "/properties/CidrBlock"), ("AWS::EC2::Subnet", "/properties/VpcId"),
        ("AWS::EC2::SecurityGroup", "/properties/VpcId"), ("AWS::FSx::FileSystem", "/properties/SecurityGroupIds"),
        ("AWS::FSx::FileSystem", "/properties/SubnetIds"), ("AWS::SageMaker::Cluster", "/properties/VpcConfig")]),
    "EksAvailabilityZoneId": ("an EKS control-plane subnet (the EKS cluster is updated, not replaced)", [
        ("AWS::EC2::Subnet", "/properties/AvailabilityZoneId")]),
    "EksSecondAvailabilityZoneId": ("an EKS control-plane subnet (the EKS cluster is updated, not replaced)", [
        ("AWS::EC2::Subnet", "/properties/AvailabilityZoneId")]),
}
# Parameters whose properties update in place (not createOnlyProperties): sizes, types, counts, versions.
UPDATED_IN_PLACE: dict[str, list[tuple[str, str]]] = {
    "WorkerCount": [("AWS::SageMaker::Cluster", "/properties/InstanceGroups")],
    "WorkerInstanceType": [("AWS::SageMaker::Cluster", "/properties/InstanceGroups")],
    "EbsVolumeSizeGB": [("AWS::SageMaker::Cluster", "/properties/InstanceGroups")],
    "ControllerInstanceType": [("AWS::SageMaker::Cluster", "/properties/InstanceGroups")],
    "TrainingPlanArn": [("AWS::SageMaker::Cluster", "/properties/InstanceGroups")],
    "ThreadsPerCore": [("AWS::SageMaker::Cluster", "/properties/InstanceGroups")],
    "OnStartDeepHealthChecks": [("AWS::SageMaker::Cluster", "/properties/InstanceGroups")],
    "FsxStorageCapacityGiB": [("AWS::FSx::FileSystem", "/properties/StorageCapacity")],
    "FsxThroughputPerUnit": [("AWS::FSx::FileSystem", "/properties/LustreConfiguration")],
    "KubernetesVersion": [("AWS::EKS::Cluster", "/properties/Version")],
    "EksSupportType": [("AWS::EKS::Cluster", "/properties/UpgradePolicy")],
    "EksPublicAccessCidrs": [("AWS::EKS::Cluster", "/properties/ResourcesVpcConfig")],
}


def size_preset(size: str) -> dict[str, str]:
    """The root parameters a size preset sets (cfn/variants.py SIZES; cfn/root.py names them)."""
    from hpq.cfn.variants import SIZES

    s = SIZES[size]
    return {"WorkerCount": str(s.worker_count), "FsxStorageCapacityGiB": str(s.fsx_capacity_gib),
            "EbsVolumeSizeGB": str(s.ebs_gb)}


def size_of(values: dict[str, str]) -> str | None:
    """The preset whose values the parameters have, if any (names the synthesized template's size)."""
    from hpq.cfn.variants import SIZES

    for name in SIZES:
        if all(values.get(k) == v for k, v in size_preset(name).items()):
            return name
    return None


@dataclass
class ParamChange:
    key: str
    old: str | None  # None: the stack does not have it (a new stack, or a new parameter)
    new: str | None  # None: removed (the new template no longer declares it)
    rule: str

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def as_dict(self) -> dict[str, Any]:
        return {"parameter": self.key, "old": self.old, "new": self.new, "rule": self.rule,
                "changed": self.changed}


@dataclass
class ParameterPlan:
    rows: list[ParamChange] = field(default_factory=list)

    @property
    def values(self) -> dict[str, str]:
        """What CloudFormation gets: every declared parameter, explicitly."""
        return {r.key: r.new for r in self.rows if r.new is not None}

    def set(self, key: str, value: str, rule: str) -> None:
        for r in self.rows:
            if r.key == key:
                r.new, r.rule = value, rule
                return
        self.rows.append(ParamChange(key, None, value, rule))
        self.rows.sort(key=lambda r: r.key)

    def missing(self, declared: dict[str, Any]) -> list[str]:
        have = self.values
        return sorted(k for k in declared if k not in have)


def parameter_plan(declared: dict[str, Any], current: dict[str, str] | None, user: dict[str, str],
                   size: str | None, release: dict[str, str] | None = None) -> ParameterPlan:
    """Apply the rule (module docstring) to every declared parameter; ``current`` is None for a new stack.

    ``user`` values are those synth normalized (p5.48xlarge -> ml.p5.48xlarge); parameters without a value
    yet (a new stack's AZ ids, ClusterName) are left for the caller to fill (``missing``).
    """
    preset = size_preset(size or "small") if (size or current is None) else {}
    size_rule = f"--size {size}" if size else "--size small (new stack default)"
    release = release or {}
    rows: list[ParamChange] = []
    for key in sorted(declared):
        old = None if current is None else current.get(key)
        spec = declared[key] or {}
        if key in release:
            new, rule = release[key], RULE_RELEASE
        elif key in user:
            new, rule = str(user[key]), RULE_PARAM
        elif key in preset:
            new, rule = preset[key], size_rule
        elif old is not None:
            new, rule = old, RULE_KEPT
        elif "Default" in spec:
            new, rule = str(spec["Default"]), RULE_DEFAULT
        else:
            continue
        rows.append(ParamChange(key, old, new, rule))
    for key in sorted(set(current or {}) - set(declared)):
        rows.append(ParamChange(key, (current or {})[key], None, RULE_REMOVED))
    return ParameterPlan(rows)


def _show(value: str | None) -> str:
    return '""' if value == "" else str(value)


def format_parameters(plan: ParameterPlan, creating: bool = False) -> list[str]:
    """One line per parameter: ``~ KEY  old -> new  [rule]`` (``~``: it changes); a new stack shows values."""
    width = max((len(r.key) for r in plan.rows), default=0)
    out = []
    for r in plan.rows:
        if r.new is None:
            shown = f"{_show(r.old)} -> (removed)"
        elif r.old is None:
            shown = _show(r.new) if creating else f"(new) {_show(r.new)}"
        elif r.changed:
            shown = f"{_show(r.old)} -> {_show(r.new)}"
        else:
            shown = _show(r.new)
        mark = "~" if r.changed and not creating else " "
        if r.changed and not creating and r.key in REPLACED_BY and r.old is not None:
            shown += f"  (replaces {REPLACED_BY[r.key][0]})"
        out.append(f"{mark} {r.key:<{width}}  {shown}  [{r.rule}]")
    return out


# --- the change set --------------------------------------------------------------------------------


@dataclass
class ResourceAction:
    """One ResourceChange of the change set, with the nested stack path it is in."""

    path: str  # "" for the root stack, else "HyperPodStack" or "EksStack/..." (logical ids)
    action: str
    logical_id: str
    resource_type: str
    replacement: str = ""
    causes: list[str] = field(default_factory=list)  # property names (and the parameter) that change
    physical_id: str = ""
    nested_change_set: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}/{self.logical_id}" if self.path else self.logical_id

    @property
    def replaces(self) -> bool:
        return self.action == "Modify" and self.replacement in REPLACING

    @property
    def guarded(self) -> bool:
        """Replaces or removes a resource that holds data or nodes (needs --yes)."""
        return self.resource_type in GUARDED_TYPES and (self.replaces or self.action == "Remove")

    def as_dict(self) -> dict[str, Any]:
        return {"stack": self.path, "action": self.action, "logical_id": self.logical_id,
                "type": self.resource_type, "replacement": self.replacement, "causes": self.causes,
                "physical_id": self.physical_id}


def resource_action(path: str, change: dict[str, Any]) -> ResourceAction:
    """A DescribeChangeSet ``Changes[]`` item as a ResourceAction (``Type: Resource`` items)."""
    rc = change.get("ResourceChange") or {}
    details = rc.get("Details") or []

    def target_of(detail: dict[str, Any]) -> tuple[str, str]:
        t = detail.get("Target") or {}
        return (t.get("Name") or t.get("Attribute") or "", t.get("RequiresRecreation", ""))

    # A changed parameter shows as a Dynamic change and a Static ParameterReference one on the same target; the
    # static one says more (user guide, "Example change sets", modifying an input parameter value): keep it only.
    by_parameter = {target_of(d) for d in details if d.get("ChangeSource") == "ParameterReference"}
    causes: list[str] = []
    for detail in details:
        name, recreate = target_of(detail)
        cause = detail.get("CausingEntity") if detail.get("ChangeSource") == "ParameterReference" else None
        if not cause and (name, recreate) in by_parameter:
            continue
        label = name + (f" <- {cause}" if cause else "") + (" (recreates)" if recreate == "Always" else
                                                            " (may recreate)" if recreate == "Conditionally" else "")
        if name and label not in causes:
            causes.append(label)
    return ResourceAction(path, rc.get("Action", ""), rc.get("LogicalResourceId", ""), rc.get("ResourceType", ""),
                          str(rc.get("Replacement") or ""), causes, rc.get("PhysicalResourceId") or "",
                          rc.get("ChangeSetId") or "")


def format_actions(actions: list[ResourceAction]) -> list[str]:
    """One line per resource action; replacements called out in capitals."""
    if not actions:
        return ["  (no resource changes)"]
    out = []
    for a in actions:
        repl = ""
        if a.replaces:
            repl = " REPLACEMENT" if a.replacement == "True" else " REPLACEMENT (conditional)"
        elif a.action == "Modify" and a.replacement:
            repl = " in place"
        why = f": {', '.join(a.causes)}" if a.causes and a.resource_type != "AWS::CloudFormation::Stack" else ""
        out.append(f"  {a.action:<7} {a.where} [{a.resource_type}]{repl}{why}")
    return out


def guarded(actions: list[ResourceAction]) -> list[ResourceAction]:
    return [a for a in actions if a.guarded]


def describe_guarded(actions: list[ResourceAction]) -> str:
    """'replaces the FSx ... (StorageStack/FileSystem)' for the one-line refusal."""
    parts = []
    for a in guarded(actions):
        verb = "removes" if a.action == "Remove" else (
            "replaces" if a.replacement == "True" else "may replace")
        parts.append(f"{verb} {GUARDED_TYPES[a.resource_type]} ({a.where})")
    return "; ".join(parts)
