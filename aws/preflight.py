"""Pre-flight checks ``hpq deploy`` runs before anything in AWS changes.

Each check is a small validator object that records failures with a level, after
aws-parallelcluster's validators (aws/aws-parallelcluster cli/src/pcluster/validators/common.py:
``FailureLevel``, ``Validator._add_failure``). An ERROR stops the deploy with one line saying what to
do instead (exit 2); a WARNING is printed and the deploy goes on. The checks work on the parameter
values the stack will get (template defaults, the existing stack's values on an update, the user's
``--param``s), so they see what CloudFormation would see, minutes earlier and for free.
"""

from __future__ import annotations

import datetime
import ipaddress
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any

from hpq.aws import quotas
from hpq.aws.session import aws_errors, client
from hpq.aws.training_plan import HYPERPOD_TARGET
from hpq.cfn import offers, regions, synth
from hpq.errors import UsageError


class FailureLevel(Enum):
    INFO = 20
    WARNING = 30
    ERROR = 40


@dataclass(frozen=True)
class Failure:
    check: str
    level: FailureLevel
    message: str


class Validator(ABC):
    """One check; call it with keyword arguments, get its failures back."""

    def __init__(self) -> None:
        self._failures: list[Failure] = []

    def _add_failure(self, message: str, level: FailureLevel) -> None:
        self._failures.append(Failure(type(self).__name__, level, message))

    @abstractmethod
    def _validate(self, **kwargs: Any) -> None:
        """Record failures with _add_failure."""

    def __call__(self, **kwargs: Any) -> list[Failure]:
        self._failures = []
        self._validate(**kwargs)
        return list(self._failures)


class InstanceTypeOfferValidator(Validator):
    """A type without an on-demand HyperPod offer in the region needs a training plan (cfn-lint's data)."""

    def _validate(self, *, parameter: str, instance_type: str, region: str, training_plan: str = "",
                  plan_allowed: bool = True) -> None:
        if not instance_type or offers.has_on_demand_offer(instance_type, region):
            return
        if training_plan and plan_allowed:
            return
        where = offers.offer_regions(instance_type)
        elsewhere = f"deploy in a region that offers it ({', '.join(where)})" if where else \
            "no region offers it on demand"
        todo = (f"pass --param TrainingPlanArn=<a SageMaker training plan for {instance_type}> or {elsewhere}"
                if plan_allowed else f"choose another {parameter} or {elsewhere}")
        self._add_failure(f"{parameter} {instance_type} has no on-demand SageMaker HyperPod offer in {region} "
                          f"(per {offers.source()}): {todo}", FailureLevel.ERROR)


class RegionValidator(Validator):
    """The variant deploys only where CloudFormation has every resource type it creates (cfn/regions.py, from
    cfn-lint's per-region provider schemas); elsewhere the stack fails at the first missing type, after the VPC,
    FSx and (EKS) the cluster exist. The root template's RegionHasEveryResourceType rule says the same."""

    def _validate(self, *, variant: str, region: str) -> None:
        where = regions.variant_regions(variant)
        if region in where:
            return
        if region in regions.known_regions():
            types = regions.required_types(synth.synthesize(variant).values())
            missing = regions.missing_types(region, types)
            why = (f"CloudFormation there has no {', '.join(missing)}" if missing else
                   "SageMaker HyperPod has no on-demand offer there")
        else:
            why = "cfn-lint's data does not know the region"
        self._add_failure(f"hpq {variant} cannot be deployed in {region}: {why} (per {regions.source()}); "
                          f"use --region with one of: {', '.join(where)}", FailureLevel.ERROR)


class ObservabilityRegionValidator(Validator):
    """EnableObservability=true where CloudFormation has no AWS::Grafana::Workspace: the Observability stack
    creates Managed Prometheus only (its GrafanaInRegion condition, cfn/observability.py)."""

    def _validate(self, *, region: str, enabled: bool) -> None:
        if not enabled or region in regions.grafana_regions() or region not in regions.hyperpod_regions():
            return
        self._add_failure(f"EnableObservability=true: Managed Grafana is not available in {region} (CloudFormation "
                          f"has no {regions.GRAFANA_TYPE} there, per {regions.source()}): only the Managed "
                          "Prometheus workspace is created; Grafana regions: "
                          f"{', '.join(regions.grafana_regions())}", FailureLevel.WARNING)


