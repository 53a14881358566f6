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

from troposphere import GetAtt, If, Ref
from troposphere import sagemaker as sm

from hpq.cfn import common
from hpq.lifecycle import names

CONTROLLER_EBS_GB = 100
CONTROLLER_THREADS_PER_CORE = 2
MAX_WORKERS = 256
FSX_ID_TAG_KEY = "hpq:fsx-file-system-id"
# HyperPod manages slurm.conf's partitions from the API configuration (ClusterOrchestratorSlurmConfig).
SLURM_CONFIG_STRATEGY = "Managed"


@dataclass(frozen=True)
class HyperPodConfig:
    orchestrator: str  # "slurm" or "eks"
    worker_types: tuple[str, ...]
    default_worker_type: str
    default_worker_count: int
    default_ebs_gb: int
    controller_types: tuple[str, ...] = ()
    default_controller_type: str = "ml.m5.xlarge"
    worker_group: str = names.WORKER_GROUP
    controller_group: str = names.CONTROLLER_GROUP
    login_group: str = names.LOGIN_GROUP
    partition: str = common.SLURM_PARTITION

    @property
    def slurm(self) -> bool:
        return self.orchestrator == "slurm"


def _group(name: str, instance_type, count, ebs_gb, threads, role, uri, **extra) -> sm.ClusterInstanceGroup:
    return sm.ClusterInstanceGroup(
        InstanceGroupName=name, InstanceType=instance_type, InstanceCount=count, ExecutionRole=role,
        ThreadsPerCore=threads,
        LifeCycleConfig=sm.ClusterLifeCycleConfig(SourceS3Uri=uri, OnCreate=names.ON_CREATE_ENTRY),
        InstanceStorageConfigs=[sm.ClusterInstanceStorageConfig(
            EbsVolumeConfig=sm.ClusterEbsVolumeConfig(VolumeSizeInGB=ebs_gb))],
        **extra,
    )


def slurm_config(node_type: str, partition: str | None = None) -> sm.ClusterSlurmConfig:
    """ClusterSlurmConfig: NodeType Controller/Login/Compute; workers name their (one) partition."""
    if partition is None:
        return sm.ClusterSlurmConfig(NodeType=node_type)
    return sm.ClusterSlurmConfig(NodeType=node_type, PartitionNames=[partition])


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
        groups.append(_group(cfg.controller_group, ctl_type, 1, CONTROLLER_EBS_GB, CONTROLLER_THREADS_PER_CORE,
                             role, uri, SlurmConfig=slurm_config("Controller")))
        groups.append(If("HasLoginGroup", _group(cfg.login_group, login_type, 1, CONTROLLER_EBS_GB,
                                                 CONTROLLER_THREADS_PER_CORE, role, uri,
                                                 SlurmConfig=slurm_config("Login")), Ref("AWS::NoValue")))
    worker_extra = {"SlurmConfig": slurm_config("Compute", cfg.partition)} if cfg.slurm else {}
    groups.append(_group(cfg.worker_group, worker_type, worker_count, ebs, threads, role, uri, **worker_extra))

    kwargs = {}
    if cfg.slurm:
        kwargs["Orchestrator"] = sm.Orchestrator(Slurm=sm.ClusterOrchestratorSlurmConfig(
            SlurmConfigStrategy=SLURM_CONFIG_STRATEGY))
    else:
        eks_arn = common.param(t, "EksClusterArn", "EKS cluster HyperPod orchestrates with.",
                               AllowedPattern=r"^arn:aws[a-z-]*:eks:[a-z0-9-]+:[0-9]{12}:cluster/.+$",
                               ConstraintDescription="an EKS cluster ARN.")
        common.param(t, "HelmReleaseId", "The Helm chart release (consumed so the cluster waits for it).")
        kwargs["Orchestrator"] = sm.Orchestrator(Eks=sm.ClusterOrchestratorEksConfig(ClusterArn=eks_arn))
        common.output(t, "HelmReleaseId", Ref("HelmReleaseId"), "Helm release the cluster was created after.")

    cluster = t.add_resource(sm.Cluster(
        "Cluster", ClusterName=cluster_name, InstanceGroups=groups, NodeRecovery="Automatic",
        VpcConfig=sm.VpcConfig(SecurityGroupIds=[sg], Subnets=[subnet]),
        Tags=common.tags(extra={names.CLUSTER_TAG_KEY: cluster_name, FSX_ID_TAG_KEY: fsx_id}),
        **kwargs,
    ))
    common.output(t, names.OUT_CLUSTER_NAME, cluster_name, "HyperPod cluster name.")
    common.output(t, names.OUT_CLUSTER_ARN, GetAtt(cluster, "ClusterArn"), "HyperPod cluster ARN.")
    return t
