"""A SageMaker training plan's capacity is in one Availability Zone: ``hpq deploy`` puts the node subnet there.

A plan is made of Reserved Capacities, each "defined by a specific instance type, quantity, Availability Zone,
duration, and start and end times"; after payment the plan is ``Scheduled`` and becomes ``Active`` at its start,
when instance groups are provisioned (SageMaker API reference, CreateTrainingPlan; DescribeTrainingPlan and
ReservedCapacitySummary for the answer's shape, as botocore's sagemaker model has it). All hpq workers are in the
one node subnet (AvailabilityZoneId), so that AZ must be the plan's.

Stand-ins: SageMaker's DescribeTrainingPlan is botocore's Stubber (moto has no training plans), which checks the
request against the service model and each canned answer against the response shape, so an answer AWS could not
give is refused. EC2's DescribeAvailabilityZones is moto (its us-east-1 has us-east-1d = use1-az4). The deploy test
runs against a moto server over HTTP.
"""

from __future__ import annotations

import datetime

import boto3
import pytest
from botocore.stub import Stubber

from hpq.aws import preflight, training_plan
from hpq.errors import UsageError

REGION = "us-east-1"
PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p5-week"
START = datetime.datetime(2026, 12, 1, 8, 0, tzinfo=datetime.timezone.utc)


def plan_answer(status: str = "Active", zone: str = "us-east-1d", zone_id: str | None = None,
                instance_type: str = "ml.p5.48xlarge", targets: tuple[str, ...] = ("hyperpod-cluster",)) -> dict:
    """DescribeTrainingPlan's answer (required fields and the ones hpq reads), as the API reference shapes it."""
    capacity = {
        "ReservedCapacityArn": "arn:aws:sagemaker:us-east-1:123456789012:reserved-capacity/p5-week-1",
        "InstanceType": instance_type, "TotalInstanceCount": 4, "Status": status,
        "AvailabilityZone": zone, "DurationHours": 168, "StartTime": START,
    }
    if zone_id:
        capacity["AvailabilityZoneId"] = zone_id
    return {"TrainingPlanArn": PLAN, "TrainingPlanName": "p5-week", "Status": status, "StartTime": START,
            "TargetResources": list(targets), "ReservedCapacitySummaries": [capacity]}


def sagemaker_stub(answer: dict) -> tuple[object, Stubber]:
    client = boto3.client("sagemaker", region_name=REGION, aws_access_key_id="a", aws_secret_access_key="b")
    stub = Stubber(client)
    stub.add_response("describe_training_plan", answer, {"TrainingPlanName": PLAN})
    stub.activate()
    return client, stub


def ec2_stub(zones: dict[str, str] | None) -> tuple[object, Stubber]:
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="a", aws_secret_access_key="b")
    stub = Stubber(client)
    if zones is not None:
        stub.add_response("describe_availability_zones", {"AvailabilityZones": [
            {"ZoneName": name, "ZoneId": zid, "State": "available", "RegionName": REGION}
            for name, zid in zones.items()]}, {"ZoneNames": sorted(zones)})
    stub.activate()
    return client, stub


def test_describe_maps_the_zone_name_to_its_id():
    """ReservedCapacitySummary names its AZ (AvailabilityZone); the AZ id comes from DescribeAvailabilityZones."""
    sm, sm_stub = sagemaker_stub(plan_answer())
    ec2, ec2_stub_ = ec2_stub({"us-east-1d": "use1-az4"})
    plan = training_plan.describe(sm, ec2, PLAN, REGION)
    sm_stub.assert_no_pending_responses()
    ec2_stub_.assert_no_pending_responses()
    assert plan.status == "Active" and plan.target_resources == ("hyperpod-cluster",)
    assert plan.zone_ids("ml.p5.48xlarge") == ["use1-az4"] and plan.zone_ids("ml.p4d.24xlarge") == []
    assert plan.default_zone("ml.p5.48xlarge") == "use1-az4"


def test_describe_uses_the_zone_id_when_the_answer_has_it():
    sm, _ = sagemaker_stub(plan_answer(zone_id="use1-az4"))
    ec2, ec2_stub_ = ec2_stub(None)  # no EC2 call expected: a call would fail the Stubber
    assert training_plan.describe(sm, ec2, PLAN, REGION).zone_ids("ml.p5.48xlarge") == ["use1-az4"]
    ec2_stub_.assert_no_pending_responses()


def test_a_plan_of_another_region_or_that_does_not_exist_is_bad_input():
    with pytest.raises(UsageError) as exc:
        training_plan.describe(None, None, PLAN.replace("us-east-1", "us-west-2"), REGION)
    assert exc.value.exit_code == 2 and "us-west-2" in str(exc.value) and "\n" not in str(exc.value)
    sm = boto3.client("sagemaker", region_name=REGION, aws_access_key_id="a", aws_secret_access_key="b")
    with Stubber(sm) as stub:
        stub.add_client_error("describe_training_plan", "ResourceNotFound", "Training plan not found",
                              expected_params={"TrainingPlanName": PLAN})
        with pytest.raises(UsageError) as exc:
            training_plan.describe(sm, None, PLAN, REGION)
    assert exc.value.exit_code == 2 and "no training plan" in str(exc.value)