def region_checks(variant: str, region: str, values: dict[str, str]) -> list[Failure]:
    """Where the variant (and its optional Grafana) can be created at all; run before every other check."""
    failures = RegionValidator()(variant=variant, region=region)
    failures += ObservabilityRegionValidator()(region=region, enabled=values.get("EnableObservability") == "true")
    return failures


class EksControlPlaneAzValidator(Validator):
    """EKS refuses control-plane subnets in a few AZ ids (EKS user guide, network-reqs.html) and wants two AZs;
    ``zone_ids`` are the control-plane subnets' (cfn/networking.py control_plane_az_ids)."""

    def _validate(self, *, zone_ids: dict[str, str]) -> None:
        from hpq.cfn.networking import EKS_SECOND_AZ_PARAM, EKS_UNSUPPORTED_AZ_IDS

        for parameter, zone in zone_ids.items():
            if zone in EKS_UNSUPPORTED_AZ_IDS:
                todo = (f"--param {EKS_SECOND_AZ_PARAM}=<another AZ id> (the nodes may stay in {zone})"
                        if parameter == "AvailabilityZoneId" else f"--param {parameter}=<another AZ id>")
                self._add_failure(f"{parameter}={zone} would hold an EKS control-plane subnet: EKS does not place "
                                  f"control planes in {', '.join(EKS_UNSUPPORTED_AZ_IDS)}; pass {todo}",
                                  FailureLevel.ERROR)
        if len(zone_ids) == 2 and len(set(zone_ids.values())) == 1:
            self._add_failure(f"{' and '.join(zone_ids)} are both {next(iter(zone_ids.values()))}: the EKS control "
                              "plane needs two AZs; choose different ones", FailureLevel.ERROR)


class KubernetesSupportValidator(Validator):
    """EKS creates versions in standard or extended support; STANDARD only fits a version in standard support,
    and HyperPod supports the versions its EKS prerequisites page lists (cfn/eks.py HYPERPOD_VERSIONS).

    EKS user guide: the release calendar (kubernetes-versions.html: with STANDARD, EKS upgrades the control plane
    at the end of standard support) and "Manage EKS extended support" (a cluster in extended support cannot be set
    to STANDARD)."""

    def _validate(self, *, version: str, support_type: str, today: datetime.date) -> None:
        from hpq.cfn import eks

        dates = eks.KUBERNETES_CALENDAR.get(version)
        if dates is None:
            return
        if version not in eks.HYPERPOD_VERSIONS:
            self._add_failure(f"KubernetesVersion {version} is not one SageMaker HyperPod documents "
                              f"({', '.join(eks.HYPERPOD_VERSIONS)}; {eks.HYPERPOD_VERSIONS_URL}, read "
                              f"{eks.HYPERPOD_VERSIONS_READ}): HyperPod may refuse the EKS cluster 30 to 40 minutes "
                              f"in; {eks.DEFAULT_KUBERNETES_VERSION} is the newest documented", FailureLevel.WARNING)
        std_end, ext_end = (datetime.date.fromisoformat(d) for d in dates)
        if today >= ext_end:
            self._add_failure(f"KubernetesVersion {version} left EKS extended support on {ext_end}: EKS no longer "
                              "creates it; choose a newer version", FailureLevel.ERROR)
        elif today >= std_end and support_type == "STANDARD":
            self._add_failure(f"KubernetesVersion {version} left EKS standard support on {std_end}: it runs only "
                              "with --param EksSupportType=EXTENDED (extended-support prices); or choose a version "
                              "in standard support", FailureLevel.ERROR)
        elif today >= std_end:
            self._add_failure(f"KubernetesVersion {version} is in EKS extended support (since {std_end}): the "
                              "cluster is billed at extended-support prices", FailureLevel.WARNING)
        elif std_end - today <= datetime.timedelta(days=eks.SUPPORT_HORIZON_DAYS):
            if support_type == "STANDARD":
                self._add_failure(f"KubernetesVersion {version} leaves EKS standard support on {std_end}: with "
                                  "EksSupportType=STANDARD EKS then upgrades the control plane to the next version, "
                                  "which SageMaker HyperPod may not support yet; --param EksSupportType=EXTENDED "
                                  "keeps it (extended-support prices from that date)", FailureLevel.WARNING)
            else:
                self._add_failure(f"KubernetesVersion {version} leaves EKS standard support on {std_end}: from then "
                                  "the cluster is billed at extended-support prices (EksSupportType=EXTENDED) "
                                  "until you upgrade it", FailureLevel.WARNING)


