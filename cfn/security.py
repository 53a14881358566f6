"""Security stack: the one security group every node, FSx and the EKS control plane share.

Self-referencing ingress AND egress for all protocols, plus internet egress:
egress to 0.0.0.0/0 alone makes HyperPod's EFA health checks fail at creation.
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import Ref, Sub, ec2

from hpq.cfn import common
from hpq.lifecycle import names


@dataclass(frozen=True)
class SecurityConfig:
    pass


def build(cfg: SecurityConfig) -> common.Template:
    t = common.new_template("hpq security: one security group with self-referencing rules for EFA.")
    vpc_id = common.param(t, "VpcId", "VPC the security group belongs to.", type_="AWS::EC2::VPC::Id")
    sg = t.add_resource(ec2.SecurityGroup(
        "ClusterSecurityGroup", VpcId=vpc_id,
        GroupDescription="HyperPod nodes, FSx and EKS: all traffic within the group, internet egress",
        SecurityGroupEgress=[ec2.SecurityGroupRule(IpProtocol="-1", CidrIp="0.0.0.0/0",
                                                   Description="internet egress through the NAT")],
        Tags=common.tags(Sub("${AWS::StackName}-cluster")),
    ))
    # Separate rule resources: a group cannot reference itself inside its own definition.
    t.add_resource(ec2.SecurityGroupIngress(
        "SelfIngress", GroupId=Ref(sg), SourceSecurityGroupId=Ref(sg), IpProtocol="-1",
        Description="all protocols from members (EFA, NCCL, Slurm, Lustre)",
    ))
    t.add_resource(ec2.SecurityGroupEgress(
        "SelfEgress", GroupId=Ref(sg), DestinationSecurityGroupId=Ref(sg), IpProtocol="-1",
        Description="all protocols to members (required by EFA health checks)",
    ))
    common.output(t, names.OUT_SECURITY_GROUP_ID, Ref(sg), "Security group for nodes, FSx and EKS.")
    return t
