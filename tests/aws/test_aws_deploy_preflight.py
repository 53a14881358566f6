"""``hpq deploy``'s pre-flight checks: each validator alone, then the command refusing before any change.

The region data is cfn-lint's own (cfn/offers.py); the AZ ids EKS refuses and the Kubernetes calendar
come from the EKS user guide (network-reqs.html, kubernetes-versions.html); the IP counts from the
SageMaker HyperPod prerequisites. The end-to-end test runs against moto over HTTP (the stand-in for
AWS) and checks that nothing was uploaded and no stack exists after the refusal.
"""

from __future__ import annotations

import datetime

import boto3
import pytest

from hpq.aws import preflight
from hpq.errors import UsageError

TODAY = datetime.date(2026, 11, 23)
PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p5e-plan"


def levels(failures):
    return [(f.check, f.level.name) for f in failures]


def test_type_without_an_on_demand_offer_needs_a_plan_or_another_region():
    check = preflight.InstanceTypeOfferValidator()
    [fail] = check(parameter="WorkerInstanceType", instance_type="ml.trn2.48xlarge", region="us-west-2")
    assert fail.level == preflight.FailureLevel.ERROR
    assert "no on-demand SageMaker HyperPod offer in us-west-2" in fail.message
    assert "--param TrainingPlanArn=" in fail.message and "(us-east-2)" in fail.message
    assert "cfn-lint 1.58.0" in fail.message  # names the data it rests on
    assert check(parameter="WorkerInstanceType", instance_type="ml.trn2.48xlarge", region="us-east-2") == []
    assert check(parameter="WorkerInstanceType", instance_type="ml.trn2.48xlarge", region="us-west-2",
                 training_plan=PLAN) == []
    [p5e] = check(parameter="WorkerInstanceType", instance_type="ml.p5e.48xlarge", region="us-east-1")
    assert "no region offers it on demand" in p5e.message
    [ctl] = check(parameter="ControllerInstanceType", instance_type="ml.m5.xlarge", region="eu-west-3",
                  training_plan=PLAN, plan_allowed=False)  # a plan only covers the workers
    assert "choose another ControllerInstanceType" in ctl.message


def test_eks_control_plane_az_ids():
    """The control-plane subnets' AZs (EKS-only subnets: cfn/networking.py): EKS refuses use1-az3 & co there."""
    from hpq.cfn.networking import control_plane_az_ids

    check = preflight.EksControlPlaneAzValidator()
    [fail] = check(zone_ids={"AvailabilityZoneId": "use1-az4", "EksAvailabilityZoneId": "use1-az3"})
    assert fail.level == preflight.FailureLevel.ERROR and "EksAvailabilityZoneId=use1-az3" in fail.message
    assert check(zone_ids={"AvailabilityZoneId": "usw2-az1", "EksAvailabilityZoneId": "usw2-az2"}) == []
    nodes_in_az3 = {"AvailabilityZoneId": "use1-az3", "EksAvailabilityZoneId": "use1-az4"}
    [second] = check(zone_ids=control_plane_az_ids(nodes_in_az3))
    assert "--param EksSecondAvailabilityZoneId=" in second.message
    assert check(zone_ids=control_plane_az_ids(dict(nodes_in_az3, EksSecondAvailabilityZoneId="use1-az6"))) == []
    [same] = check(zone_ids=control_plane_az_ids(dict(nodes_in_az3, EksSecondAvailabilityZoneId="use1-az4")))
    assert "needs two AZs" in same.message