class NodeSubnetCapacityValidator(Validator):
    """The node subnet must hold every node's addresses (HyperPod prerequisites: p5 takes 81 on EKS, 32 on Slurm)."""

    def _validate(self, *, orchestrator: str, nodes: int) -> None:
        from hpq.cfn import networking

        capacity = networking.node_capacity(orchestrator)
        if nodes > capacity:
            self._add_failure(f"{nodes} nodes need more addresses than the node subnet has: at most {capacity} on "
                              f"{orchestrator} ({networking.IPS_PER_NODE[orchestrator]} per node)", FailureLevel.ERROR)


class TrainingPlanValidator(Validator):
    """The workers' training plan must be usable by this cluster: a HyperPod plan, not expired, reserving the worker
    type, in the node subnet's AZ (a plan's Reserved Capacity is in one AZ: SageMaker API reference,
    CreateTrainingPlan / ReservedCapacitySummary; aws/training_plan.py). A plan not yet started is only a
    warning: HyperPod provisions the workers once it is Active."""

    def _validate(self, *, plan: Any, worker_type: str, zone_id: str) -> None:
        name = plan.name or plan.arn
        if plan.target_resources and HYPERPOD_TARGET not in plan.target_resources:
            self._add_failure(f"training plan {name} is for {', '.join(plan.target_resources)}, not HyperPod "
                              f"clusters ({HYPERPOD_TARGET}): use a plan made for HyperPod", FailureLevel.ERROR)
            return
        if plan.status in ("Expired", "Failed"):
            self._add_failure(f"training plan {name} is {plan.status}: use another TrainingPlanArn",
                              FailureLevel.ERROR)
            return
        zones = plan.zone_ids(worker_type)
        if not any(r.instance_type == worker_type for r in plan.reservations):
            self._add_failure(f"training plan {name} reserves {', '.join(plan.instance_types()) or 'nothing'}, "
                              f"not WorkerInstanceType {worker_type}: pass --param WorkerInstanceType="
                              f"{(plan.instance_types() or [worker_type])[0]}", FailureLevel.ERROR)
            return
        if zones and zone_id not in zones:
            choice = zones[0] if len(zones) == 1 else "<one of " + ", ".join(zones) + ">"
            self._add_failure(f"AvailabilityZoneId={zone_id}, but training plan {name} reserves {worker_type} in "
                              f"{', '.join(zones)} and every worker is in the node subnet's AZ: pass --param "
                              f"AvailabilityZoneId={choice} (or leave it out)", FailureLevel.ERROR)
        if plan.status in ("Scheduled", "Pending"):
            self._add_failure(f"training plan {name} is {plan.status}: HyperPod provisions the workers only once it "
                              f"is Active, from {plan.start()}; until then the cluster waits for them",
                              FailureLevel.WARNING)


class SlurmContinuousProvisioningValidator(Validator):
    """NodeProvisioningMode=Continuous on Slurm: CloudFormation's AWS::SageMaker::Cluster schema accepts it, botocore's
    CreateCluster documentation still says EKS only (cfn/hyperpod.py PROVISIONING_MODES): say so, do not refuse."""

    def _validate(self, *, mode: str) -> None:
        if mode == "Continuous":
            self._add_failure("NodeProvisioningMode=Continuous on Slurm: CloudFormation's AWS::SageMaker::Cluster "
                              "schema accepts it, but the SageMaker API reference (CreateCluster) still documents it "
                              "for EKS clusters only; if HyperPod refuses it, the stack rolls back at the HyperPod "
                              "stack (--param NodeProvisioningMode=Standard avoids that)", FailureLevel.WARNING)


class PublicEndpointValidator(Validator):
    """The Helm Lambda reaches the EKS API from outside the VPC, through the public endpoint."""

    def _validate(self, *, cidrs: str) -> None:
        blocks = [c.strip() for c in cidrs.split(",") if c.strip()]
        if any(ipaddress.ip_network(c, strict=False).prefixlen == 0 for c in blocks):
            return
        self._add_failure(f"EksPublicAccessCidrs={cidrs}: the Helm stack's Lambda reaches the EKS API from AWS "
                          "Lambda's public addresses; unless those are in the list the chart install fails",
                          FailureLevel.WARNING)


