"""Storage stack: FSx for Lustre (PERSISTENT_2, LZ4) in the node subnet, tagged for discovery.

The lifecycle scripts find the filesystem by the exact tag names.CLUSTER_TAG_KEY = ClusterName,
so nobody copies DNS or mount names by hand.

PERSISTENT_2 with ``MetadataConfiguration: {Mode: AUTOMATIC}`` (FSx scales metadata IOPS with
the capacity), as both AWS references set it: awslabs/awsome-distributed-ai
1.architectures/5.sagemaker-hyperpod/sagemaker-hyperpod.yaml and 3.FSxLustre.yaml
(CloudFormation AWS::FSx::FileSystem LustreConfiguration MetadataConfiguration).
"""

from __future__ import annotations

from dataclasses import dataclass

from troposphere import GetAtt, Ref, Sub, fsx

from hpq.cfn import common
from hpq.lifecycle import names
from hpq.vocab import DEFAULT_FSX_GIB, FSX_RULE, fsx_capacities

FSX_THROUGHPUTS = (125, 250, 500, 1000)
LUSTRE_VERSION = "2.15"
METADATA_MODE = "AUTOMATIC"


@dataclass(frozen=True)
class StorageConfig:
    default_capacity_gib: int = DEFAULT_FSX_GIB
    default_throughput: int = 250


def build(cfg: StorageConfig) -> common.Template:
    t = common.new_template("hpq storage: FSx for Lustre PERSISTENT_2 in the node subnet.")
    cluster = common.cluster_name_param(t)
    subnet = common.param(t, "NodeSubnetId", "The node subnet.", type_="AWS::EC2::Subnet::Id")
    sg = common.param(t, "SecurityGroupId", "The cluster security group.", type_="AWS::EC2::SecurityGroup::Id")
    capacity = common.param(t, "StorageCapacityGiB", f"FSx for Lustre capacity: {FSX_RULE}.", type_="Number",
                            Default=str(cfg.default_capacity_gib), AllowedValues=[str(c) for c in fsx_capacities()])
    throughput = common.param(t, "PerUnitStorageThroughput", "MB/s per TiB of storage.", type_="Number",
                              Default=str(cfg.default_throughput), AllowedValues=[str(c) for c in FSX_THROUGHPUTS])
    fs = t.add_resource(fsx.FileSystem(
        "FileSystem",
        DeletionPolicy="Delete", UpdateReplacePolicy="Delete",
        FileSystemType="LUSTRE", FileSystemTypeVersion=LUSTRE_VERSION,
        StorageCapacity=capacity, SubnetIds=[subnet], SecurityGroupIds=[sg],
        LustreConfiguration=fsx.LustreConfiguration(
            DeploymentType="PERSISTENT_2", PerUnitStorageThroughput=throughput, DataCompressionType="LZ4",
            MetadataConfiguration=fsx.MetadataConfiguration(Mode=METADATA_MODE),
            validation=False,  # troposphere cannot check a Ref against the allowed throughputs; cfn-lint does
        ),
        Tags=common.tags(Sub("${ClusterName}-fsx"), {names.CLUSTER_TAG_KEY: cluster}),
    ))
    common.output(t, names.OUT_FSX_ID, Ref(fs), "FSx for Lustre filesystem ID.")
    common.output(t, names.OUT_FSX_DNS, GetAtt(fs, "DNSName"), "FSx DNS name.")
    common.output(t, names.OUT_FSX_MOUNT, GetAtt(fs, "LustreMountName"), "FSx Lustre mount name.")
    return t