def _plan(**kw) -> training_plan.TrainingPlan:
    sm, _ = sagemaker_stub(plan_answer(zone_id="use1-az4", **kw))
    return training_plan.describe(sm, None, PLAN, REGION)


def test_validator_refuses_another_az_and_says_which():
    check = preflight.TrainingPlanValidator()
    plan = _plan()
    assert check(plan=plan, worker_type="ml.p5.48xlarge", zone_id="use1-az4") == []
    [fail] = check(plan=plan, worker_type="ml.p5.48xlarge", zone_id="use1-az1")
    assert fail.level == preflight.FailureLevel.ERROR
    assert "AvailabilityZoneId=use1-az1" in fail.message and "use1-az4" in fail.message
    assert "--param AvailabilityZoneId=use1-az4" in fail.message


def test_validator_warns_while_the_plan_is_scheduled_and_refuses_what_cannot_work():
    check = preflight.TrainingPlanValidator()
    [warn] = check(plan=_plan(status="Scheduled"), worker_type="ml.p5.48xlarge", zone_id="use1-az4")
    assert warn.level == preflight.FailureLevel.WARNING
    assert "Scheduled" in warn.message and "2026-12-01" in warn.message
    [typ] = check(plan=_plan(), worker_type="ml.p4d.24xlarge", zone_id="use1-az4")
    assert typ.level == preflight.FailureLevel.ERROR and "ml.p5.48xlarge" in typ.message
    [gone] = check(plan=_plan(status="Expired"), worker_type="ml.p5.48xlarge", zone_id="use1-az4")
    assert gone.level == preflight.FailureLevel.ERROR and "Expired" in gone.message
    [jobs] = check(plan=_plan(targets=("training-job",)), worker_type="ml.p5.48xlarge", zone_id="use1-az4")
    assert jobs.level == preflight.FailureLevel.ERROR and "training-job" in jobs.message


@pytest.fixture
def stubbed_sagemaker(monkeypatch):
    """deploy's SageMaker client answers DescribeTrainingPlan from the Stubber; every other client is moto's."""
    from hpq.aws import deploy

    answers: list[dict] = []
    real = deploy.client

    def client(session, service, region=None):
        if service != "sagemaker":
            return real(session, service, region)
        sm, _ = sagemaker_stub(answers.pop(0))
        return sm

    monkeypatch.setattr(deploy, "client", client)
    return answers


@pytest.mark.slow
def test_deploy_puts_the_node_subnet_in_the_plans_az(aws_env, stubbed_sagemaker, capsys):
    """No AvailabilityZoneId given: the plan's (us-east-1d = use1-az4 in moto), not the region's first (use1-az1)."""
    from hpq.cli.main import main

    bucket = "hpq-plan-az"
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)
    stubbed_sagemaker.append(plan_answer(status="Scheduled"))
    with pytest.raises(SystemExit) as exc:
        main(["deploy", "slurm-gpu", bucket, "--stack-name", "hpq-plan", "--no-wait", "--emulate", "moto",
              "--no-quota-check", "--yes",
              "--param", "WorkerInstanceType=ml.p5.48xlarge", "--param", f"TrainingPlanArn={PLAN}"])
    err = capsys.readouterr().err
    assert exc.value.code == 0, err
    assert "AvailabilityZoneId not given: using use1-az4" in err and "training plan" in err
    assert "warning:" in err and "Scheduled" in err
    cfn = boto3.client("cloudformation", region_name=REGION)
    params = {p["ParameterKey"]: p["ParameterValue"]
              for p in cfn.describe_stacks(StackName="hpq-plan")["Stacks"][0]["Parameters"]}
    assert params["AvailabilityZoneId"] == "use1-az4" and params["TrainingPlanArn"] == PLAN


@pytest.mark.slow
def test_deploy_refuses_an_az_the_plan_is_not_in_before_anything_changes(aws_env, stubbed_sagemaker,
                                                                        capsys):
    from hpq.cli.main import main

    bucket = "hpq-plan-az-refused"
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)
    stubbed_sagemaker.append(plan_answer())
    with pytest.raises(SystemExit) as exc:
        main(["deploy", "slurm-gpu", bucket, "--stack-name", "hpq-plan-refused", "--param",
              "WorkerInstanceType=ml.p5.48xlarge", "--param", f"TrainingPlanArn={PLAN}",
              "--param", "AvailabilityZoneId=use1-az1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("hpq: error: pre-flight: ") and "use1-az4" in last and "AvailabilityZoneId=use1-az1" in last
    assert boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    stacks = boto3.client("cloudformation", region_name=REGION).list_stacks()["StackSummaries"]
    assert not [s for s in stacks if s["StackName"] == "hpq-plan-refused"]