class EndpointZoneValidator(Validator):
    """Every interface endpoint the Networking stack puts into the node subnet must be offered in its AZ: an
    endpoint service is available in some AZs of a region only, and CloudFormation fails the VPC endpoint (and
    rolls back everything) otherwise. EC2 API reference, DescribeVpcEndpointServices: ServiceDetail.AvailabilityZones,
    "The Availability Zones in which the service is available"; a name the region does not have is simply not
    returned under the service-name filter."""

    def _validate(self, *, services: dict[str, list[str]], wanted: list[str], zone_id: str, zone_name: str) -> None:
        missing = [s for s in wanted if s not in services]
        elsewhere = [s for s in wanted if s in services and zone_name not in services[s]]
        if missing:
            self._add_failure(f"the region has no VPC endpoint service {', '.join(missing)} (ec2:DescribeVpc"
                              "EndpointServices): the Networking stack cannot create its interface endpoints here",
                              FailureLevel.ERROR)
        if elsewhere:
            where = sorted(set.intersection(*(set(services[s]) for s in wanted if s in services)))
            self._add_failure(f"AvailabilityZoneId={zone_id} ({zone_name}): the VPC endpoint service(s) "
                              f"{', '.join(elsewhere)} are not offered in that AZ (ec2:DescribeVpcEndpointServices); "
                              f"choose an AZ that has them all ({', '.join(where) or 'none'}) with --param "
                              "AvailabilityZoneId=<its AZ id>", FailureLevel.ERROR)


def endpoint_zone_checks(ec2: Any, region: str, zone_id: str) -> list[Failure]:
    """Ask EC2 which AZs offer each interface endpoint service the templates create (cfn/networking.py)."""
    from botocore.exceptions import ClientError

    from hpq.cfn.networking import INTERFACE_ENDPOINTS

    if not zone_id:
        return []
    wanted = [f"com.amazonaws.{region}.{s}" for s in INTERFACE_ENDPOINTS]
    with aws_errors("ec2:DescribeAvailabilityZones"):
        zones = ec2.describe_availability_zones(ZoneIds=[zone_id])["AvailabilityZones"]
    zone_name = zones[0]["ZoneName"] if zones else ""
    services: dict[str, list[str]] = {}
    for names in [wanted] + [[w] for w in wanted]:  # all at once; one by one only if a name is unknown
        try:
            page = ec2.describe_vpc_endpoint_services(ServiceNames=names)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidServiceName":
                with aws_errors("ec2:DescribeVpcEndpointServices"):
                    raise
            continue  # a name the region does not have: asked again one by one, or left out
        for detail in page.get("ServiceDetails", []):
            services[detail["ServiceName"]] = list(detail.get("AvailabilityZones", []))
        if len(names) > 1:
            break
    return EndpointZoneValidator()(services=services, wanted=wanted, zone_id=zone_id, zone_name=zone_name)


def effective_parameters(root_template: dict, *layers: dict[str, str]) -> dict[str, str]:
    """Template defaults, overlaid by each layer in turn (existing stack values, then the user's)."""
    values = {k: str(spec["Default"]) for k, spec in (root_template.get("Parameters") or {}).items()
              if "Default" in spec}
    for layer in layers:
        values.update({k: str(v) for k, v in layer.items()})
    return values


def run(variant: str, region: str, values: dict[str, str], today: datetime.date | None = None,
        plan: Any = None, ec2: Any = None) -> list[Failure]:
    """Every check that applies to the variant, on the stack's parameter values (``plan``: the described
    TrainingPlanArn, aws/training_plan.py, when one is given; ``ec2``: a client for the checks that ask EC2)."""
    from hpq.cfn.variants import VARIANTS

    v = VARIANTS[variant]
    today = today or datetime.date.today()
    plan_arn = values.get("TrainingPlanArn", "")
    failures = region_checks(variant, region, values)
    failures += InstanceTypeOfferValidator()(parameter="WorkerInstanceType", instance_type=values.get(
        "WorkerInstanceType", ""), region=region, training_plan=plan_arn)
    if plan is not None and plan_arn_given(values):
        failures += TrainingPlanValidator()(plan=plan, worker_type=values.get("WorkerInstanceType", ""),
                                            zone_id=values.get("AvailabilityZoneId", ""))
    nodes = int(float(values.get("WorkerCount", "0") or 0))
    if v.slurm:
        failures += SlurmContinuousProvisioningValidator()(mode=values.get("NodeProvisioningMode", "Standard"))
        for param in ("ControllerInstanceType", "LoginInstanceType"):
            if param == "LoginInstanceType" and values.get("EnableLoginGroup") != "true":
                continue
            failures += InstanceTypeOfferValidator()(parameter=param, instance_type=values.get(param, ""),
                                                     region=region, plan_allowed=False)
            nodes += 1
    if v.eks:
        from hpq.cfn.networking import control_plane_az_ids

        zones = {k: z for k, z in control_plane_az_ids(values).items() if z}
        failures += EksControlPlaneAzValidator()(zone_ids=zones)
        failures += KubernetesSupportValidator()(version=values.get("KubernetesVersion", ""),
                                                 support_type=values.get("EksSupportType", "STANDARD"), today=today)
        failures += PublicEndpointValidator()(cidrs=values.get("EksPublicAccessCidrs", "0.0.0.0/0"))
    failures += NodeSubnetCapacityValidator()(orchestrator=v.orchestrator, nodes=nodes)
    if ec2 is not None and not any(f.check == RegionValidator.__name__ for f in failures):
        failures += endpoint_zone_checks(ec2, region, values.get("AvailabilityZoneId", ""))
    return failures


