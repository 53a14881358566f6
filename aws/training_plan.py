"""Where and when a SageMaker training plan's capacity is, for ``hpq deploy``'s pre-flight.

A training plan is one or more Reserved Capacities, each with an instance type, a count, an
Availability Zone and a time window; after payment the plan is ``Scheduled``, and instance groups
on it are provisioned once it is ``Active`` (SageMaker API reference: CreateTrainingPlan,
DescribeTrainingPlan, ReservedCapacitySummary). Every hpq worker lives in the one node subnet
(``AvailabilityZoneId``), so the subnet must be in the AZ of the plan's capacity for the worker type.
ReservedCapacitySummary names the AZ (``AvailabilityZone``) and, in newer answers, its id
(``AvailabilityZoneId``); a name alone is mapped to its id with EC2 DescribeAvailabilityZones (AZ names
are shuffled per account, ids are not).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from hpq.aws.session import aws_errors, error_code
from hpq.errors import UsageError

HYPERPOD_TARGET = "hyperpod-cluster"  # SageMakerResourceName for HyperPod clusters (TargetResources)


@dataclass(frozen=True)
class Reservation:
    instance_type: str
    zone_name: str
    zone_id: str
    status: str
    count: int


@dataclass(frozen=True)
class TrainingPlan:
    arn: str
    name: str
    status: str
    start_time: datetime.datetime | None
    target_resources: tuple[str, ...]
    reservations: tuple[Reservation, ...]

    def instance_types(self) -> list[str]:
        return sorted({r.instance_type for r in self.reservations})

    def zone_ids(self, instance_type: str) -> list[str]:
        """AZ ids of the reserved capacity for ``instance_type`` (sorted, without repeats)."""
        return sorted({r.zone_id for r in self.reservations if r.instance_type == instance_type and r.zone_id})

    def default_zone(self, instance_type: str) -> str | None:
        """The AZ id to put the node subnet in: the one AZ of the type's capacity, else None (choose)."""
        zones = self.zone_ids(instance_type)
        return zones[0] if len(zones) == 1 else None

    def start(self) -> str:
        return self.start_time.strftime("%Y-%m-%d %H:%M UTC") if self.start_time else "its start time"


def plan_region(arn: str) -> str:
    """The region in a training plan ARN (arn:aws:sagemaker:<region>:<account>:training-plan/<name>)."""
    parts = arn.split(":")
    return parts[3] if len(parts) > 5 else ""


def describe(sagemaker: Any, ec2: Any, arn: str, region: str) -> TrainingPlan:
    """DescribeTrainingPlan, with every reservation's AZ id; a plan hpq cannot use here is a UsageError."""
    where = plan_region(arn)
    if where and where != region:
        raise UsageError(f"TrainingPlanArn {arn} is a plan in {where}, the deploy is in {region}: deploy in "
                         f"{where} (--region {where}) or use a plan of {region}")
    import botocore.exceptions

    with aws_errors("sagemaker:DescribeTrainingPlan"):
        try:
            answer = sagemaker.describe_training_plan(TrainingPlanName=arn)
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) != "ResourceNotFound":
                raise
            raise UsageError(f"TrainingPlanArn {arn}: no training plan of that name in {region} "
                             "(aws sagemaker list-training-plans lists yours)") from None
    summaries = answer.get("ReservedCapacitySummaries") or []
    unnamed = sorted({s["AvailabilityZone"] for s in summaries if s.get("AvailabilityZone")
                      and not s.get("AvailabilityZoneId")})
    ids: dict[str, str] = {}
    if unnamed:
        with aws_errors("ec2:DescribeAvailabilityZones"):
            zones = ec2.describe_availability_zones(ZoneNames=unnamed)["AvailabilityZones"]
        ids = {z["ZoneName"]: z["ZoneId"] for z in zones}
    reservations = tuple(Reservation(
        instance_type=s["InstanceType"], zone_name=s.get("AvailabilityZone", ""),
        zone_id=s.get("AvailabilityZoneId") or ids.get(s.get("AvailabilityZone", ""), ""),
        status=s.get("Status", ""), count=int(s.get("TotalInstanceCount", 0))) for s in summaries)
    return TrainingPlan(arn=answer.get("TrainingPlanArn", arn), name=answer.get("TrainingPlanName", ""),
                        status=answer.get("Status", ""), start_time=answer.get("StartTime"),
                        target_resources=tuple(answer.get("TargetResources") or ()), reservations=reservations)
