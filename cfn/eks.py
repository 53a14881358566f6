"""EKS stack: the control plane HyperPod orchestrates with, its add-ons, and Helm Lambda access.

Authentication mode API_AND_CONFIG_MAP (HyperPod manages its own access entries);
the Helm Lambda role gets a cluster-admin access entry here, so the Helm stack
can install the dependency chart before the HyperPod cluster is created.

Kubernetes versions: the ones HyperPod's documentation lists (HYPERPOD_VERSIONS) that EKS still creates on
the render date (EKS user guide, "Understand the Kubernetes version lifecycle on EKS", release calendar);
the default is the newest listed. A version EKS creates but HyperPod does not list yet (1.35) is offered
only on explicit request (``--param KubernetesVersion=1.35`` to ``hpq synth``/``deploy`` renders it into
AllowedValues; both warn): a published template offers only the documented ones.

Support type and the calendar: a template cannot know the date it is deployed on, so the date it is
rendered on (``as_of``, today for ``hpq synth``/``publish``/``deploy``) decides. The rule
``ExtendedSupportVersionNeedsExtended`` refuses STANDARD for a version out of standard support on that
date (a cluster in extended support cannot be STANDARD: EKS user guide, disable-extended-support.html),
and ``EksSupportType`` defaults to EXTENDED when the default version leaves standard support within
SUPPORT_HORIZON_DAYS of it: a template published today still creates a cluster after that date, and the
cluster stays on a version HyperPod documents instead of being upgraded by EKS at the end of standard
support to one it does not (with STANDARD, EKS upgrades the control plane then: kubernetes-versions.html).
The price of that choice is extended-support billing from the end of standard support; ``hpq deploy``'s
pre-flight says so with today's date, and ``hpq synth`` warns when rendered templates go stale
(``calendar_notes``). CloudFormation AWS::EKS::Cluster UpgradePolicy.SupportType.

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

import datetime
from dataclasses import dataclass, field

from troposphere import GetAtt, Ref, Sub, eks

from hpq.cfn import common
from hpq.lifecycle import names

# EKS release calendar (EKS user guide, https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html,
# read 2026-11-26): version -> (end of standard support, end of extended support).
KUBERNETES_CALENDAR = {
    "1.30": ("2025-07-23", "2026-07-23"),
    "1.31": ("2025-11-26", "2026-11-26"),
    "1.32": ("2026-03-23", "2027-03-23"),
    "1.33": ("2026-07-29", "2027-07-29"),
    "1.34": ("2026-12-02", "2027-12-02"),
    "1.35": ("2027-03-27", "2028-03-27"),
}
# The Kubernetes versions SageMaker HyperPod supports, as its EKS prerequisites page lists them
# (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-prerequisites.html, "Kubernetes version
# support": "1.28, 1.29, 1.30, 1.31, 1.32, 1.33 and 1.34"; every copy read on HYPERPOD_VERSIONS_READ lists at most
# 1.34, older copies stop at 1.32 or 1.33).
HYPERPOD_VERSIONS = ("1.28", "1.29", "1.30", "1.31", "1.32", "1.33", "1.34")
HYPERPOD_VERSIONS_URL = "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-prerequisites.html"
HYPERPOD_VERSIONS_READ = "2026-11-26"
# The newest version HyperPod documents.
DEFAULT_KUBERNETES_VERSION = HYPERPOD_VERSIONS[-1]
SUPPORT_TYPES = ("STANDARD", "EXTENDED")
# A version leaving standard support within this many days of the render date defaults to EXTENDED (see above).
SUPPORT_HORIZON_DAYS = 90


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _date(text: str) -> datetime.date:
    return datetime.date.fromisoformat(text)


def creatable_versions(as_of: datetime.date) -> list[str]:
    """Calendar versions EKS still creates on as_of (before the end of extended support)."""
    return [v for v, (_, ext_end) in KUBERNETES_CALENDAR.items() if as_of < _date(ext_end)]


def offered_versions(as_of: datetime.date) -> list[str]:
    """What a template offers by default: documented by HyperPod and still created by EKS."""
    return [v for v in creatable_versions(as_of) if v in HYPERPOD_VERSIONS]


def newer_versions(as_of: datetime.date) -> list[str]:
    """Versions EKS creates that are newer than every version HyperPod documents: on explicit request only."""
    newest = version_key(HYPERPOD_VERSIONS[-1])
    return [v for v in creatable_versions(as_of) if version_key(v) > newest]


def extended_only(versions: list[str], as_of: datetime.date) -> list[str]:
    """Of versions, those out of standard support on as_of: EKS creates them only with EXTENDED."""
    return [v for v in versions if v in KUBERNETES_CALENDAR and _date(KUBERNETES_CALENDAR[v][0]) <= as_of]


def default_support_type(version: str, as_of: datetime.date) -> str:
    """EXTENDED when version leaves standard support within SUPPORT_HORIZON_DAYS of as_of, else STANDARD."""
    std_end = _date(KUBERNETES_CALENDAR[version][0])
    return "EXTENDED" if std_end <= as_of + datetime.timedelta(days=SUPPORT_HORIZON_DAYS) else "STANDARD"


def calendar_notes(as_of: datetime.date, versions: list[str] | None = None) -> list[str]:
    """What a user publishing templates rendered on as_of should know: when they go stale."""
    out = []
    for v in versions if versions is not None else offered_versions(as_of):
        std_end = _date(KUBERNETES_CALENDAR[v][0])
        if as_of < std_end <= as_of + datetime.timedelta(days=SUPPORT_HORIZON_DAYS):
            out.append(f"KubernetesVersion {v} leaves EKS standard support on {std_end}: templates rendered today "
                       f"default EksSupportType to {default_support_type(v, as_of)} for it and refuse STANDARD "
                       f"only from a render on or after that date; render and publish again after {std_end}")
    for v in versions or []:
        if v in newer_versions(as_of):
            out.append(f"KubernetesVersion {v} is newer than every version SageMaker HyperPod documents "
                       f"({', '.join(HYPERPOD_VERSIONS)}; {HYPERPOD_VERSIONS_URL}, read {HYPERPOD_VERSIONS_READ}): "
                       "HyperPod may refuse the EKS cluster 30 to 40 minutes into the deploy")
    return out


EXTENDED_SUPPORT_RULE = "ExtendedSupportVersionNeedsExtended"
CONTROL_PLANE_LOG_GROUP = "/aws/eks/${ClusterName}/cluster"
CONTROL_PLANE_LOG_DAYS = 30
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
    as_of: datetime.date = field(default_factory=datetime.date.today)  # the render date (module docstring)
    extra_versions: tuple[str, ...] = ()  # newer_versions() the user asked for explicitly
    default_version: str = DEFAULT_KUBERNETES_VERSION

    def versions(self) -> list[str]:
        extra = [v for v in self.extra_versions if v in newer_versions(self.as_of)]
        return sorted(set(offered_versions(self.as_of)) | set(extra), key=version_key)


def _addon_id(name: str) -> str:
    return "Addon" + "".join(p.capitalize() for p in name.split("-"))


def build(cfg: EksConfig) -> common.Template:
    t = common.new_template("hpq eks: EKS cluster (API_AND_CONFIG_MAP), core add-ons, Helm Lambda access.")
    cluster_name = common.cluster_name_param(t)
    versions = cfg.versions()
    needs_extended = extended_only(versions, cfg.as_of)
    ext_note = (f"{' and '.join(needs_extended)} are in extended support already: they need EksSupportType=EXTENDED, "
                "at extra cost" if needs_extended else "each needs EksSupportType=EXTENDED once out of standard "
                "support")
    version = common.param(t, "KubernetesVersion", "Kubernetes version of the EKS cluster: those SageMaker HyperPod "
                           f"documents ({HYPERPOD_VERSIONS[0]} to {HYPERPOD_VERSIONS[-1]}) that EKS still creates "
                           f"({ext_note}; calendar as of {cfg.as_of}).",
                           Default=cfg.default_version, AllowedValues=versions)
    support = common.param(t, "EksSupportType", "UpgradePolicy.SupportType: STANDARD upgrades the cluster at the end "
                           "of standard support; EXTENDED keeps the version at extended-support prices.",
                           Default=default_support_type(cfg.default_version, cfg.as_of),
                           AllowedValues=list(SUPPORT_TYPES))
    if needs_extended:
        t.add_rule(EXTENDED_SUPPORT_RULE, {
            "RuleCondition": {"Fn::Contains": [needs_extended, version]},
            "Assertions": [{
                "Assert": {"Fn::Equals": [support, "EXTENDED"]},
                "AssertDescription": f"KubernetesVersion {' / '.join(needs_extended)} is out of EKS standard "
                                     "support: EKS creates it only with EksSupportType=EXTENDED (extended-support "
                                     f"prices); or choose {cfg.default_version}.",
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
    # EKS writes control-plane logs to /aws/eks/<cluster>/cluster and creates that log group itself, with no
    # retention, when the stack has not (EKS user guide, control-plane-logs.html); it then outlives the stack. The
    # stack creates it first, with a retention and deleted with the stack, as AWS's Terraform does (docs/design.md;
    # awslabs/awsome-distributed-ai 1.architectures/7.sagemaker-hyperpod-eks/terraform-modules/hyperpod-eks-tf).
    log_group = common.encrypted_log_group(t, "ControlPlaneLogGroup", "eks", CONTROL_PLANE_LOG_DAYS,
                                      path=CONTROL_PLANE_LOG_GROUP,
                                      description="Encrypts the EKS control-plane log group /aws/eks/<cluster>/cluster.")
    cluster = t.add_resource(eks.Cluster(
        "Cluster", DependsOn=log_group.title, Name=cluster_name, Version=version, RoleArn=role,
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
