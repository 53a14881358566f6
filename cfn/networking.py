"""Networking stack: VPC, NAT, one private node subnet in ONE AZ, VPC endpoints.

All HyperPod nodes live in one subnet in one AZ because EFA traffic cannot cross
AZs. EKS wants control-plane subnets in two AZs, so EKS variants get two small private
subnets used by the EKS control plane only, never the node subnet: one in
``EksAvailabilityZoneId`` and one in ``EksSecondAvailabilityZoneId`` or, when that is
left empty, in the nodes' AZ.

The node subnet is sized for the largest cluster the templates allow: HyperPod's
prerequisites count 81 IP addresses per p5.48xlarge node on EKS (the VPC CNI's pod
addresses ride on the EFA interfaces) and 32 on Slurm, and p5 has the most EFA
interfaces of any catalog type. A /17 (32,763 usable addresses) holds WorkerCount's
maximum (256) plus controller and login nodes at 81 each, with room for the interface
endpoints, FSx and EKS control-plane ENIs. The public and EKS-only subnets are /19s
from the other half of the /16.

EKS refuses control-plane subnets in the AZ ids use1-az3, usw1-az2 and cac1-az3
(EKS user guide, "View Amazon EKS networking requirements for VPC and subnets",
network-reqs.html); nodes may use them. Since the control plane has its own subnets,
the nodes can be in such an AZ: then ``EksSecondAvailabilityZoneId`` names a second
control-plane AZ, and the ``EksControlPlaneAzs`` rule refuses a control-plane AZ EKS does
not take (and two control-plane subnets in one AZ) before anything is created.
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import And, Cidr, Equals, GetAtt, If, Join, Not, Or, Ref, Select, Sub, ec2

from hpq.cfn import common
from hpq.lifecycle import names
from hpq.vocab import EKS, SLURM

AZ_ID_PATTERN = r"^[a-z]{2,5}[0-9]{1,2}-az[0-9]{1,2}$"
AZ_ID_HELP = "an Availability Zone ID such as use1-az4 or usw2-az2 (not a zone name)."
VPC_CIDR_PATTERN = r"^((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])/16$"
# Interface endpoints nodes need without going through the NAT (image pulls, SSM sessions, logs).
INTERFACE_ENDPOINTS = ("ecr.api", "ecr.dkr", "sts", "logs", "ssm", "ssmmessages", "ec2messages")
# AZ ids EKS does not place control planes in (EKS user guide, network-reqs.html).
EKS_UNSUPPORTED_AZ_IDS = ("use1-az3", "usw1-az2", "cac1-az3")
EKS_AZ_PARAM = "EksAvailabilityZoneId"
EKS_SECOND_AZ_PARAM = "EksSecondAvailabilityZoneId"
SECOND_AZ_IS_NODE_AZ = "EksSecondSubnetInNodeAz"
NODE_SUBNET_PREFIX = 17
SMALL_SUBNET_PREFIX = 19
# IP addresses a node takes in the node subnet (SageMaker HyperPod prerequisites, for p5.48xlarge, the catalog's
# type with the most EFA interfaces, so an upper bound for every type hpq offers).
IPS_PER_NODE = {EKS: 81, SLURM: 32}
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
    public_block = Select(4, blocks)

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
        _control_plane_subnets(t, vpc, private_rt, az, Select(5, blocks), Select(6, blocks))
    return t


def control_plane_az_ids(values: dict[str, str]) -> dict[str, str]:
    """Parameter -> AZ id of each EKS control-plane subnet, for parameter values as the stack gets them."""
    second = values.get(EKS_SECOND_AZ_PARAM, "") or ""
    return {EKS_AZ_PARAM: values.get(EKS_AZ_PARAM, ""),
            (EKS_SECOND_AZ_PARAM if second else "AvailabilityZoneId"): second or values.get("AvailabilityZoneId", "")}


def _control_plane_subnets(t: common.Template, vpc, private_rt, az, block_a, block_b) -> None:
    """Two EKS-only subnets (EKS wants two AZs), neither of them the node subnet."""
    eks_az = common.param(t, EKS_AZ_PARAM, "AZ ID of the first EKS control-plane subnet; must differ from the "
                          "second control-plane AZ. EKS refuses use1-az3, usw1-az2, cac1-az3.",
                          AllowedPattern=AZ_ID_PATTERN, ConstraintDescription=AZ_ID_HELP)
    second = common.param(t, EKS_SECOND_AZ_PARAM, "AZ ID of the second EKS control-plane subnet; empty: the nodes' "
                          "AvailabilityZoneId. Give one when the nodes are in an AZ EKS refuses for control planes "
                          "(use1-az3, usw1-az2, cac1-az3).", Default="",
                          AllowedPattern=f"^$|{AZ_ID_PATTERN}", ConstraintDescription="empty or " + AZ_ID_HELP)
    t.add_condition(SECOND_AZ_IS_NODE_AZ, Equals(second, ""))
    second_az = If(SECOND_AZ_IS_NODE_AZ, az, second)
    subnet_a = t.add_resource(ec2.Subnet(
        "EksSubnet", VpcId=Ref(vpc), AvailabilityZoneId=eks_az, CidrBlock=block_a,
        MapPublicIpOnLaunch=False, Tags=common.tags(Sub("${AWS::StackName}-eks")),
    ))
    subnet_b = t.add_resource(ec2.Subnet(
        "EksSubnetB", VpcId=Ref(vpc), AvailabilityZoneId=second_az, CidrBlock=block_b,
        MapPublicIpOnLaunch=False, Tags=common.tags(Sub("${AWS::StackName}-eks-b")),
    ))
    refused = list(EKS_UNSUPPORTED_AZ_IDS)
    uses_node_az, own_az = Equals(second, ""), Not(Equals(second, ""))
    t.add_rule("EksControlPlaneAzs", {"Assertions": [
        {"Assert": Not({"Fn::Contains": [refused, eks_az]}),
         "AssertDescription": f"EKS does not place control planes in the AZ ids {', '.join(refused)}: choose "
                              "another EksAvailabilityZoneId."},
        {"Assert": Or(And(uses_node_az, Not({"Fn::Contains": [refused, az]})),
                      And(own_az, Not({"Fn::Contains": [refused, second]}))),
         "AssertDescription": f"The second EKS control-plane subnet is in EksSecondAvailabilityZoneId or, when that "
                              f"is empty, in AvailabilityZoneId; EKS refuses {', '.join(refused)} there: give an "
                              "EksSecondAvailabilityZoneId EKS takes (the nodes may stay in their AZ)."},
        {"Assert": Or(And(uses_node_az, Not(Equals(az, eks_az))), And(own_az, Not(Equals(second, eks_az)))),
         "AssertDescription": "The two EKS control-plane subnets must be in two different AZs: "
                              "EksAvailabilityZoneId must differ from EksSecondAvailabilityZoneId (or, when that is "
                              "empty, from AvailabilityZoneId)."},
    ]})
    for subnet in (subnet_a, subnet_b):
        t.add_resource(ec2.SubnetRouteTableAssociation(f"{subnet.title}Routes", SubnetId=Ref(subnet),
                                                       RouteTableId=Ref(private_rt)))
    common.output(t, names.OUT_EKS_SUBNET_IDS, Join(",", [Ref(subnet_a), Ref(subnet_b)]),
                  "Comma-separated EKS control-plane subnets (two EKS-only subnets, not the node subnet).")