def test_kubernetes_version_and_support_type():
    """EKS calendar (kubernetes-versions.html) with today's date; HyperPod's documented list (cfn/eks.py)."""
    check = preflight.KubernetesSupportValidator()
    # 1.35: EKS creates it in standard support, but HyperPod does not document it: a warning, not an error.
    [newer] = check(version="1.35", support_type="STANDARD", today=TODAY)
    assert newer.level == preflight.FailureLevel.WARNING and "not one SageMaker HyperPod documents" in newer.message
    assert "sagemaker-hyperpod-eks-prerequisites.html" in newer.message
    # 1.34 leaves standard support on 2026-12-02: STANDARD means an EKS upgrade to 1.35 then; EXTENDED costs more.
    [std] = check(version="1.34", support_type="STANDARD", today=TODAY)
    assert std.level == preflight.FailureLevel.WARNING and "upgrades the control plane" in std.message
    [ext] = check(version="1.34", support_type="EXTENDED", today=TODAY)
    assert ext.level == preflight.FailureLevel.WARNING and "2026-12-02" in ext.message
    assert check(version="1.34", support_type="STANDARD", today=datetime.date(2026, 6, 1)) == []
    [err] = check(version="1.33", support_type="STANDARD", today=TODAY)
    assert err.level == preflight.FailureLevel.ERROR and "EksSupportType=EXTENDED" in err.message
    [warn] = check(version="1.32", support_type="EXTENDED", today=TODAY)
    assert warn.level == preflight.FailureLevel.WARNING and "extended-support prices" in warn.message
    [gone] = check(version="1.32", support_type="EXTENDED", today=datetime.date(2027, 3, 23))
    assert gone.level == preflight.FailureLevel.ERROR and "no longer" in gone.message


def test_region_must_have_every_resource_type_of_the_variant():
    """cfn-lint 1.58.0's provider schemas: no AWS::SageMaker::Cluster in eu-central-2 (where the pricing data still
    lists HyperPod types), none in eu-west-3 either; us-east-1 has everything."""
    check = preflight.RegionValidator()
    assert check(variant="eks-gpu", region="us-east-1") == []
    [fail] = check(variant="eks-gpu", region="eu-central-2")
    assert fail.level == preflight.FailureLevel.ERROR
    assert "CloudFormation there has no AWS::SageMaker::Cluster" in fail.message and "us-west-2" in fail.message
    [other] = check(variant="slurm-gpu", region="eu-west-3")
    assert "AWS::SageMaker::Cluster" in other.message
    [unknown] = check(variant="slurm-gpu", region="xx-nowhere-1")
    assert "does not know the region" in unknown.message


def test_observability_without_grafana_is_reduced_and_said_so():
    """us-west-1 has no AWS::Grafana::Workspace in CloudFormation (cfn-lint 1.58.0): Prometheus only, a warning."""
    check = preflight.ObservabilityRegionValidator()
    [warn] = check(region="us-west-1", enabled=True)
    assert warn.level == preflight.FailureLevel.WARNING and "only the Managed Prometheus workspace" in warn.message
    assert check(region="us-west-1", enabled=False) == []
    assert check(region="us-east-1", enabled=True) == []


def test_node_subnet_capacity():
    from hpq.cfn import networking

    check = preflight.NodeSubnetCapacityValidator()
    most = networking.node_capacity("eks")
    assert check(orchestrator="eks", nodes=most) == []
    [fail] = check(orchestrator="eks", nodes=most + 1)
    assert fail.level == preflight.FailureLevel.ERROR and "81 per node" in fail.message


