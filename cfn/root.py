"""Root stack: user-facing parameters and the wiring of nested stacks through their outputs.

Nested TemplateURLs are built from the TemplateBaseUrl parameter, so a published
root deploys from the console as is. A stack depends on another only by consuming
its outputs, so independent stacks (Storage/FSx and EKS) are created in parallel.
Root parameters copy their definition (type, allowed values, pattern) from the
nested parameter they feed, so each constraint is written once.
"""

from __future__ import annotations

from typing import Any

from troposphere import Equals, GetAtt, If, Join, Not, Output, Parameter, Ref, cloudformation

from hpq import __version__
from hpq.cfn import common, helm, iam, observability, regions
from hpq.cfn.variants import (
    EKS,
    HELM,
    HYPERPOD,
    IAM,
    NETWORKING,
    OBSERVABILITY,
    S3,
    SECURITY,
    STORAGE,
    VALIDATION,
    Size,
    Variant,
)
from hpq.lifecycle import names

BASE_URL_PATTERN = r"^https://[^\s/]+(/[^\s]*)?[^\s/]$"
HAS_OBSERVABILITY = "ObservabilityEnabled"
HAS_VALIDATION = "ValidationEnabled"
HAS_TRAINING_PLAN = "HasTrainingPlan"
# The Observability stack's outputs the root shows (hpq observe reads them from the root stack).
OBSERVABILITY_OUTPUTS = [
    (observability.OUT_WORKSPACE_ID, "Managed Prometheus workspace ID."),
    (observability.OUT_WORKSPACE_ARN, "Managed Prometheus workspace ARN."),
    (observability.OUT_REMOTE_WRITE_URL, "Remote-write URL of the workspace (SigV4, service aps)."),
    (observability.OUT_QUERY_URL, "Query URL of the workspace (SigV4, service aps)."),
    (observability.OUT_RULES_NAMESPACE, "Rule groups namespace with hpq's alert rules."),
    (observability.OUT_GRAFANA_URL, "Managed Grafana URL (or why there is none)."),
]


def stack_id(name: str) -> str:
    return f"{name}Stack"


def stack_file(name: str) -> str:
    return f"{name}.json"


def _out(stack: str, name: str) -> GetAtt:
    return GetAtt(stack_id(stack), f"Outputs.{name}")


def _param_refs(node: Any) -> set[str]:
    """Parameter names a rule references through Ref (pseudo parameters excluded)."""
    if isinstance(node, dict):
        out: set[str] = set()
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str) and not value.startswith("AWS::"):
                out.add(value)
            else:
                out |= _param_refs(value)
        return out
    if isinstance(node, list):
        return set().union(*(_param_refs(v) for v in node)) if node else set()
    return set()


def _lift_rules(t: common.Template, nested: dict[str, common.Template]) -> None:
    """Repeat each nested stack's Rules in the root when the root has every parameter they name.

    A nested stack checks its Rules only when CloudFormation gets to it (after the VPC, the EKS cluster
    ...); the root checks them before anything is created, and the console shows the message there."""
    from troposphere import encode_to_dict

    for stack in nested.values():
        for name, rule in stack.rules.items():
            body = encode_to_dict(rule)
            if _param_refs(body) <= set(t.parameters) and name not in t.rules:
                t.add_rule(name, body)


def _add_region_rule(t: common.Template, variant: Variant, nested: dict[str, common.Template]) -> None:
    """Refuse a region whose CloudFormation lacks a resource type the variant creates (cfn/regions.py), before
    anything is created; the Observability stack's region-conditioned Grafana does not count."""
    types = regions.required_types([n.to_dict() for n in nested.values()] + [t.to_dict()])
    where = regions.regions_with(types)
    t.add_rule(regions.REGION_RULE, {"Assertions": [{
        "Assert": {"Fn::Contains": [list(where), Ref("AWS::Region")]},
        "AssertDescription": f"hpq {variant.name} deploys only where CloudFormation has every resource type it "
                             f"creates (SageMaker HyperPod, EKS, FSx ...): {', '.join(where)}.",
    }]})


