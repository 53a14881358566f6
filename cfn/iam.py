"""IAM stack: the HyperPod execution role, and for EKS variants the EKS cluster role and Helm Lambda role.

Every ARN is built with AWS::Partition, never an ``arn:aws:`` literal, so the
templates deploy in GovCloud and China too. Roles have generated names, so the
stack needs only CAPABILITY_IAM and leaves no orphaned named roles behind.
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import GetAtt, Sub, iam

from hpq.cfn import common, observability
from hpq.lifecycle import names

CLUSTER_INSTANCE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
EKS_CLUSTER_POLICY = "AmazonEKSClusterPolicy"
LAMBDA_BASIC_POLICY = "service-role/AWSLambdaBasicExecutionRole"

FSX_CSI_POLICY = "AmazonFSxFullAccess"
OUT_HELM_ROLE_ARN = "HelmRoleArn"
OUT_FSX_CSI_ROLE_ARN = "FsxCsiRoleArn"
# Trust policy for a role assumed through EKS Pod Identity (EKS user guide, pod-id-role.html).
POD_IDENTITY_TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                   "Action": ["sts:AssumeRole", "sts:TagSession"]}],
}
OUT_EKS_CLUSTER_ROLE_ARN = "EksClusterRoleArn"


@dataclass(frozen=True)
class IamConfig:
    eks: bool


def _statement(sid: str, actions: list[str], resource, condition: dict | None = None) -> dict:
    s = {"Sid": sid, "Effect": "Allow", "Action": sorted(actions), "Resource": resource}
    if condition:
        s["Condition"] = condition
    return s


def _ec2_arns(*resource_types: str) -> list[Sub]:
    """EC2 ARNs of the given resource types in this region: this account's, except instances.

    HyperPod's instances live in an account SageMaker owns, while their ENIs are created in the customer's subnet
    (CreateNetworkInterfacePermission lets that account attach them): an instance ARN may name any account."""
    account = {"instance": "*"}
    return [Sub(f"arn:${{AWS::Partition}}:ec2:${{AWS::Region}}:{account.get(rtype, '${AWS::AccountId}')}:{rtype}/*")
            for rtype in resource_types]


def _execution_statements(eks: bool) -> list[dict]:
    """The node role's own policy. Every write or permissions-management action names the resource types IAM
    authorizes it on (IAM Service Authorization Reference, Amazon EC2) in this region and account, as AWS's console
    stacks scope the same ENI actions (aws/sagemaker-hyperpod-cluster-setup slurm/cloudformation/slurm-iam-role-
    template.yaml and eks/cloudformation/sagemaker-iam-role-template.yaml); only read and list actions keep
    Resource "*", where IAM offers nothing narrower."""
    bucket = Sub("arn:${AWS::Partition}:s3:::${LifecycleBucketName}")
    out = [
        _statement("LifecycleBucketList", ["s3:ListBucket"], bucket),
        _statement("LifecycleBucketRead", ["s3:GetObject"], Sub("arn:${AWS::Partition}:s3:::${LifecycleBucketName}/*")),
        # Lifecycle scripts find FSx by exact tag in DescribeFileSystems (it returns the tags); listing all
        # filesystems cannot be scoped to one resource.
        _statement("FsxDiscover", ["fsx:DescribeFileSystems"], "*"),
        # HyperPod attaches node ENIs in the customer VPC (VpcConfig) on the node's behalf.
        _statement("VpcDescribe", ["ec2:DescribeDhcpOptions", "ec2:DescribeNetworkInterfaces",
                                   "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs"], "*"),
        _statement("VpcNetworkInterfaces", [
            "ec2:CreateNetworkInterface", "ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface",
            "ec2:DeleteNetworkInterfacePermission", "ec2:DetachNetworkInterface",
        ], _ec2_arns("network-interface", "subnet", "security-group", "instance")),
        _statement("TagNetworkInterfaces", ["ec2:CreateTags"], common.arn("ec2", "network-interface/*")),
        _statement("EcrPull", ["ecr:GetAuthorizationToken", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer",
                               "ecr:BatchCheckLayerAvailability"], "*"),
        # CloudWatch logs and metrics: the managed policy grants them, scoped to /aws/sagemaker/Clusters.
    ]
    if eks:
        cluster = common.arn("eks", "cluster/${ClusterName}")
        out += [
            _statement("EksDescribe", ["eks:DescribeCluster"], cluster),
            _statement("EksPodIdentity", ["eks-auth:AssumeRoleForPodIdentity"], cluster),
            # The VPC CNI on HyperPod nodes runs with the node role.
            _statement("VpcCniDescribe", ["ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeTags"],
                       "*"),
            # The resource types IAM lists for these actions (cfn-lint 1.58's IAM data names subnet for
            # ModifyNetworkInterfaceAttribute), as AWS's EKS execution role grants them on the subnets too
            # (aws/sagemaker-hyperpod-cluster-setup eks/cloudformation/sagemaker-iam-role-template.yaml).
            _statement("VpcCni", [
                "ec2:AssignPrivateIpAddresses", "ec2:AttachNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute",
                "ec2:UnassignPrivateIpAddresses",
            ], _ec2_arns("network-interface", "instance", "security-group", "subnet")),
            # Both AWS EKS execution roles grant it (the template above; awslabs/awsome-distributed-ai
            # 1.architectures/7.sagemaker-hyperpod-eks/cfn-templates/nested-stacks/sagemaker-iam-role-stack.yaml),
            # on "*": a read, and which alarms HyperPod reads is the user's choice. HyperPod reads them to roll back
            # an AMI update done in batches (EKS clusters only): "To use the automatic rollback functionality, you
            # must add the permission cloudwatch:DescribeAlarms to your IAM execution role" (SageMaker Developer
            # Guide, "Update your AMI version in your SageMaker HyperPod cluster", sagemaker-hyperpod-ami-update).
            _statement("CloudWatchAlarmsRead", ["cloudwatch:DescribeAlarms"], "*"),
        ]
    return out


def build(cfg: IamConfig) -> common.Template:
    t = common.new_template("hpq iam: HyperPod execution role" + (", EKS cluster role, Helm Lambda role."
                                                                  if cfg.eks else "."))
    if cfg.eks:
        common.cluster_name_param(t)
    common.param(t, "LifecycleBucketName", "Lifecycle bucket the nodes read OnCreate from.",
                 AllowedPattern=common.BUCKET_NAME_PATTERN, ConstraintDescription="an S3 bucket name.")
    role = t.add_resource(iam.Role(
        "ExecutionRole",
        AssumeRolePolicyDocument=common.assume_role("sagemaker"),
        ManagedPolicyArns=[common.managed_policy(CLUSTER_INSTANCE_POLICY)],
        Policies=[iam.Policy(PolicyName="hpq-node", PolicyDocument={
            "Version": "2012-10-17", "Statement": _execution_statements(cfg.eks)})],
        Tags=common.tags(),
    ))
    common.output(t, names.OUT_EXECUTION_ROLE_ARN, GetAtt(role, "Arn"), "HyperPod execution (node) role ARN.")
    if not cfg.eks:
        # Slurm nodes remote-write metrics with this role when observability is on (cfn/observability.py).
        observability.add_remote_write_grant(t, role)
        return t

    common.param(t, "AssetsBucket", "Bucket holding hpq assets (the Helm handler may read charts from it).",
                 AllowedPattern=common.BUCKET_NAME_PATTERN, ConstraintDescription="an S3 bucket name.")
    eks_role = t.add_resource(iam.Role(
        "EksClusterRole",
        AssumeRolePolicyDocument=common.assume_role("eks"),
        ManagedPolicyArns=[common.managed_policy(EKS_CLUSTER_POLICY)],
        Tags=common.tags(),
    ))
    helm_role = t.add_resource(iam.Role(
        "HelmRole",
        AssumeRolePolicyDocument=common.assume_role("lambda"),
        ManagedPolicyArns=[common.managed_policy(LAMBDA_BASIC_POLICY)],
        Policies=[iam.Policy(PolicyName="hpq-helm", PolicyDocument={"Version": "2012-10-17", "Statement": [
            # Kubernetes access itself comes from the EKS access entry (cluster admin) in the EKS stack.
            _statement("EksDescribe", ["eks:DescribeCluster"], common.arn("eks", "cluster/${ClusterName}")),
            _statement("AssetsRead", ["s3:GetObject"], Sub("arn:${AWS::Partition}:s3:::${AssetsBucket}/*")),
        ]})],
        Tags=common.tags(),
    ))
    # The FSx for Lustre CSI driver's controller: the managed policy its docs name
    # (kubernetes-sigs/aws-fsx-csi-driver docs/install.md; EKS user guide fsx-csi-create.html).
    fsx_csi_role = t.add_resource(iam.Role(
        "FsxCsiDriverRole", AssumeRolePolicyDocument=POD_IDENTITY_TRUST,
        ManagedPolicyArns=[common.managed_policy(FSX_CSI_POLICY)], Tags=common.tags(),
    ))
    common.output(t, OUT_EKS_CLUSTER_ROLE_ARN, GetAtt(eks_role, "Arn"), "EKS cluster service role ARN.")
    common.output(t, OUT_FSX_CSI_ROLE_ARN, GetAtt(fsx_csi_role, "Arn"), "FSx CSI driver role (EKS Pod Identity).")
    common.output(t, OUT_HELM_ROLE_ARN, GetAtt(helm_role, "Arn"), "Helm Lambda execution role ARN.")
    return t
