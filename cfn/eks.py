"""EKS stack: the control plane HyperPod orchestrates with, its core add-ons, and Helm Lambda access.

Authentication mode API_AND_CONFIG_MAP (HyperPod manages its own access entries);
the Helm Lambda role gets a cluster-admin access entry here, so the Helm stack
can install the dependency chart before the HyperPod cluster is created.
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import GetAtt, Ref, Sub
from troposphere import eks as eks

from hpq.cfn import common
from hpq.lifecycle import names

KUBERNETES_VERSIONS = ("1.30", "1.31", "1.32", "1.33", "1.34")
DEFAULT_KUBERNETES_VERSION = "1.33"
ADDONS = ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent")
ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"


@dataclass(frozen=True)
class EksConfig:
    default_version: str = DEFAULT_KUBERNETES_VERSION


def _addon_id(name: str) -> str:
    return "Addon" + "".join(p.capitalize() for p in name.split("-"))


def build(cfg: EksConfig) -> common.Template:
    t = common.new_template("hpq eks: EKS cluster (API_AND_CONFIG_MAP), core add-ons, Helm Lambda access.")
    cluster_name = common.cluster_name_param(t)
    version = common.param(t, "KubernetesVersion", "Kubernetes version of the EKS cluster.",
                           Default=cfg.default_version, AllowedValues=list(KUBERNETES_VERSIONS))
    subnets = common.param(t, "SubnetIds", "Control-plane subnets in two AZs.",
                           type_="List<AWS::EC2::Subnet::Id>")
    sg = common.param(t, "SecurityGroupId", "Cluster security group (shared with the nodes).",
                      type_="AWS::EC2::SecurityGroup::Id")
    role = common.param(t, "ClusterRoleArn", "EKS cluster service role ARN (from the IAM stack).",
                        AllowedPattern=common.ROLE_ARN_PATTERN, ConstraintDescription="an IAM role ARN.")
    helm_role = common.param(t, "HelmRoleArn", "Helm Lambda role ARN that gets cluster admin.",
                             AllowedPattern=common.ROLE_ARN_PATTERN, ConstraintDescription="an IAM role ARN.")

    cluster = t.add_resource(eks.Cluster(
        "Cluster", Name=cluster_name, Version=version, RoleArn=role,
        AccessConfig=eks.AccessConfig(AuthenticationMode="API_AND_CONFIG_MAP",
                                      BootstrapClusterCreatorAdminPermissions=True),
        # Public AND private endpoint: nodes use the private one inside the VPC; the Helm Lambda (outside
        # the VPC, so stack deletion never waits for Lambda ENIs) and the user's kubectl use the public one.
        ResourcesVpcConfig=eks.ResourcesVpcConfig(SubnetIds=subnets, SecurityGroupIds=[sg],
                                                  EndpointPublicAccess=True, EndpointPrivateAccess=True),
        Logging=eks.Logging(ClusterLogging=eks.ClusterLogging(EnabledTypes=[
            eks.LoggingTypeConfig(Type=k) for k in ("api", "audit", "authenticator")])),
        Tags=common.tags(),
    ))
    for addon in ADDONS:
        t.add_resource(eks.Addon(_addon_id(addon), AddonName=addon, ClusterName=Ref(cluster),
                                 ResolveConflicts="OVERWRITE", Tags=common.tags()))
    t.add_resource(eks.AccessEntry(
        "HelmAccessEntry", ClusterName=Ref(cluster), PrincipalArn=helm_role, Type="STANDARD",
        AccessPolicies=[eks.AccessPolicy(
            PolicyArn=Sub(f"arn:${{AWS::Partition}}:eks::aws:cluster-access-policy/{ADMIN_POLICY}"),
            AccessScope=eks.AccessScope(Type="cluster"))],
        Tags=common.tags(),
    ))
    common.output(t, names.OUT_EKS_CLUSTER_NAME, Ref(cluster), "EKS cluster name.")
    common.output(t, names.OUT_EKS_CLUSTER_ARN, GetAtt(cluster, "Arn"), "EKS cluster ARN (HyperPod orchestrator).")
    return t