def build(variant: Variant, size: Size, nested: dict[str, common.Template]) -> common.Template:
    t = common.new_template(
        f"hpq {variant.name} ({size.name}): SageMaker HyperPod with {'EKS' if variant.eks else 'Slurm'}"
        f" on {variant.accelerator_label} instances, hyperpod-quickstart {__version__}."
    )

    def copy(stack: str, name: str, root_name: str | None = None, **override: Any) -> Ref:
        """Root parameter with the same definition as the nested one it feeds."""
        spec = nested[stack].parameters[name].to_dict()
        spec.update(override)
        t.add_parameter(Parameter(root_name or name, **spec))
        return Ref(root_name or name)

    cluster = copy(HYPERPOD, "ClusterName", Default=f"hpq-{variant.name}")
    worker_type = copy(HYPERPOD, "WorkerInstanceType",
                       Description=f"Worker instance type ({variant.accelerator_label} types from the hpq catalog).")
    worker_count = copy(HYPERPOD, "WorkerCount")
    plan = copy(HYPERPOD, "TrainingPlanArn", Default="",
                Description="Optional SageMaker training plan for the workers; required for a worker type without an "
                            "on-demand HyperPod offer in the region (e.g. ml.p5e.48xlarge).")
    checks = copy(HYPERPOD, "OnStartDeepHealthChecks")
    threads = copy(HYPERPOD, "ThreadsPerCore")
    ebs = copy(HYPERPOD, "EbsVolumeSizeGB")
    if variant.slurm:
        ctl_type = copy(HYPERPOD, "ControllerInstanceType")
        login_on = copy(HYPERPOD, "EnableLoginGroup")
        login_type = copy(HYPERPOD, "LoginInstanceType")
        prolog_on = copy(S3, "EnableNodeProlog")
    provisioning = copy(HYPERPOD, "NodeProvisioningMode")  # both orchestrators (cfn/hyperpod.py)
    az = copy(NETWORKING, "AvailabilityZoneId")
    vpc_cidr = copy(NETWORKING, "VpcCidr")
    fsx_capacity = copy(STORAGE, "StorageCapacityGiB", "FsxStorageCapacityGiB")
    fsx_throughput = copy(STORAGE, "PerUnitStorageThroughput", "FsxThroughputPerUnit")
    if variant.eks:
        eks_az = copy(NETWORKING, "EksAvailabilityZoneId")
        eks_az2 = copy(NETWORKING, "EksSecondAvailabilityZoneId")
        k8s = copy(EKS, "KubernetesVersion")
        support = copy(EKS, "EksSupportType")
        public_cidrs = copy(EKS, "EksPublicAccessCidrs")
        layer = copy(HELM, "KubectlLayerArn")
        layer_key = copy(HELM, "HelmLayerS3Key")
        chart_source = copy(HELM, "HelmChartSource")
        chart_path = copy(HELM, "HelmChartPath")
        chart_version = copy(HELM, "HelmChartVersion")
    obs_on = common.param(t, "EnableObservability", "Create an Amazon Managed Prometheus workspace with hpq's alert "
                          "rules, ship node/GPU/EFA/Slurm metrics to it (EKS: the HyperPod observability add-on), "
                          "and Managed Grafana where the region offers it (needs IAM Identity Center).",
                          Default="false", AllowedValues=["true", "false"])
    val_on = common.param(t, "EnableValidation", "Route HyperPod health/state events to an SNS topic.",
                          Default="false", AllowedValues=["true", "false"])
    email = copy(VALIDATION, "NotificationEmail")
    base = common.param(t, "TemplateBaseUrl", "https URL of the folder holding the nested templates (no "
                        "trailing slash).", AllowedPattern=BASE_URL_PATTERN,
                        ConstraintDescription="an https:// URL without a trailing slash.")
    assets_bucket = copy(S3, "AssetsBucket", Description="Bucket holding the node bundle (hpq deploy/publish "
                         "upload it).")
    assets_prefix = copy(S3, "AssetsPrefix", Default=names.node_bundle_prefix(__version__),
                         Description="Key prefix of the node bundle in AssetsBucket, ending in '/'.")
    t.add_condition(HAS_OBSERVABILITY, Equals(obs_on, "true"))
    t.add_condition(HAS_TRAINING_PLAN, Not(Equals(plan, "")))
    t.add_condition(HAS_VALIDATION, Equals(val_on, "true"))

    def stack(name: str, params: dict[str, Any], condition: str | None = None) -> None:
        kw: dict[str, Any] = {"Condition": condition} if condition else {}
        missing = set(nested[name].parameters) - set(params)
        required = {p for p in missing if "Default" not in nested[name].parameters[p].properties}
        assert not required, f"{name} stack parameters not wired: {sorted(required)}"
        t.add_resource(cloudformation.Stack(
            stack_id(name), TemplateURL=Join("", [base, "/" + stack_file(name)]), Parameters=params, **kw))

    net_params = {"AvailabilityZoneId": az, "VpcCidr": vpc_cidr}
    if variant.eks:
        net_params.update({"EksAvailabilityZoneId": eks_az, "EksSecondAvailabilityZoneId": eks_az2})
    stack(NETWORKING, net_params)
    stack(SECURITY, {"VpcId": _out(NETWORKING, names.OUT_VPC_ID)})
    node_subnet = _out(NETWORKING, names.OUT_NODE_SUBNET_ID)
    sg = _out(SECURITY, names.OUT_SECURITY_GROUP_ID)
    stack(STORAGE, {"ClusterName": cluster, "NodeSubnetId": node_subnet, "SecurityGroupId": sg,
                    "StorageCapacityGiB": fsx_capacity, "PerUnitStorageThroughput": fsx_throughput})
    def obs_out(name: str) -> If:
        return If(HAS_OBSERVABILITY, _out(OBSERVABILITY, name), "")

    s3_params = {"ClusterName": cluster, "AssetsBucket": assets_bucket, "AssetsPrefix": assets_prefix}
    if variant.slurm:  # hpq-cluster.json names the filesystem (cfn/s3.py): the nodes mount it without an API call
        s3_params.update({"EnableLoginGroup": login_on, "FsxDnsName": _out(STORAGE, names.OUT_FSX_DNS),
                          "FsxMountName": _out(STORAGE, names.OUT_FSX_MOUNT),
                          # ... and where the nodes' collector remote-writes (cfn/observability.py)
                          "PrometheusRemoteWriteUrl": obs_out(observability.OUT_REMOTE_WRITE_URL),
                          "EnableNodeProlog": prolog_on})  # hpq-cluster.json's node_prolog (lifecycle/prolog.py)
    stack(S3, s3_params)
    iam_params = {"LifecycleBucketName": _out(S3, names.OUT_LIFECYCLE_BUCKET)}
    if variant.eks:
        iam_params.update({"ClusterName": cluster, "AssetsBucket": assets_bucket})
    else:  # the Slurm nodes' aps:RemoteWrite on the workspace, created before the nodes boot
        iam_params[observability.WORKSPACE_ID_PARAM] = obs_out(observability.OUT_WORKSPACE_ID)
    stack(IAM, iam_params)

    hp_params = {
        "ClusterName": cluster, "NodeSubnetId": node_subnet, "SecurityGroupId": sg,
        "ExecutionRoleArn": _out(IAM, names.OUT_EXECUTION_ROLE_ARN),
        "LifecycleS3Uri": _out(S3, names.OUT_LIFECYCLE_URI), "FsxFileSystemId": _out(STORAGE, names.OUT_FSX_ID),
        "WorkerInstanceType": worker_type, "WorkerCount": worker_count, "ThreadsPerCore": threads,
        "EbsVolumeSizeGB": ebs, "TrainingPlanArn": plan,
        "TrainingPlanInstanceType": If(HAS_TRAINING_PLAN, worker_type, ""),
        "OnStartDeepHealthChecks": checks, "NodeProvisioningMode": provisioning,
    }
    if variant.slurm:
        hp_params.update({"ControllerInstanceType": ctl_type, "EnableLoginGroup": login_on,
                          "LoginInstanceType": login_type})
    if variant.eks:
        stack(EKS, {"ClusterName": cluster, "KubernetesVersion": k8s, "EksSupportType": support,
                    "EksPublicAccessCidrs": Join(",", public_cidrs),
                    "FsxCsiRoleArn": _out(IAM, iam.OUT_FSX_CSI_ROLE_ARN),
                    "SubnetIds": _out(NETWORKING, names.OUT_EKS_SUBNET_IDS), "SecurityGroupId": sg,
                    "ClusterRoleArn": _out(IAM, iam.OUT_EKS_CLUSTER_ROLE_ARN),
                    "HelmRoleArn": _out(IAM, iam.OUT_HELM_ROLE_ARN)})
        stack(HELM, {"EksClusterName": _out(EKS, names.OUT_EKS_CLUSTER_NAME),
                     "HelmRoleArn": _out(IAM, iam.OUT_HELM_ROLE_ARN), "KubectlLayerArn": layer,
                     "AssetsBucket": assets_bucket, "HelmLayerS3Key": layer_key,
                     "HelmChartSource": chart_source, "HelmChartPath": chart_path,
                     "HelmChartVersion": chart_version})
        hp_params.update({"EksClusterArn": _out(EKS, names.OUT_EKS_CLUSTER_ARN),
                          "HelmReleaseId": _out(HELM, helm.OUT_RELEASE)})
    stack(HYPERPOD, hp_params)
    obs_params: dict[str, Any] = {"ClusterName": cluster}
    if variant.eks:  # the add-on goes on after the HyperPod cluster, as in AWS's module
        obs_params.update({"EksClusterName": _out(EKS, names.OUT_EKS_CLUSTER_NAME),
                           "EksClusterArn": _out(EKS, names.OUT_EKS_CLUSTER_ARN),
                           "HyperPodClusterArn": _out(HYPERPOD, names.OUT_CLUSTER_ARN)})
    stack(OBSERVABILITY, obs_params, condition=HAS_OBSERVABILITY)
    stack(VALIDATION, {"ClusterArn": _out(HYPERPOD, names.OUT_CLUSTER_ARN), "NotificationEmail": email},
          condition=HAS_VALIDATION)

    outputs = [
        (names.OUT_CLUSTER_NAME, _out(HYPERPOD, names.OUT_CLUSTER_NAME), "HyperPod cluster name."),
        (names.OUT_CLUSTER_ARN, _out(HYPERPOD, names.OUT_CLUSTER_ARN), "HyperPod cluster ARN."),
        (names.OUT_VPC_ID, _out(NETWORKING, names.OUT_VPC_ID), "VPC ID."),
        (names.OUT_NODE_SUBNET_ID, node_subnet, "Node subnet ID."),
        (names.OUT_SECURITY_GROUP_ID, sg, "Cluster security group ID."),
        (names.OUT_FSX_ID, _out(STORAGE, names.OUT_FSX_ID), "FSx for Lustre filesystem ID."),
        (names.OUT_FSX_DNS, _out(STORAGE, names.OUT_FSX_DNS), "FSx DNS name."),
        (names.OUT_FSX_MOUNT, _out(STORAGE, names.OUT_FSX_MOUNT), "FSx Lustre mount name."),
        (names.OUT_LIFECYCLE_BUCKET, _out(S3, names.OUT_LIFECYCLE_BUCKET), "Lifecycle bucket."),
        (names.OUT_LIFECYCLE_URI, _out(S3, names.OUT_LIFECYCLE_URI), "Lifecycle S3 URI."),
        (names.OUT_EXECUTION_ROLE_ARN, _out(IAM, names.OUT_EXECUTION_ROLE_ARN), "Node execution role ARN."),
    ]
    if variant.eks:
        outputs += [(names.OUT_EKS_CLUSTER_NAME, _out(EKS, names.OUT_EKS_CLUSTER_NAME), "EKS cluster name."),
                    (names.OUT_EKS_CLUSTER_ARN, _out(EKS, names.OUT_EKS_CLUSTER_ARN), "EKS cluster ARN.")]
    for name, value, desc in outputs:
        common.output(t, name, value, desc)
    for name, desc in OBSERVABILITY_OUTPUTS:
        t.add_output(Output(name, Condition=HAS_OBSERVABILITY, Value=_out(OBSERVABILITY, name), Description=desc))
    t.add_output(Output("EventsTopicArn", Condition=HAS_VALIDATION, Value=_out(VALIDATION, "EventsTopicArn"),
                        Description="SNS topic with HyperPod events."))

    groups = [
        ("Cluster", ["ClusterName", "WorkerInstanceType", "WorkerCount", "TrainingPlanArn", "ThreadsPerCore",
                     "EbsVolumeSizeGB", "OnStartDeepHealthChecks"]
         + (["ControllerInstanceType", "EnableLoginGroup", "LoginInstanceType", "EnableNodeProlog"]
            if variant.slurm else [])
         + ["NodeProvisioningMode"]),
        ("Network", ["AvailabilityZoneId"] + (["EksAvailabilityZoneId", "EksSecondAvailabilityZoneId"] if variant.eks else []) + ["VpcCidr"]),
        ("Storage (FSx for Lustre)", ["FsxStorageCapacityGiB", "FsxThroughputPerUnit"]),
    ]
    if variant.eks:
        groups.append(("EKS", ["KubernetesVersion", "EksSupportType", "EksPublicAccessCidrs", "KubectlLayerArn",
                               "HelmChartSource", "HelmChartPath", "HelmChartVersion"]))
    groups += [("Optional stacks", ["EnableObservability", "EnableValidation", "NotificationEmail"]),
               ("Deployment assets (filled by hpq deploy/publish)", ["TemplateBaseUrl", "AssetsBucket",
                                                                     "AssetsPrefix"]
                + (["HelmLayerS3Key"] if variant.eks else []))]
    _lift_rules(t, nested)
    _add_region_rule(t, variant, nested)

    listed = [p for _, ps in groups for p in ps]
    assert sorted(listed) == sorted(t.parameters), "every root parameter belongs to one console group"
    t.set_metadata({"AWS::CloudFormation::Interface": {
        "ParameterGroups": [{"Label": {"default": label}, "Parameters": ps} for label, ps in groups],
    }})
    return t
