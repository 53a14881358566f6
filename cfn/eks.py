"""EKS stack: the control plane HyperPod orchestrates with, its add-ons, and Helm Lambda access.

Authentication mode API_AND_CONFIG_MAP (HyperPod manages its own access entries);
the Helm Lambda role gets a cluster-admin access entry here, so the Helm stack
can install the dependency chart before the HyperPod cluster is created.

Kubernetes versions: the ones EKS still creates and HyperPod supports (EKS user guide,
"Understand the Kubernetes version lifecycle on EKS", release calendar; HyperPod EKS
prerequisites list up to 1.35). ``UpgradePolicy.SupportType`` defaults to STANDARD so a
cluster never drifts into extended-support pricing by surprise (EKS user guide,
"Manage EKS extended support"; CloudFormation AWS::EKS::Cluster UpgradePolicy).

The FSx for Lustre CSI driver comes as the EKS add-on ``aws-fsx-csi-driver`` with its
controller's service account (``fsx-csi-controller-sa`` in kube-system) mapped through
EKS Pod Identity to a role with AmazonFSxFullAccess (EKS user guide "Use Pod
Identities to assign an IAM role to an Amazon EKS add-on" and the FSx CSI driver page;
kubernetes-sigs/aws-fsx-csi-driver docs/install.md), so FSx claims in pods can bind.
The pod identity agent add-on it needs is installed here too. AWS's console stack
installs the same add-on (aws/sagemaker-hyperpod-cluster-setup eks/cloudformation/fsx-template.yaml).

Kubernetes secrets are envelope-encrypted with a customer-managed KMS key of this stack
(``EncryptionConfig: [{Resources: [secrets], Provider: {KeyArn}}]``): symmetric, in the cluster's
region, rotated yearly (EKS user guide "Encrypt Kubernetes secrets with KMS on existing clusters",
enable-kms.html, and "Default envelope encryption for all Kubernetes API data",
envelope-encryption.html; CloudFormation AWS::EKS::Cluster Provider). EKS creates a grant on the key
with the credentials of whoever creates the cluster (CloudFormation acting for the deployer), which
the key policy's account-root statement leaves to the deployer's IAM permissions (kms:CreateGrant,
kms:DescribeKey), and EKS checks the cluster role's own access to the key: the key policy gives that
role the use of the key. ``EncryptionConfig`` is create-only: an EKS stack created without it cannot
take it by a stack update (CloudFormation would have to replace the named cluster).
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import GetAtt, Ref, Sub
from troposphere import eks as eks

from hpq.cfn import common
from hpq.lifecycle import names

# EKS release calendar (EKS user guide, kubernetes-versions.html), as of CALENDAR_AS_OF:
# version -> (end of standard support, end of extended support). 1.30 and 1.31 are left out: EKS no longer
# creates 1.30 (extended support ended 2026-07-23) and 1.31's ends 2026-11-26.
KUBERNETES_CALENDAR = {
    "1.32": ("2026-03-23", "2027-03-23"),
    "1.33": ("2026-07-29", "2027-07-29"),
    "1.34": ("2026-12-02", "2027-12-02"),
    "1.35": ("2027-03-27", "2028-03-27"),
}
CALENDAR_AS_OF = "2026-11-23"
KUBERNETES_VERSIONS = tuple(KUBERNETES_CALENDAR)
# The newest version in standard support on CALENDAR_AS_OF that HyperPod supports (up to 1.35).
DEFAULT_KUBERNETES_VERSION = "1.35"
SUPPORT_TYPES = ("STANDARD", "EXTENDED")
DEFAULT_SUPPORT_TYPE = "STANDARD"
# Versions already out of standard support on CALENDAR_AS_OF: EKS creates them only in extended support, and a
# cluster in extended support cannot be set to STANDARD (EKS user guide, "Prevent increased cluster costs by
# disabling EKS extended support", disable-extended-support.html). The rule below refuses STANDARD for them in the
# template itself (console and hpq publish path); hpq deploy's pre-flight checks the same with today's date.
EXTENDED_ONLY_VERSIONS = tuple(v for v, (std_end, _) in KUBERNETES_CALENDAR.items() if std_end <= CALENDAR_AS_OF)
EXTENDED_SUPPORT_RULE = "ExtendedSupportVersionNeedsExtended"
CORE_ADDONS = ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent")
POD_IDENTITY_ADDON = "eks-pod-identity-agent"
FSX_CSI_ADDON = "aws-fsx-csi-driver"
FSX_CSI_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
# What the cluster role does with the secrets key (EKS checks it when the cluster is created, and its health checks
# list the key's grants).
CLUSTER_ROLE_KEY_ACTIONS = ("kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:ListGrants")
PUBLIC_CIDR_PATTERN = r"^((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])/([0-9]|[12][0-9]|3[0-2])$"


@dataclass(frozen=True)
class EksConfig:
    default_version: str = DEFAULT_KUBERNETES_VERSION


def _addon_id(name: str) -> str:
    return "Addon" + "".join(p.capitalize() for p in name.split("-"))


def build(cfg: EksConfig) -> common.Template:
    t = common.new_template("hpq eks: EKS cluster (API_AND_CONFIG_MAP), core add-ons, Helm Lambda access.")
    cluster_name = common.cluster_name_param(t)
    version = common.param(t, "KubernetesVersion", "Kubernetes version of the EKS cluster "
                           f"({' and '.join(EXTENDED_ONLY_VERSIONS)} are in extended support already: they need "
                           "EksSupportType=EXTENDED, at extra cost).",
                           Default=cfg.default_version, AllowedValues=list(KUBERNETES_VERSIONS))
    support = common.param(t, "EksSupportType", "UpgradePolicy.SupportType: STANDARD upgrades the cluster at the end "
                           "of standard support; EXTENDED keeps the version at extended-support prices.",
                           Default=DEFAULT_SUPPORT_TYPE, AllowedValues=list(SUPPORT_TYPES))
    t.add_rule(EXTENDED_SUPPORT_RULE, {
        "RuleCondition": {"Fn::Contains": [list(EXTENDED_ONLY_VERSIONS), version]},
        "Assertions": [{
            "Assert": {"Fn::Equals": [support, "EXTENDED"]},
            "AssertDescription": f"KubernetesVersion {' / '.join(EXTENDED_ONLY_VERSIONS)} is out of EKS standard "
                                 "support: EKS creates it only with EksSupportType=EXTENDED (extended-support "
                                 f"prices); or choose {DEFAULT_KUBERNETES_VERSION}.",
        }],
    })
    public_cidrs = common.param(t, "EksPublicAccessCidrs", "CIDR blocks allowed to reach the public EKS API endpoint "
                                "(kubectl from your laptop and the Helm Lambda, which runs outside the VPC).",
                                type_="CommaDelimitedList", Default="0.0.0.0/0",
                                AllowedPattern=PUBLIC_CIDR_PATTERN,
                                ConstraintDescription="IPv4 CIDR blocks, comma-separated.")
    fsx_csi_role = common.param(t, "FsxCsiRoleArn", "Role of the FSx CSI driver's controller (EKS Pod Identity).",
                                AllowedPattern=common.ROLE_ARN_PATTERN, ConstraintDescription="an IAM role ARN.")
    subnets = common.param(t, "SubnetIds", "Control-plane subnets in two AZs.",
                           type_="List<AWS::EC2::Subnet::Id>")
    sg = common.param(t, "SecurityGroupId", "Cluster security group (shared with the nodes).",
                      type_="AWS::EC2::SecurityGroup::Id")
    role = common.param(t, "ClusterRoleArn", "EKS cluster service role ARN (from the IAM stack).",
                        AllowedPattern=common.ROLE_ARN_PATTERN, ConstraintDescription="an IAM role ARN.")
    helm_role = common.param(t, "HelmRoleArn", "Helm Lambda role ARN that gets cluster admin.",
                             AllowedPattern=common.ROLE_ARN_PATTERN, ConstraintDescription="an IAM role ARN.")

    secrets_key = common.kms_key(t, "SecretsKey", "Envelope encryption of the EKS cluster's Kubernetes secrets.", {
        "Sid": "ClusterRoleUsesTheKey", "Effect": "Allow", "Principal": {"AWS": role},
        "Action": list(CLUSTER_ROLE_KEY_ACTIONS), "Resource": "*",
    })
    cluster = t.add_resource(eks.Cluster(
        "Cluster", Name=cluster_name, Version=version, RoleArn=role,
        EncryptionConfig=[eks.EncryptionConfig(Resources=["secrets"],
                                               Provider=eks.Provider(KeyArn=GetAtt(secrets_key, "Arn")))],
        AccessConfig=eks.AccessConfig(AuthenticationMode="API_AND_CONFIG_MAP",
                                      BootstrapClusterCreatorAdminPermissions=True),
        # Public AND private endpoint: nodes use the private one inside the VPC; the Helm Lambda (outside
        # the VPC, so stack deletion never waits for Lambda ENIs) and the user's kubectl use the public one.
        ResourcesVpcConfig=eks.ResourcesVpcConfig(SubnetIds=subnets, SecurityGroupIds=[sg],
                                                  EndpointPublicAccess=True, EndpointPrivateAccess=True,
                                                  PublicAccessCidrs=public_cidrs),
        UpgradePolicy=eks.UpgradePolicy(SupportType=support),
        Logging=eks.Logging(ClusterLogging=eks.ClusterLogging(EnabledTypes=[
            eks.LoggingTypeConfig(Type=k) for k in ("api", "audit", "authenticator")])),
        Tags=common.tags(),
    ))
    for addon in CORE_ADDONS:
        t.add_resource(eks.Addon(_addon_id(addon), AddonName=addon, ClusterName=Ref(cluster),
                                 ResolveConflicts="OVERWRITE", Tags=common.tags()))
    t.add_resource(eks.Addon(
        _addon_id(FSX_CSI_ADDON), AddonName=FSX_CSI_ADDON, ClusterName=Ref(cluster), ResolveConflicts="OVERWRITE",
        PodIdentityAssociations=[eks.PodIdentityAssociationProperty(
            ServiceAccount=FSX_CSI_SERVICE_ACCOUNT, RoleArn=fsx_csi_role)],
        DependsOn=_addon_id(POD_IDENTITY_ADDON),  # the add-on authenticates through the pod identity agent
        Tags=common.tags(),
    ))
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