def test_run_uses_the_stack_values_and_stops_on_errors():
    from hpq.cfn import synth

    root = synth.synthesize("eks-trn")["root.json"]
    values = preflight.effective_parameters(root, {"AvailabilityZoneId": "use1-az4", "EksAvailabilityZoneId": "use1-az6"})
    assert values["KubernetesVersion"] == "1.34" and values["WorkerInstanceType"] == "ml.trn1.32xlarge"
    assert levels(preflight.run("eks-trn", "us-east-1", values, datetime.date(2026, 6, 1))) == []
    assert levels(preflight.run("eks-trn", "us-east-1", values, TODAY)) == [("KubernetesSupportValidator", "WARNING")]
    elsewhere = preflight.run("eks-trn", "eu-central-2", values, datetime.date(2026, 6, 1))
    assert ("RegionValidator", "ERROR") in levels(elsewhere)
    bad = dict(values, WorkerInstanceType="ml.trn2.48xlarge", EksAvailabilityZoneId="use1-az3",
               EksPublicAccessCidrs="203.0.113.0/24")
    june = datetime.date(2026, 6, 1)
    assert sorted(levels(preflight.run("eks-trn", "us-east-1", bad, june))) == [
        ("EksControlPlaneAzValidator", "ERROR"), ("InstanceTypeOfferValidator", "ERROR"),
        ("PublicEndpointValidator", "WARNING")]
    notes: list[str] = []
    with pytest.raises(UsageError) as exc:
        preflight.check("eks-trn", "us-east-1", bad, notes.append, june)
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)
    assert notes and notes[0].startswith("warning: EksPublicAccessCidrs")


@pytest.mark.slow
def test_deploy_refuses_before_anything_changes(aws_env, capsys):
    """Against moto: a p5e worker without a plan exits 2 with the way out; no object uploaded, no stack."""
    from hpq.cli.main import main

    bucket = "hpq-preflight-refusal"
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)
    with pytest.raises(SystemExit) as exc:
        main(["deploy", "slurm-gpu", bucket, "--stack-name", "hpq-preflight", "--param",
              "WorkerInstanceType=ml.p5e.48xlarge", "--param", "AvailabilityZoneId=use1-az4"])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("hpq: error: pre-flight: WorkerInstanceType ml.p5e.48xlarge has no on-demand")
    assert "TrainingPlanArn" in lines[-1]
    assert boto3.client("s3", region_name="us-east-1").list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    stacks = boto3.client("cloudformation", region_name="us-east-1").list_stacks()["StackSummaries"]
    assert not [s for s in stacks if s["StackName"] == "hpq-preflight"]


def test_continuous_provisioning_on_slurm_is_a_warning():
    """CloudFormation's schema accepts it on Slurm, botocore's CreateCluster doc says EKS only (cfn/hyperpod.py)."""
    check = preflight.SlurmContinuousProvisioningValidator()
    [warn] = check(mode="Continuous")
    assert warn.level == preflight.FailureLevel.WARNING and "EKS clusters only" in warn.message
    assert check(mode="Standard") == []


def test_interface_endpoints_must_be_offered_in_the_node_az():
    """EC2 DescribeVpcEndpointServices (moto's rendition of the API): each service lists the AZs that offer it.
    The healthy answer passes; the same answer with one service missing from the node's AZ (broken twin) and a region
    without one service are errors naming what to do."""
    from moto import mock_aws

    from hpq.cfn.networking import INTERFACE_ENDPOINTS

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        assert preflight.endpoint_zone_checks(ec2, "us-east-1", "use1-az4") == []
        zone = ec2.describe_availability_zones(ZoneIds=["use1-az4"])["AvailabilityZones"][0]["ZoneName"]
    wanted = [f"com.amazonaws.us-east-1.{s}" for s in INTERFACE_ENDPOINTS]
    healthy = {s: ["us-east-1a", zone] for s in wanted}
    check = preflight.EndpointZoneValidator()
    assert check(services=healthy, wanted=wanted, zone_id="use1-az4", zone_name=zone) == []
    twin = dict(healthy, **{wanted[0]: ["us-east-1a"]})
    [fail] = check(services=twin, wanted=wanted, zone_id="use1-az4", zone_name=zone)
    assert fail.level == preflight.FailureLevel.ERROR and wanted[0] in fail.message and "us-east-1a" in fail.message
    gone = {s: z for s, z in healthy.items() if s != wanted[-1]}
    [absent] = check(services=gone, wanted=wanted, zone_id="use1-az4", zone_name=zone)
    assert "has no VPC endpoint service" in absent.message