def plan_arn_given(values: dict[str, str]) -> bool:
    return bool(values.get("TrainingPlanArn", "").strip())


def check(variant: str, region: str, values: dict[str, str], on_note: Any = None,
          today: datetime.date | None = None, plan: Any = None, ec2: Any = None) -> list[Failure]:
    """Run the checks; warnings go to on_note, errors become one UsageError line (exit 2)."""
    failures = run(variant, region, values, today, plan, ec2)
    for f in failures:
        if f.level == FailureLevel.WARNING and on_note:
            on_note(f"warning: {f.message}")
    errors = [f.message for f in failures if f.level == FailureLevel.ERROR]
    if errors:
        raise UsageError("pre-flight: " + "; ".join(errors))
    return failures


# --- the quota step (hpq check-quotas' reading, aws/quotas.py, inside deploy's pre-flight) ---------


def _num(v: float | None) -> str:
    if v is None:
        return "?"
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def quota_line(r: Any) -> str:
    """'sagemaker/L-86822EDB (ml.g5.16xlarge for cluster usage) is 1, this deploy needs 2 (...)'."""
    extra = f" ({_num(r.in_use)} in use + {_num(r.spec.needed_new)} new)" if r.in_use else ""
    return (f"quota {r.spec.service}/{r.code or '?'} ({r.spec.title}) is {_num(r.applied)}, this deploy needs "
            f"{_num(r.needed)}{extra}")


def check_quotas(session: Any, variant: str, values: dict[str, str], previous: dict[str, str] | None = None,
                 on_note: Any = None, sq: Any = None) -> list[Any]:
    """The service quotas this deploy needs (an update: only what it adds), read as `hpq check-quotas` reads them.

    A quota that is known and below the need is an ERROR (one line: quota code, value, need; exit 2) before
    anything is created; a quota that cannot be read (API unreachable or refused, no such quota) is a WARNING,
    never a pass.
    """
    from hpq.cfn.variants import VARIANTS

    usage = quotas.Usage(client(session, "ec2"), client(session, "eks"))
    specs = quotas.deploy_needs(values, previous, VARIANTS[variant].orchestrator, usage)
    if not specs:
        return []
    if on_note:  # reading takes seconds per quota, more when the API retries: say so before the wait
        on_note(f"pre-flight: reading {len(specs)} service quota(s) from the Service Quotas API ...")
    results = quotas.check_specs(session, specs, sq)
    fails = [r for r in results if r.status == quotas.FAIL]
    unknown = [r for r in results if r.status == quotas.UNKNOWN]
    if on_note:
        for r in unknown:
            why = " ".join((r.note or "not readable").split())
            on_note(f"warning: quota {r.spec.service}/{r.code or '?'} ({r.spec.title}) not checked: "
                    f"{why[:200] + ' ...' if len(why) > 200 else why}")
        on_note(f"quotas ({'new stack' if previous is None else 'what this update adds'}): "
                f"{len(results) - len(fails) - len(unknown)} pass, {len(fails)} fail, {len(unknown)} unknown")
    if fails:
        how = (f"; request an increase (aws service-quotas request-service-quota-increase --service-code "
               f"{fails[0].spec.service} --quota-code {fails[0].code} --desired-value {int(fails[0].needed or 0)})")
        raise UsageError("pre-flight: " + "; ".join(quota_line(r) for r in fails) + how)
    return results
