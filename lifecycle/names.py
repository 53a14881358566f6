"""Names and tags shared by templates, lifecycle scripts and the CLI, written once.

Standard library only: the lifecycle code on the node finds the cluster's FSx
filesystem by the same tag the templates put on it.
"""

from __future__ import annotations

import re

# Exact-match discovery tag on the FSx filesystem (value: the HyperPod cluster name).
CLUSTER_TAG_KEY = "hpq:cluster-name"
MANAGED_BY_TAG_KEY = "hpq:managed-by"
MANAGED_BY_TAG_VALUE = "hyperpod-quickstart"

# HyperPod instance group names the templates create (also in provisioning_parameters.json and in
# SSM targets ``sagemaker-cluster:<cluster-id>_<group>-<instance-id>``).
CONTROLLER_GROUP = "controller"
LOGIN_GROUP = "login"
WORKER_GROUP = "worker"
# Key prefix inside the lifecycle bucket that HyperPod's LifeCycleConfig.SourceS3Uri points at.
LIFECYCLE_PREFIX = "lifecycle"

# S3 key layout under the artifact bucket: <prefix>/<version>/...
S3_ROOT_PREFIX = "hpq"
TEMPLATES_DIR = "templates"
NODE_BUNDLE_DIR = "node"
# Inside the node bundle the code keeps its import names (hpq.lifecycle, hpq.scripts).
ON_CREATE_SCRIPT = "hpq/lifecycle/on_create.sh"
# HyperPod's LifeCycleConfig.OnCreate is documented as a file name at the root of SourceS3Uri
# (API reference, ClusterLifeCycleConfig): a root shim that runs ON_CREATE_SCRIPT.
ON_CREATE_ENTRY = "on_create.sh"
# hpq's own node settings (group -> role, cluster name, orchestrator), next to ON_CREATE_ENTRY in the
# lifecycle prefix. HyperPod never reads it; hpq never writes a file HyperPod reads (provisioning_parameters.json).
HPQ_CLUSTER_CONFIG = "hpq-cluster.json"
# Its schema version: the S3 stack writes it, the lifecycle refuses any other (one bundle, one schema).
HPQ_CLUSTER_CONFIG_SCHEMA = 1
# Where HyperPod's legacy Slurm model keeps provisioning_parameters.json on a node (the lifecycle also
# accepts the documented schema next to the bundle).
NODE_PROVISIONING_PARAMETERS = "/opt/ml/config/provisioning_parameters.json"
ROOT_TEMPLATE = "root.json"

# On the node.
RESOURCE_CONFIG = "/opt/ml/config/resource_config.json"
PROVISIONING_PARAMETERS = "provisioning_parameters.json"
NODE_INFO = "/etc/hpq/node-info.json"
FSX_MOUNT_POINT = "/fsx"
# What the fsx step mounted, for the node programs (node_doctor, the Slurm prolog): they check /fsx only where
# the lifecycle mounted it, in the mount table the lifecycle read (lifecycle/fsx.py record_mount).
FSX_RECORD = "/etc/hpq/fsx.json"
# Shared results of the node commands (run-nccl-test, run-nanogpt): sticky and world-writable like /tmp,
# so every cluster user writes there while a new Lustre root stays root:root 0755.
FSX_RESULTS_DIR = "/fsx/hpq-results"
NODE_INSTALL_DIR = "/opt/hpq"
PROC_MOUNTS = "/proc/mounts"
# The worker's secondary EBS volume HyperPod mounts on every node (awsome-distributed-ai
# 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh puts containerd
# and kubelet there; tools/devops-agent/docs/hyperpod-mental-model.md, "Storage layout").
EKS_DATA_DISK = "/opt/sagemaker"

# Stack output names (consumed across nested stacks and printed by the CLI).
OUT_VPC_ID = "VpcId"
OUT_NODE_SUBNET_ID = "NodeSubnetId"
OUT_EKS_SUBNET_IDS = "EksSubnetIds"
OUT_SECURITY_GROUP_ID = "SecurityGroupId"
OUT_FSX_ID = "FsxFileSystemId"
OUT_FSX_DNS = "FsxDnsName"
OUT_FSX_MOUNT = "FsxMountName"
OUT_LIFECYCLE_BUCKET = "LifecycleBucketName"
OUT_LIFECYCLE_URI = "LifecycleS3Uri"
OUT_EXECUTION_ROLE_ARN = "ExecutionRoleArn"
OUT_EKS_CLUSTER_NAME = "EksClusterName"
OUT_EKS_CLUSTER_ARN = "EksClusterArn"
OUT_CLUSTER_NAME = "ClusterName"
OUT_CLUSTER_ARN = "ClusterArn"

# HyperPod's name rule, one for cluster names and instance group names alike: the ClusterName and
# ClusterInstanceGroupName shapes of botocore's sagemaker service model (botocore/data/sagemaker/*/service-2.json;
# SageMaker API reference, CreateCluster.ClusterName and ClusterInstanceGroupSpecification.InstanceGroupName).
# The pattern alone admits longer names ("a-b" is one repetition): the length is its own rule.
HYPERPOD_NAME_PATTERN = r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
HYPERPOD_NAME_MAX = 63
HYPERPOD_NAME_RULE = "letters, digits and hyphens, 1-63 characters, starting and ending with a letter or digit"
_HYPERPOD_NAME = re.compile(HYPERPOD_NAME_PATTERN)


def s3_version_prefix(version: str) -> str:
    return "%s/%s" % (S3_ROOT_PREFIX, version)


def template_key(version: str, variant: str, stack_file: str = ROOT_TEMPLATE) -> str:
    return "%s/%s/%s/%s" % (s3_version_prefix(version), TEMPLATES_DIR, variant, stack_file)


def node_bundle_prefix(version: str) -> str:
    return "%s/%s/" % (s3_version_prefix(version), NODE_BUNDLE_DIR)


def valid_hyperpod_name(name: object) -> bool:
    """A HyperPod cluster or instance group name (HYPERPOD_NAME_PATTERN, at most HYPERPOD_NAME_MAX characters).

    fullmatch, never match with "$": "$" also matches before a trailing newline."""
    return isinstance(name, str) and len(name) <= HYPERPOD_NAME_MAX and _HYPERPOD_NAME.fullmatch(name) is not None
