"""Networking stack: VPC, NAT, one private node subnet in ONE AZ, VPC endpoints.

All HyperPod nodes live in one subnet in one AZ because EFA traffic cannot cross
AZs. EKS wants control-plane subnets in two AZs, so EKS variants get a second,
small private subnet used by the EKS control plane only.

The node subnet is sized for the largest cluster the templates allow: HyperPod's
prerequisites count 81 IP addresses per p5.48xlarge node on EKS (the VPC CNI's pod
addresses ride on the EFA interfaces) and 32 on Slurm, and p5 has the most EFA
interfaces of any catalog type. A /17 (32,763 usable addresses) holds WorkerCount's
maximum (256) plus controller and login nodes at 81 each, with room for the interface
endpoints, FSx and EKS control-plane ENIs. The public and EKS-only subnets are /19s
from the other half of the /16.

EKS refuses control-plane subnets in the AZ ids use1-az3, usw1-az2 and cac1-az3
(EKS user guide, "View Amazon EKS networking requirements for VPC and subnets"); on
EKS variants both subnets are control-plane subnets, so a rule refuses those AZ ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import And, Cidr, GetAtt, Join, Not, Ref, Select, Sub
from troposphere import ec2 as ec2

from hpq.cfn import common
from hpq.lifecycle import names

AZ_ID_PATTERN = r"^[a-z]{2,5}[0-9]{1,2}-az[0-9]{1,2}$"
AZ_ID_HELP = "an Availability Zone ID such as use1-az4 or usw2-az2 (not a zone name)."
VPC_CIDR_PATTERN = r"^((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])/16$"
# Interface endpoints nodes need without going through the NAT (image pulls, SSM sessions, logs).
INTERFACE_ENDPOINTS = ("ecr.api", "ecr.dkr", "sts", "logs", "ssm", "ssmmessages", "ec2messages")
# AZ ids EKS does not place control planes in (EKS user guide, network-reqs.html).
EKS_UNSUPPORTED_AZ_IDS = ("use1-az3", "usw1-az2", "cac1-az3")
NODE_SUBNET_PREFIX = 17
SMALL_SUBNET_PREFIX = 19
# IP addresses a node takes in the node subnet (SageMaker HyperPod prerequisites, for p5.48xlarge, the catalog's
# type with the most EFA interfaces, so an upper bound for every type hpq offers).
IPS_PER_NODE = {"eks": 81, "slurm": 32}
# AWS keeps 5 addresses of every subnet; the rest of this is headroom for interface endpoint, FSx and EKS ENIs.
SUBNET_RESERVED_IPS = 512


def usable_ips(prefix: int) -> int:
    return 2 ** (32 - prefix) - 5


def node_capacity(orchestrator: str, prefix: int = NODE_SUBNET_PREFIX) -> int:
    """How many nodes (workers + controller + login) the node subnet holds."""
    return (usable_ips(prefix) - SUBNET_RESERVED_IPS) // IPS_PER_NODE[orchestrator]


@dataclass(frozen=True)
class NetworkingConfig:
    eks: bool  # add the second control-plane subnet


def _endpoint_id(service: str) -> str:
    return "Endpoint" + "".join(part.capitalize() for part in service.split("."))


def build(cfg: NetworkingConfig) -> common.Template:
    t = common.new_template("hpq networking: VPC, NAT, node subnet in one AZ, VPC endpoints.")
    az = common.param(t, "AvailabilityZoneId", "Availability Zone ID of every HyperPod node (e.g. use1-az4; "
                      "pick the AZ that has your instance capacity).",
                      AllowedPattern=AZ_ID_PATTERN, ConstraintDescription=AZ_ID_HELP)
    vpc_cidr = common.param(t, "VpcCidr", "VPC CIDR block (a /16).", Default="10.0.0.0/16",
                            AllowedPattern=VPC_CIDR_PATTERN, ConstraintDescription="an IPv4 /16 CIDR block.")
    # /16 -> the node subnet is its first /17; the public and EKS-only subnets are /19s of the second half.
    halves = Cidr(vpc_cidr, 2, 32 - NODE_SUBNET_PREFIX)
    blocks = Cidr(vpc_cidr, 8, 32 - SMALL_SUBNET_PREFIX)
    public_block, eks_block = Select(4, blocks), Select(5, blocks)

    vpc = t.add_resource(ec2.VPC(
        "Vpc", CidrBlock=vpc_cidr, EnableDnsHostnames=True, EnableDnsSupport=True,
        Tags=common.tags(Sub("${AWS::StackName}-vpc")),
    ))
    igw = t.add_resource(ec2.InternetGateway("InternetGateway", Tags=common.tags(Sub("${AWS::StackName}-igw"))))
    attach = t.add_resource(ec2.VPCGatewayAttachment("GatewayAttachment", VpcId=Ref(vpc),
                                                     InternetGatewayId=Ref(igw)))

    public = t.add_resource(ec2.Subnet(
        "PublicSubnet", VpcId=Ref(vpc), AvailabilityZoneId=az, CidrBlock=public_block,
        MapPublicIpOnLaunch=False, Tags=common.tags(Sub("${AWS::StackName}-public")),
    ))
    public_rt = t.add_resource(ec2.RouteTable("PublicRouteTable", VpcId=Ref(vpc),
                                              Tags=common.tags(Sub("${AWS::StackName}-public"))))
    t.add_resource(ec2.Route("PublicDefaultRoute", RouteTableId=Ref(public_rt), DestinationCidrBlock="0.0.0.0/0",
                             GatewayId=Ref(igw), DependsOn=attach.title))
    t.add_resource(ec2.SubnetRouteTableAssociation("PublicSubnetRoutes", SubnetId=Ref(public),
                                                   RouteTableId=Ref(public_rt)))
    eip = t.add_resource(ec2.EIP("NatAddress", Domain="vpc", DependsOn=attach.title,
                                 Tags=common.tags(Sub("${AWS::StackName}-nat"))))
    nat = t.add_resource(ec2.NatGateway("NatGateway", SubnetId=Ref(public), AllocationId=GetAtt(eip, "AllocationId"),
                                        Tags=common.tags(Sub("${AWS::StackName}-nat"))))

    node = t.add_resource(ec2.Subnet(
        "NodeSubnet", VpcId=Ref(vpc), AvailabilityZoneId=az, CidrBlock=Select(0, halves),
        MapPublicIpOnLaunch=False, Tags=common.tags(Sub("${AWS::StackName}-nodes")),
    ))
    private_rt = t.add_resource(ec2.RouteTable("PrivateRouteTable", VpcId=Ref(vpc),
                                               Tags=common.tags(Sub("${AWS::StackName}-private"))))
    t.add_resource(ec2.Route("PrivateDefaultRoute", RouteTableId=Ref(private_rt), DestinationCidrBlock="0.0.0.0/0",
                             NatGatewayId=Ref(nat)))
    t.add_resource(ec2.SubnetRouteTableAssociation("NodeSubnetRoutes", SubnetId=Ref(node),
                                                   RouteTableId=Ref(private_rt)))

    t.add_resource(ec2.VPCEndpoint(
        "EndpointS3", VpcId=Ref(vpc), VpcEndpointType="Gateway",
        ServiceName=Sub("com.amazonaws.${AWS::Region}.s3"), RouteTableIds=[Ref(private_rt)],
    ))
    endpoint_sg = t.add_resource(ec2.SecurityGroup(
        "EndpointSecurityGroup", VpcId=Ref(vpc),
        GroupDescription="HTTPS from the VPC to the interface endpoints",
        SecurityGroupIngress=[ec2.SecurityGroupRule(IpProtocol="tcp", FromPort=443, ToPort=443, CidrIp=vpc_cidr,
                                                    Description="HTTPS from inside the VPC")],
        SecurityGroupEgress=[ec2.SecurityGroupRule(IpProtocol="-1", CidrIp="0.0.0.0/0",
                                                   Description="responses and endpoint traffic")],
        Tags=common.tags(Sub("${AWS::StackName}-endpoints")),
    ))
    for service in INTERFACE_ENDPOINTS:
        t.add_resource(ec2.VPCEndpoint(
            _endpoint_id(service), VpcId=Ref(vpc), VpcEndpointType="Interface", PrivateDnsEnabled=True,
            ServiceName=Sub(f"com.amazonaws.${{AWS::Region}}.{service}"), SubnetIds=[Ref(node)],
            SecurityGroupIds=[Ref(endpoint_sg)],
        ))

    common.output(t, names.OUT_VPC_ID, Ref(vpc), "VPC ID.")
    common.output(t, "VpcCidr", GetAtt(vpc, "CidrBlock"), "VPC CIDR block.")
    common.output(t, names.OUT_NODE_SUBNET_ID, Ref(node), "The one private subnet every HyperPod node uses.")
    if cfg.eks:
        eks_az = common.param(t, "EksAvailabilityZoneId",
                              "Second AZ ID, used only by the EKS control plane; must differ from "
                              "AvailabilityZoneId.", AllowedPattern=AZ_ID_PATTERN,
                              ConstraintDescription=AZ_ID_HELP)
        eks_subnet = t.add_resource(ec2.Subnet(
            "EksSubnet", VpcId=Ref(vpc), AvailabilityZoneId=eks_az, CidrBlock=eks_block,
            MapPublicIpOnLaunch=False, Tags=common.tags(Sub("${AWS::StackName}-eks")),
        ))
        t.add_rule("EksControlPlaneAzs", {"Assertions": [{
            "Assert": And(Not({"Fn::Contains": [list(EKS_UNSUPPORTED_AZ_IDS), az]}),
                          Not({"Fn::Contains": [list(EKS_UNSUPPORTED_AZ_IDS), eks_az]})),
            "AssertDescription": "EKS does not place control planes in the AZ ids "
                                 f"{', '.join(EKS_UNSUPPORTED_AZ_IDS)}: choose other AvailabilityZoneId and "
                                 "EksAvailabilityZoneId (both subnets are EKS control-plane subnets).",
        }]})
        t.add_resource(ec2.SubnetRouteTableAssociation("EksSubnetRoutes", SubnetId=Ref(eks_subnet),
                                                       RouteTableId=Ref(private_rt)))
        common.output(t, names.OUT_EKS_SUBNET_IDS, Join(",", [Ref(node), Ref(eks_subnet)]),
                      "Comma-separated EKS control-plane subnets (node subnet + EKS-only subnet).")
    return t
