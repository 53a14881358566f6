"""The service quotas a HyperPod deploy needs, read through the Service Quotas API.

Each quota is read by code (``GetServiceQuota``: the account's applied value, else the AWS
default). Per-instance-type SageMaker codes differ by type and some are not published, so those
are found by their exact name (``ListServiceQuotas``) when the code is not in the table or the
code's name does not match. A quota that cannot be read is "unknown", never "pass".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hpq.aws.session import client, error_code, error_message, region_of, translate
from hpq.errors import UsageError
from hpq.lifecycle.catalog import CLUSTER_USAGE_QUOTA_CODES, DEFAULT_CONTROLLER_TYPE
from hpq.vocab import DEFAULT_EBS_GB, DEFAULT_FSX_GIB, EKS, SLURM

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"

CODE_TOTAL_INSTANCES = "L-3308CCC7"  # Total number of instances allowed across SageMaker HyperPod clusters
CODE_INSTANCES_PER_CLUSTER = "L-2CE978FC"  # Maximum number instances allowed per SageMaker HyperPod cluster
CODE_VPCS = "L-F678F1CE"  # vpc: VPCs per Region
CODE_IGWS = "L-A4707A72"  # vpc: Internet gateways per Region
CODE_NAT_PER_AZ = "L-FE5A380F"  # vpc: NAT gateways per Availability Zone
CODE_INTERFACE_ENDPOINTS = "L-29B6F2EB"  # vpc: Interface VPC endpoints per VPC
CODE_EIPS = "L-0263D0A3"  # ec2: EC2-VPC Elastic IPs
CODE_EKS_CLUSTERS = "L-1194D53C"  # eks: Clusters

# Interface endpoints the Networking stack creates (ECR api/dkr, STS, Logs, SSM, SSMMessages, EC2Messages).
INTERFACE_ENDPOINTS = 7


@dataclass(frozen=True)
class QuotaSpec:
    key: str
    service: str
    title: str
    needed_new: float
    code: str | None = None
    name: str | None = None  # exact QuotaName to verify or find by
    name_all: tuple[str, ...] = ()  # lowercase words a QuotaName must contain (fallback search)
    usage: Callable[[Any], float] | None = None  # what the account already uses (same unit)


@dataclass
class QuotaResult:
    spec: QuotaSpec
    needed: float | None
    applied: float | None
    code: str | None
    status: str
    source: str = ""
    note: str = ""
    in_use: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "quota": self.spec.title, "service": self.spec.service, "code": self.code, "needed": self.needed,
            "in_use": self.in_use, "applied": self.applied, "status": self.status, "source": self.source,
            "note": self.note,
        }


@dataclass
class QuotaReport:
    instance_type: str
    count: int
    region: str
    results: list[QuotaResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.status == PASS for r in self.results)

    def as_dict(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type, "count": self.count, "region": self.region, "ok": self.ok,
            "quotas": [r.as_dict() for r in self.results],
        }


def cluster_usage_name(instance_type: str) -> str:
    return f"{instance_type} for cluster usage"


def plan(instance_type: str, count: int, orchestrator: str = SLURM, controller_type: str = DEFAULT_CONTROLLER_TYPE,
         fsx_gib: int = DEFAULT_FSX_GIB, ebs_gib: int = DEFAULT_EBS_GB, usage: Any = None) -> list[QuotaSpec]:
    """The quotas a deploy of ``count`` nodes of ``instance_type`` needs, in a fixed order."""
    u = usage or Usage(None, None)
    nodes = count + (1 if orchestrator == SLURM else 0)
    specs = [
        QuotaSpec("instance", "sagemaker", cluster_usage_name(instance_type), count,
                  CLUSTER_USAGE_QUOTA_CODES.get(instance_type), cluster_usage_name(instance_type)),
    ]
    if orchestrator == SLURM:
        specs.append(QuotaSpec("controller", "sagemaker", cluster_usage_name(controller_type), 1,
                               CLUSTER_USAGE_QUOTA_CODES.get(controller_type), cluster_usage_name(controller_type)))
    specs += [
        QuotaSpec("total-instances", "sagemaker", "Total number of instances allowed across SageMaker HyperPod clusters",
                  nodes, CODE_TOTAL_INSTANCES, "Total number of instances allowed across SageMaker HyperPod clusters"),
        QuotaSpec("instances-per-cluster", "sagemaker", "Maximum number instances allowed per SageMaker HyperPod cluster",
                  nodes, CODE_INSTANCES_PER_CLUSTER, "Maximum number instances allowed per SageMaker HyperPod cluster"),
        QuotaSpec("ebs-per-instance", "sagemaker", "Maximum size of EBS volume in GB for a SageMaker HyperPod cluster instance",
                  ebs_gib, None, "Maximum size of EBS volume in GB for a SageMaker HyperPod cluster instance",
                  ("ebs", "hyperpod", "instance")),
        QuotaSpec("vpcs", "vpc", "VPCs per Region", 1, CODE_VPCS, usage=u.vpcs),
        QuotaSpec("internet-gateways", "vpc", "Internet gateways per Region", 1, CODE_IGWS, usage=u.igws),
        QuotaSpec("nat-per-az", "vpc", "NAT gateways per Availability Zone", 1, CODE_NAT_PER_AZ, usage=u.nat_per_az),
        QuotaSpec("elastic-ips", "ec2", "EC2-VPC Elastic IPs", 1, CODE_EIPS, usage=u.eips),
        QuotaSpec("interface-endpoints", "vpc", "Interface VPC endpoints per VPC", INTERFACE_ENDPOINTS,
                  CODE_INTERFACE_ENDPOINTS),
        QuotaSpec("fsx-lustre-storage", "fsx", "FSx for Lustre persistent SSD storage capacity (GiB)", fsx_gib,
                  None, None, ("lustre", "persistent", "storage")),
    ]
    if orchestrator == EKS:
        specs.append(QuotaSpec("eks-clusters", "eks", "EKS clusters per Region", 1, CODE_EKS_CLUSTERS,
                               usage=u.eks_clusters))
    return specs


class Usage:
    """What the account already uses, read from EC2/EKS; each reader returns None when unreadable."""

    def __init__(self, ec2: Any, eks: Any) -> None:
        self.ec2, self.eks = ec2, eks

    def _count(self, method: str, key: str, **kw: Any) -> float:
        total = 0
        for page in self.ec2.get_paginator(method).paginate(**kw):
            total += len(page.get(key, []))
        return float(total)

    def vpcs(self, _: Any = None) -> float:
        return self._count("describe_vpcs", "Vpcs")

    def igws(self, _: Any = None) -> float:
        return self._count("describe_internet_gateways", "InternetGateways")

    def eips(self, _: Any = None) -> float:
        return float(len(self.ec2.describe_addresses().get("Addresses", [])))

    def nat_per_az(self, _: Any = None) -> float:
        subnets: dict[str, str] = {}
        for page in self.ec2.get_paginator("describe_subnets").paginate():
            for s in page.get("Subnets", []):
                subnets[s["SubnetId"]] = s.get("AvailabilityZone", "")
        per_az: dict[str, int] = {}
        for page in self.ec2.get_paginator("describe_nat_gateways").paginate(
                Filters=[{"Name": "state", "Values": ["pending", "available"]}]):
            for gw in page.get("NatGateways", []):
                az = subnets.get(gw.get("SubnetId", ""), "?")
                per_az[az] = per_az.get(az, 0) + 1
        return float(max(per_az.values(), default=0))

    def eks_clusters(self, _: Any = None) -> float:
        total = 0
        for page in self.eks.get_paginator("list_clusters").paginate():
            total += len(page.get("clusters", []))
        return float(total)


class QuotaReader:
    """Reads quotas by code with a by-name fallback; caches one name listing per service."""

    def __init__(self, sq: Any) -> None:
        self.sq = sq
        self._listings: dict[str, list[dict[str, Any]]] = {}

    def by_code(self, service: str, code: str) -> tuple[dict[str, Any] | None, str, str]:
        """(quota, source, problem)."""
        import botocore.exceptions

        try:
            return self.sq.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"], "applied", ""
        except botocore.exceptions.ClientError as exc:
            first = f"{error_code(exc)}: {error_message(exc)}"
            if error_code(exc) not in ("NoSuchResourceException",):
                mapped = translate(exc, f"servicequotas:GetServiceQuota {service}/{code}")
                return None, "", str(mapped or first)
        try:
            return self.sq.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"], "default", ""
        except botocore.exceptions.ClientError as exc:
            mapped = translate(exc, f"servicequotas:GetAWSDefaultServiceQuota {service}/{code}")
            return None, "", str(mapped or exc)

    def listing(self, service: str) -> list[dict[str, Any]]:
        if service not in self._listings:
            quotas: list[dict[str, Any]] = []
            for page in self.sq.get_paginator("list_service_quotas").paginate(ServiceCode=service):
                quotas.extend(page.get("Quotas", []))
            self._listings[service] = quotas
        return self._listings[service]

    def by_name(self, service: str, name: str | None, words: tuple[str, ...]) -> dict[str, Any] | None:
        quotas = self.listing(service)
        if name:
            for q in quotas:
                if q.get("QuotaName", "").lower() == name.lower():
                    return q
        if words:
            hits = [q for q in quotas if all(w in q.get("QuotaName", "").lower() for w in words)]
            hits.sort(key=lambda q: ("ssd" not in q.get("QuotaName", "").lower(), q.get("QuotaName", "")))
            return hits[0] if hits else None
        return None


def read_quota(reader: QuotaReader, spec: QuotaSpec) -> tuple[dict[str, Any] | None, str, str]:
    """Find and read one quota; (quota, source, problem)."""
    import botocore.exceptions

    problem = ""
    if spec.code:
        quota, source, problem = reader.by_code(spec.service, spec.code)
        if quota and (not spec.name or quota.get("QuotaName", "").lower() == spec.name.lower()):
            return quota, source, ""
        if quota:
            problem = f"code {spec.code} is {quota.get('QuotaName')!r}, not {spec.name!r}"
    if spec.name or spec.name_all:
        try:
            found = reader.by_name(spec.service, spec.name, spec.name_all)
        except botocore.exceptions.ClientError as exc:
            mapped = translate(exc, f"servicequotas:ListServiceQuotas {spec.service}")
            return None, "", str(mapped or exc)
        if found:
            quota, source, why = reader.by_code(spec.service, found["QuotaCode"])
            if quota:
                return quota, source, ""
            return found, "listed", why
        problem = problem or f"no quota named {spec.name or ' '.join(spec.name_all)!r} in {spec.service}"
    return None, "", problem or "not readable"


def evaluate(spec: QuotaSpec, quota: dict[str, Any] | None, source: str, problem: str) -> QuotaResult:
    in_use: float | None = 0.0
    note = problem
    if spec.usage is not None:
        try:
            in_use = spec.usage(None)
        except Exception as exc:  # noqa: BLE001 - usage is reported, not fatal
            in_use = None
            mapped = translate(exc, "read current usage")
            note = (note + "; " if note else "") + f"current usage unreadable ({mapped or exc})"
    needed = None if in_use is None else spec.needed_new + in_use
    code = quota.get("QuotaCode") if quota else spec.code
    if quota is None or quota.get("Value") is None:
        return QuotaResult(spec, needed, None, code, UNKNOWN, source, note or "not readable", in_use)
    applied = float(quota["Value"])
    if needed is None:
        return QuotaResult(spec, needed, applied, code, UNKNOWN, source, note, in_use)
    status = PASS if applied >= needed else FAIL
    if status == FAIL:
        note = (note + "; " if note else "") + (
            f"request an increase: aws service-quotas request-service-quota-increase --service-code {spec.service} "
            f"--quota-code {code} --desired-value {int(needed)}"
        )
    return QuotaResult(spec, needed, applied, code, status, source, note, in_use)


def _nodes(values: dict[str, str], orchestrator: str) -> dict[str, int]:
    """Instance type -> count a stack with these root parameters runs (workers, Slurm controller and login)."""
    out: dict[str, int] = {}

    def add(itype: str, n: int) -> None:
        if itype and n > 0:
            out[itype] = out.get(itype, 0) + n

    add(values.get("WorkerInstanceType", ""), _int(values.get("WorkerCount")))
    if orchestrator == SLURM:
        add(values.get("ControllerInstanceType", ""), 1)
        if values.get("EnableLoginGroup") == "true":
            add(values.get("LoginInstanceType", ""), 1)
    return out


def _int(value: str | None) -> int:
    try:
        return int(float(value or 0))
    except ValueError:
        return 0


def deploy_needs(values: dict[str, str], previous: dict[str, str] | None, orchestrator: str,
                 usage: Any = None) -> list[QuotaSpec]:
    """The quotas ``hpq deploy`` checks for a stack with root parameters ``values``.

    A new stack (``previous`` None) needs what ``plan`` lists. An update needs only its increase: more instances
    of a type, more instances in all, more FSx capacity; a per-cluster or per-instance maximum (instances per
    cluster, EBS GB per instance) is checked at its new value when that value grows. VPC, NAT, EIP, endpoint
    and EKS quotas are taken once, at creation. Workers on a training plan use its reserved capacity, so their
    type's "for cluster usage" quota is not counted for them.
    """
    u = usage or Usage(None, None)
    old = previous or {}
    planned = values.get("TrainingPlanArn", "").strip()
    now = _nodes(values, orchestrator)
    before = _nodes(old, orchestrator) if previous is not None else {}
    worker = values.get("WorkerInstanceType", "")
    specs: list[QuotaSpec] = []
    for itype, count in now.items():
        more = count - before.get(itype, 0)
        if planned and itype == worker:
            more -= _int(values.get("WorkerCount"))  # reserved by the plan
        if more > 0:
            specs.append(QuotaSpec("instance:" + itype, "sagemaker", cluster_usage_name(itype), more,
                                   CLUSTER_USAGE_QUOTA_CODES.get(itype), cluster_usage_name(itype)))
    total, total_before = sum(now.values()), sum(before.values())
    if total > total_before:
        title = "Total number of instances allowed across SageMaker HyperPod clusters"
        specs.append(QuotaSpec("total-instances", "sagemaker", title, total - total_before, CODE_TOTAL_INSTANCES,
                               title))
        title = "Maximum number instances allowed per SageMaker HyperPod cluster"
        specs.append(QuotaSpec("instances-per-cluster", "sagemaker", title, total, CODE_INSTANCES_PER_CLUSTER, title))
    ebs = _int(values.get("EbsVolumeSizeGB"))
    if ebs > _int(old.get("EbsVolumeSizeGB")) or previous is None:
        title = "Maximum size of EBS volume in GB for a SageMaker HyperPod cluster instance"
        specs.append(QuotaSpec("ebs-per-instance", "sagemaker", title, ebs, None, title, ("ebs", "hyperpod", "instance")))
    if previous is None:
        specs += [
            QuotaSpec("vpcs", "vpc", "VPCs per Region", 1, CODE_VPCS, usage=u.vpcs),
            QuotaSpec("internet-gateways", "vpc", "Internet gateways per Region", 1, CODE_IGWS, usage=u.igws),
            QuotaSpec("nat-per-az", "vpc", "NAT gateways per Availability Zone", 1, CODE_NAT_PER_AZ,
                      usage=u.nat_per_az),
            QuotaSpec("elastic-ips", "ec2", "EC2-VPC Elastic IPs", 1, CODE_EIPS, usage=u.eips),
            QuotaSpec("interface-endpoints", "vpc", "Interface VPC endpoints per VPC", INTERFACE_ENDPOINTS,
                      CODE_INTERFACE_ENDPOINTS),
        ]
        if orchestrator == EKS:
            specs.append(QuotaSpec("eks-clusters", "eks", "EKS clusters per Region", 1, CODE_EKS_CLUSTERS,
                                   usage=u.eks_clusters))
    fsx_more = _int(values.get("FsxStorageCapacityGiB")) - _int(old.get("FsxStorageCapacityGiB"))
    if fsx_more > 0:
        specs.append(QuotaSpec("fsx-lustre-storage", "fsx", "FSx for Lustre persistent SSD storage capacity (GiB)",
                               fsx_more, None, None, ("lustre", "persistent", "storage")))
    return specs


class StopAfterServerError:
    """The Service Quotas client, until it answers a server error (HTTP 5xx, after botocore's own retries): then
    every later call fails at once with that error. One failing service costs one round of retries (seconds),
    not one per quota (half a minute of silence for a deploy's 7 quotas)."""

    def __init__(self, sq: Any) -> None:
        self.sq, self.down = sq, None

    def _guard(self, method: Any) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            if self.down is not None:
                raise self.down
            try:
                return method(*args, **kw)
            except Exception as exc:
                status = ((getattr(exc, "response", None) or {}).get("ResponseMetadata") or {}).get("HTTPStatusCode")
                if isinstance(status, int) and status >= 500:
                    self.down = exc
                raise
        return call

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.sq, name)
        return self._guard(attr) if callable(attr) else attr


def check_specs(session: Any, specs: list[QuotaSpec], sq: Any = None) -> list[QuotaResult]:
    """Read and judge each quota; anything that goes wrong reading one makes it unknown, never pass or a crash."""
    sq = StopAfterServerError(sq or client(session, "service-quotas"))
    reader = QuotaReader(sq)
    results = []
    for spec in specs:
        try:
            quota, source, problem = read_quota(reader, spec)
        except Exception as exc:  # noqa: BLE001 - unreachable endpoint, odd answers: unknown, said why
            mapped = translate(exc, f"servicequotas {spec.service}")
            if isinstance(mapped, UsageError):  # no or bad credentials, no region: the user's to fix (exit 2)
                raise mapped from None
            quota, source, problem = None, "", str(mapped or exc)
        results.append(evaluate(spec, quota, source, problem))
    return results


def check_quotas(session: Any, instance_type: str, count: int, orchestrator: str = SLURM,
                 controller_type: str = DEFAULT_CONTROLLER_TYPE, fsx_gib: int = DEFAULT_FSX_GIB,
                 ebs_gib: int = DEFAULT_EBS_GB, sq: Any = None) -> QuotaReport:
    """Read every quota in the plan; ``sq`` lets tests hand in a Stubber-wrapped client."""
    region = region_of(session)
    usage = Usage(client(session, "ec2"), client(session, "eks"))
    report = QuotaReport(instance_type, count, region)
    report.results = check_specs(session, plan(instance_type, count, orchestrator, controller_type, fsx_gib, ebs_gib,
                                               usage), sq)
    return report
