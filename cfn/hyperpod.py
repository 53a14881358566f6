"""HyperPod stack: the AWS::SageMaker::Cluster itself.

Slurm variants: controller group (+ optional login group) and one worker group;
EKS variants: one worker group with Orchestrator.Eks. Every group uses the ONE
node subnet (EFA cannot cross AZs), the lifecycle bucket, an EBS volume and
automatic node recovery. Worker types are limited to the variant's accelerator.

Slurm is configured the API-driven way (the model AWS is moving to): the cluster gets
``Orchestrator.Slurm.SlurmConfigStrategy: Managed`` and every group a ``SlurmConfig``
with its ``NodeType`` (Controller, Login, Compute) and, for the workers, the partition.
Sources: CloudFormation reference AWS::SageMaker::Cluster ClusterSlurmConfig and
ClusterOrchestratorSlurmConfig; SageMaker Developer Guide "SageMaker HyperPod Slurm
configuration" (sagemaker-hyperpod-ref.html#sagemaker-hyperpod-ref-slurm-configuration)
and "Migrating to API-driven Slurm configuration"
(sagemaker-hyperpod-slurm-api-config-migration.html), which says HyperPod refuses a
cluster that has both this and a provisioning_parameters.json; hpq never writes that file.

``LifeCycleConfig.OnCreate`` is the bare file name ``on_create.sh`` at the root of
SourceS3Uri (the API documents it as a file name; the node bundle carries a root shim).
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import And, Condition, Equals, GetAtt, If, Not, Or, Ref, sagemaker

from hpq.cfn import common, offers
from hpq.lifecycle import catalog, names
from hpq.vocab import SLURM

CONTROLLER_EBS_GB = 100
CONTROLLER_THREADS_PER_CORE = 2
MAX_WORKERS = 256
FSX_ID_TAG_KEY = "hpq:fsx-file-system-id"
# HyperPod manages slurm.conf's partitions from the API configuration (ClusterOrchestratorSlurmConfig).
SLURM_CONFIG_STRATEGY = "Managed"
# A training plan ARN as the AWS::SageMaker::Cluster schema's TrainingPlanArn pattern has it.
TRAINING_PLAN_ARN_PATTERN = r"^$|^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:training-plan/.+$"
INSTANCE_TYPE_PATTERN = r"^$|^ml\.[a-z0-9-]+\.[a-z0-9]+$"
USES_TRAINING_PLAN = "WorkersUseTrainingPlan"
ON_DEMAND_OFFER = "WorkerOnDemandOffer"
ON_DEMAND_WORKERS = "WorkersOnDemand"
NEEDS_PLAN_RULE = "WorkerTypeNeedsATrainingPlan"
# Controller and login types need an on-demand offer in the region too (cfn-lint's data has no controller type in
# e.g. ap-southeast-5 and eu-central-2, where GPU workers are offered); a training plan covers the workers only.
CONTROLLER_OFFER_RULE = "ControllerTypeOfferedInRegion"
LOGIN_OFFER_RULE = "LoginTypeOfferedInRegion"
# OnStartDeepHealthChecks (ClusterInstanceGroup; DeepHealthCheckType InstanceStress | InstanceConnectivity):
# off by default, they add a long hardware stress test to every node's start.
DEEP_HEALTH_CHECKS = {
    "None": None,
    "InstanceStress": ["InstanceStress"],
    "InstanceConnectivity": ["InstanceConnectivity"],
    "InstanceStress,InstanceConnectivity": ["InstanceStress", "InstanceConnectivity"],
}
# NodeProvisioningMode: the property only takes "Continuous"; leaving it out is HyperPod's standard mode
# (all-or-nothing creation), the default here as in AWS's console stack (hyperpod-cluster-template.yaml).
# Offered on both orchestrators. The sources disagree on Slurm (read 2026-11-26): botocore 1.44.5's SageMaker model
# (data/sagemaker/2017-07-24/service-2.json, CreateCluster NodeProvisioningMode) says Continuous "is only supported
# for EKS orchestrated clusters", but the same model's ClusterOrchestratorSlurmConfig.AccountingDatabase "is only
# supported for clusters using Continuous", which exists only on Slurm, and CloudFormation's own resource schema
# (cfn-lint 1.58.0's AWS::SageMaker::Cluster provider schema: NodeProvisioningMode enum ["Continuous"], no
# orchestrator restriction) accepts it on any cluster. hpq follows the CloudFormation schema, the interface it
# deploys through; hpq deploy's pre-flight warns on Slurm that the API reference still says EKS only.
PROVISIONING_MODES = ("Standard", "Continuous")


@dataclass(frozen=True)
class HyperPodConfig:
    orchestrator: str  # SLURM or EKS
    worker_types: tuple[str, ...]
    default_worker_type: str
    default_worker_count: int
    default_ebs_gb: int
    controller_types: tuple[str, ...] = ()
    default_controller_type: str = catalog.DEFAULT_CONTROLLER_TYPE
    worker_group: str = names.WORKER_GROUP
    controller_group: str = names.CONTROLLER_GROUP
    login_group: str = names.LOGIN_GROUP
    partition: str = common.SLURM_PARTITION

    @property
    def slurm(self) -> bool:
        return self.orchestrator == SLURM


def _group(name: str, instance_type, count, ebs_gb, threads, role, uri, **extra) -> sagemaker.ClusterInstanceGroup:
    return sagemaker.ClusterInstanceGroup(
        InstanceGroupName=name, InstanceType=instance_type, InstanceCount=count, ExecutionRole=role,
        ThreadsPerCore=threads,
        LifeCycleConfig=sagemaker.ClusterLifeCycleConfig(SourceS3Uri=uri, OnCreate=names.ON_CREATE_ENTRY),
        InstanceStorageConfigs=[sagemaker.ClusterInstanceStorageConfig(
            EbsVolumeConfig=sagemaker.ClusterEbsVolumeConfig(VolumeSizeInGB=ebs_gb))],
        **extra,
    )


def slurm_config(node_type: str, partition: str | None = None) -> sagemaker.ClusterSlurmConfig:
    """ClusterSlurmConfig: NodeType Controller/Login/Compute; workers name their (one) partition."""
    if partition is None:
        return sagemaker.ClusterSlurmConfig(NodeType=node_type)
    return sagemaker.ClusterSlurmConfig(NodeType=node_type, PartitionNames=[partition])


def _worker_group(t: common.Template, cfg: HyperPodConfig, worker_type, worker_count, ebs, threads, role, uri):
    """The worker group: on demand where the type has an offer in the region, else on a training plan.

    With TrainingPlanArn the group gets the plan and its type comes through TrainingPlanInstanceType (the
    root passes WorkerInstanceType): the on-demand offer data does not apply to reserved capacity, and
    HyperPod checks the type against the plan. Without one, the group is on demand only under the
    WorkerOnDemandOffer condition (cfn-lint's offer data, see cfn/offers.py; cfn-lint checks every value
    that reaches it), and the WorkerTypeNeedsATrainingPlan rule refuses a type/region without an offer
    before anything is created.
    """
    # No Default on these two: the root always passes them, and cfn-lint then has no value to resolve into a
    # group that only exists on a plan (the on-demand offer data does not apply to reserved capacity).
    plan = common.param(t, "TrainingPlanArn", "SageMaker training plan for the workers, or empty (the root passes "
                        "its own TrainingPlanArn).", AllowedPattern=TRAINING_PLAN_ARN_PATTERN,
                        ConstraintDescription="empty or a training plan ARN.")
    plan_type = common.param(t, "TrainingPlanInstanceType", "Worker type reserved by TrainingPlanArn, or empty (the "
                             "root passes WorkerInstanceType when a plan is given).",
                             AllowedPattern=INSTANCE_TYPE_PATTERN, ConstraintDescription="empty or an ml.* type.")
    checks = common.param(t, "OnStartDeepHealthChecks", "Deep health checks on every worker as it starts (long; "
                          "None skips them).", Default="None", AllowedValues=list(DEEP_HEALTH_CHECKS))
    t.add_condition(USES_TRAINING_PLAN, Not(Equals(plan, "")))
    t.add_condition(ON_DEMAND_OFFER, offers.offer_condition("WorkerInstanceType", cfg.worker_types))
    t.add_condition(ON_DEMAND_WORKERS, And(Condition(ON_DEMAND_OFFER), Not(Condition(USES_TRAINING_PLAN))))
    t.add_rule(NEEDS_PLAN_RULE, {"Assertions": [{
        "Assert": Or(Not(Equals(Ref("TrainingPlanArn"), "")),
                     offers.offer_rule_assertion("WorkerInstanceType", cfg.worker_types)),
        "AssertDescription": "WorkerInstanceType has no on-demand SageMaker HyperPod offer in this region: give "
                             "TrainingPlanArn (a SageMaker training plan for that type) or deploy in a region that "
                             "offers it (hpq deploy names them).",
    }]})
    t.add_rule("TrainingPlanNamesItsType", {"Assertions": [{
        "Assert": Or(And(Equals(plan, ""), Equals(plan_type, "")),
                     And(Not(Equals(plan, "")), Not(Equals(plan_type, "")))),
        "AssertDescription": "TrainingPlanArn and TrainingPlanInstanceType go together.",
    }]})
    extra = {"SlurmConfig": slurm_config("Compute", cfg.partition)} if cfg.slurm else {}
    for name, checks_list in DEEP_HEALTH_CHECKS.items():
        if checks_list:
            t.add_condition(_checks_condition(name), Equals(checks, name))
    extra["OnStartDeepHealthChecks"] = _checks_value()
    on_plan = _group(cfg.worker_group, plan_type, worker_count, ebs, threads, role, uri, TrainingPlanArn=plan,
                     **extra)
    on_demand = _group(cfg.worker_group, worker_type, worker_count, ebs, threads, role, uri, **extra)
    # Neither a plan nor an offer never gets this far: the WorkerTypeNeedsATrainingPlan rule refuses it.
    return If(ON_DEMAND_WORKERS, on_demand, on_plan)


def _add_offer_rules(t: common.Template, cfg: HyperPodConfig) -> None:
    """Controller and (when enabled) login types must have an on-demand offer in the region (cfn/offers.py)."""
    where = "has no on-demand SageMaker HyperPod offer in this region (hpq deploy names the regions that offer it)"
    t.add_rule(CONTROLLER_OFFER_RULE, {"Assertions": [{
        "Assert": offers.offer_rule_assertion("ControllerInstanceType", cfg.controller_types),
        "AssertDescription": f"ControllerInstanceType {where}: choose another type or region.",
    }]})
    t.add_rule(LOGIN_OFFER_RULE, {"Assertions": [{
        "Assert": Or(Not(Equals(Ref("EnableLoginGroup"), "true")),
                     offers.offer_rule_assertion("LoginInstanceType", cfg.controller_types)),
        "AssertDescription": f"LoginInstanceType {where}: choose another type or region, or EnableLoginGroup=false.",
    }]})


def _checks_condition(name: str) -> str:
    return "DeepHealthChecks" + name.replace(",", "")


def _checks_value():
    """Fn::If chain from the OnStartDeepHealthChecks parameter to the property's list (or no property)."""
    value = Ref("AWS::NoValue")
    for name, checks_list in reversed(list(DEEP_HEALTH_CHECKS.items())):
        if checks_list:
            value = If(_checks_condition(name), checks_list, value)
    return value


def build(cfg: HyperPodConfig) -> common.Template:
    t = common.new_template(f"hpq hyperpod: SageMaker HyperPod cluster ({cfg.orchestrator}).")
    cluster_name = common.cluster_name_param(t)
    subnet = common.param(t, "NodeSubnetId", "The one node subnet.", type_="AWS::EC2::Subnet::Id")
    sg = common.param(t, "SecurityGroupId", "Cluster security group.", type_="AWS::EC2::SecurityGroup::Id")
    role = common.param(t, "ExecutionRoleArn", "Node execution role ARN.", AllowedPattern=common.ROLE_ARN_PATTERN,
                        ConstraintDescription="an IAM role ARN.")
    uri = common.param(t, "LifecycleS3Uri", "s3:// prefix holding the lifecycle bundle.",
                       AllowedPattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$",
                       ConstraintDescription="an s3:// URI.")
    fsx_id = common.param(t, "FsxFileSystemId", "FSx filesystem the nodes mount (HyperPod waits for it).",
                          AllowedPattern=r"^fs-[0-9a-f]{8,}$", ConstraintDescription="an FSx filesystem ID.")
    worker_type = common.param(t, "WorkerInstanceType", "Worker instance type.", Default=cfg.default_worker_type,
                               AllowedValues=list(cfg.worker_types))
    worker_count = common.param(t, "WorkerCount", "Number of workers.", type_="Number",
                                Default=str(cfg.default_worker_count), MinValue=1, MaxValue=MAX_WORKERS)
    threads = common.param(t, "ThreadsPerCore", "Threads per core on workers (1 disables hyperthreading).",
                           type_="Number", Default="1", AllowedValues=["1", "2"])
    ebs = common.param(t, "EbsVolumeSizeGB", "Extra EBS volume per worker (GB).", type_="Number",
                       Default=str(cfg.default_ebs_gb), MinValue=1, MaxValue=16384)

    groups = []
    if cfg.slurm:
        ctl_type = common.param(t, "ControllerInstanceType", "Slurm controller instance type.",
                                Default=cfg.default_controller_type, AllowedValues=list(cfg.controller_types))
        login_on = common.param(t, "EnableLoginGroup", "Add a login node group.", Default="false",
                                AllowedValues=["true", "false"])
        login_type = common.param(t, "LoginInstanceType", "Login node instance type.",
                                  Default=cfg.default_controller_type, AllowedValues=list(cfg.controller_types))
        t.add_condition("HasLoginGroup", {"Fn::Equals": [login_on, "true"]})
        _add_offer_rules(t, cfg)
        groups.append(_group(cfg.controller_group, ctl_type, 1, CONTROLLER_EBS_GB, CONTROLLER_THREADS_PER_CORE,
                             role, uri, SlurmConfig=slurm_config("Controller")))
        groups.append(If("HasLoginGroup", _group(cfg.login_group, login_type, 1, CONTROLLER_EBS_GB,
                                                 CONTROLLER_THREADS_PER_CORE, role, uri,
                                                 SlurmConfig=slurm_config("Login")), Ref("AWS::NoValue")))
    groups.append(_worker_group(t, cfg, worker_type, worker_count, ebs, threads, role, uri))

    kwargs = {}
    if cfg.slurm:
        kwargs["Orchestrator"] = sagemaker.Orchestrator(Slurm=sagemaker.ClusterOrchestratorSlurmConfig(
            SlurmConfigStrategy=SLURM_CONFIG_STRATEGY))
    else:
        eks_arn = common.param(t, "EksClusterArn", "EKS cluster HyperPod orchestrates with.",
                               AllowedPattern=r"^arn:aws[a-z-]*:eks:[a-z0-9-]+:[0-9]{12}:cluster/.+$",
                               ConstraintDescription="an EKS cluster ARN.")
        common.param(t, "HelmReleaseId", "The Helm chart release (consumed so the cluster waits for it).")
        kwargs["Orchestrator"] = sagemaker.Orchestrator(Eks=sagemaker.ClusterOrchestratorEksConfig(ClusterArn=eks_arn))
        common.output(t, "HelmReleaseId", Ref("HelmReleaseId"), "Helm release the cluster was created after.")

    # Both orchestrators (see PROVISIONING_MODES).
    mode = common.param(t, "NodeProvisioningMode", "Standard: the cluster is created once every node is up "
                        "(or fails); Continuous: nodes join as capacity comes, and HyperPod emits cluster "
                        "events.", Default="Standard", AllowedValues=list(PROVISIONING_MODES))
    t.add_condition("ContinuousProvisioning", Equals(mode, "Continuous"))
    kwargs["NodeProvisioningMode"] = If("ContinuousProvisioning", "Continuous", Ref("AWS::NoValue"))
    cluster = t.add_resource(sagemaker.Cluster(
        "Cluster", ClusterName=cluster_name, InstanceGroups=groups, NodeRecovery="Automatic",
        VpcConfig=sagemaker.VpcConfig(SecurityGroupIds=[sg], Subnets=[subnet]),
        Tags=common.tags(extra={names.CLUSTER_TAG_KEY: cluster_name, FSX_ID_TAG_KEY: fsx_id}),
        **kwargs,
    ))
    common.output(t, names.OUT_CLUSTER_NAME, cluster_name, "HyperPod cluster name.")
    common.output(t, names.OUT_CLUSTER_ARN, GetAtt(cluster, "ClusterArn"), "HyperPod cluster ARN.")
    return t
