"""What a deploy will cost per hour and per month, before anything is created.

The quantities come from what the deploy will create: the root parameters the plan settled (instance types and
counts, FSx capacity and throughput tier, EBS sizes, EKS support type) and the synthesized templates (how many NAT
gateways, Elastic IPs, interface endpoints and the subnets each sits in, EKS clusters, FSx file systems). The
prices come from hpq.aws.pricing. Hourly items are counted per hour; GB-month items are converted with the Pricing
Calculator's 730-hour month. What depends on usage (data processed by NAT and endpoints, S3, KMS, Lambda, logs,
Managed Prometheus and Grafana) is listed as not estimated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from hpq.aws import pricing
from hpq.cfn.hyperpod import CONTROLLER_EBS_GB
from hpq.cfn.variants import VARIANTS

HOURS = Decimal(pricing.HOURS_PER_MONTH)


@dataclass
class Line:
    what: str
    quantity: Decimal  # instances, GB, gateways, endpoint-AZs...
    unit: str  # of the quantity: "instance", "GB", "gateway", "endpoint-AZ", ...
    item: str
    rate: pricing.Rate | None = None
    note: str = ""

    @property
    def hourly(self) -> Decimal | None:
        if self.rate is None:
            return None
        if self.rate.unit == "GB-Mo":
            return self.quantity * self.rate.usd / HOURS
        return self.quantity * self.rate.usd

    def as_dict(self) -> dict[str, Any]:
        hourly = self.hourly
        return {"what": self.what, "quantity": str(self.quantity), "unit": self.unit, "item": self.item,
                "hourly_usd": None if hourly is None else str(_cents(hourly, 4)),
                "monthly_usd": None if hourly is None else str(_cents(hourly * HOURS)),
                "rate": self.rate.as_dict() if self.rate else None, "note": self.note}


@dataclass
class Estimate:
    region: str
    lines: list[Line] = field(default_factory=list)
    not_estimated: list[str] = field(default_factory=list)
    sources: str = ""

    @property
    def hourly(self) -> Decimal:
        return sum((ln.hourly for ln in self.lines if ln.hourly is not None), Decimal(0))

    @property
    def monthly(self) -> Decimal:
        return self.hourly * HOURS

    @property
    def unpriced(self) -> list[Line]:
        return [ln for ln in self.lines if ln.rate is None and not ln.note.startswith("paid")]

    @property
    def unconfirmed(self) -> list[Line]:
        return [ln for ln in self.lines if ln.rate is not None and not ln.rate.confirmed]

    def as_dict(self) -> dict[str, Any]:
        return {"region": self.region, "hourly_usd": str(_cents(self.hourly, 4)),
                "monthly_usd": str(_cents(self.monthly)), "complete": not self.unpriced,
                "hours_per_month": pricing.HOURS_PER_MONTH, "lines": [ln.as_dict() for ln in self.lines],
                "unpriced": [ln.item for ln in self.unpriced],
                "unconfirmed": [ln.item for ln in self.unconfirmed],
                "not_estimated": self.not_estimated, "sources": self.sources}


def _cents(value: Decimal, places: int = 2) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def _truthy(value: str | None) -> bool:
    return str(value or "").strip().lower() == "true"


def _int(values: dict[str, str], key: str, default: int = 0) -> int:
    try:
        return int(str(values.get(key, default)).strip() or default)
    except ValueError:
        return default


def template_counts(templates: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Resources of the priced kinds the templates create (unconditional ones: the optional stacks are off)."""
    counts = {"nat": 0, "eip": 0, "endpoint_azs": 0, "eks": 0, "fsx": 0}
    for template in templates.values():
        for res in (template.get("Resources") or {}).values():
            if "Condition" in res:
                continue
            rtype, props = res.get("Type"), res.get("Properties") or {}
            if rtype == "AWS::EC2::NatGateway":
                counts["nat"] += 1
            elif rtype == "AWS::EC2::EIP":
                counts["eip"] += 1
            elif rtype == "AWS::EC2::VPCEndpoint" and props.get("VpcEndpointType") == "Interface":
                counts["endpoint_azs"] += max(1, len(props.get("SubnetIds") or []))  # billed per endpoint per AZ
            elif rtype == "AWS::EKS::Cluster":
                counts["eks"] += 1
            elif rtype == "AWS::FSx::FileSystem":
                counts["fsx"] += 1
    return counts


def hyperpod_groups(variant_slurm: bool, values: dict[str, str]) -> list[tuple[str, str, int, int]]:
    """(group, instance type, count, EBS GB per instance) for the groups cfn/hyperpod.py creates."""
    groups = []
    if variant_slurm:
        groups.append(("controller", values.get("ControllerInstanceType", ""), 1, CONTROLLER_EBS_GB))
        if _truthy(values.get("EnableLoginGroup")):
            groups.append(("login", values.get("LoginInstanceType", ""), 1, CONTROLLER_EBS_GB))
    groups.append(("worker", values.get("WorkerInstanceType", ""), _int(values, "WorkerCount"),
                   _int(values, "EbsVolumeSizeGB")))
    return groups


def estimate(variant: str, region: str, values: dict[str, str], templates: dict[str, dict[str, Any]],
             prices: pricing.Prices) -> Estimate:
    """The deploy's hourly and monthly cost, line by line, from its parameters and templates."""
    slurm = VARIANTS[variant].slurm
    est = Estimate(region)
    planned = bool(str(values.get("TrainingPlanArn", "")).strip())
    volume_gb = 0
    for group, itype, count, ebs in hyperpod_groups(slurm, values):
        item = pricing.hyperpod_instance(itype)
        line = Line(f"HyperPod {group}: {count} x {itype}", Decimal(count), "instance", item.key)
        if group == "worker" and planned:
            line.note = "paid through the training plan (TrainingPlanArn), not on demand"
        else:
            line.rate = prices.rate(item, region)
        est.lines.append(line)
        volume_gb += count * ebs
    est.lines.append(Line(f"HyperPod instance storage: {volume_gb} GB", Decimal(volume_gb), "GB",
                          pricing.HYPERPOD_VOLUME.key, prices.rate(pricing.HYPERPOD_VOLUME, region)))
    counts = template_counts(templates)
    if counts["fsx"]:
        capacity, tier = _int(values, "FsxStorageCapacityGiB"), values.get("FsxThroughputPerUnit", "")
        item = pricing.fsx_lustre(tier)
        est.lines.append(Line(f"FSx for Lustre: {capacity} GiB PERSISTENT_2 SSD at {tier} MB/s/TiB",
                              Decimal(capacity * counts["fsx"]), "GB", item.key, prices.rate(item, region),
                              "billed on provisioned capacity"))
    if counts["nat"]:
        est.lines.append(Line(f"NAT gateway: {counts['nat']}", Decimal(counts["nat"]), "gateway",
                              pricing.NAT_GATEWAY.key, prices.rate(pricing.NAT_GATEWAY, region)))
    if counts["eip"]:
        est.lines.append(Line(f"public IPv4 address (NAT's Elastic IP): {counts['eip']}", Decimal(counts["eip"]),
                              "address", pricing.PUBLIC_IPV4.key, prices.rate(pricing.PUBLIC_IPV4, region)))
    if counts["endpoint_azs"]:
        est.lines.append(Line(f"interface VPC endpoints: {counts['endpoint_azs']} endpoint-AZ(s)",
                              Decimal(counts["endpoint_azs"]), "endpoint-AZ", pricing.INTERFACE_ENDPOINT.key,
                              prices.rate(pricing.INTERFACE_ENDPOINT, region)))
    if counts["eks"]:
        note = ""
        if str(values.get("EksSupportType", "")).upper() == "EXTENDED":
            extended = prices.rate(pricing.EKS_EXTENDED, region)
            note = ("EksSupportType EXTENDED: the extended-support surcharge"
                    + (f" (+${extended.usd}/h{'' if extended.confirmed else ' *'})" if extended else "")
                    + f" is added once Kubernetes {values.get('KubernetesVersion', '')} leaves standard support")
        est.lines.append(Line(f"EKS control plane: {counts['eks']}", Decimal(counts["eks"]), "cluster",
                              pricing.EKS_STANDARD.key, prices.rate(pricing.EKS_STANDARD, region), note))
    est.not_estimated = ["data processed by the NAT gateway and the endpoints (per GB)", "S3 storage and requests",
                         "KMS keys and requests", "Lambda", "CloudWatch Logs", "data transfer"]
    if _truthy(values.get("EnableObservability")):
        est.not_estimated.append("Amazon Managed Prometheus (per sample) and Managed Grafana (per user)")
    est.sources = prices.sources
    return est


def money(value: Decimal) -> str:
    return f"${_cents(value):,}"


def per_hour(value: Decimal) -> str:
    return f"${_cents(value, 4):,}"


def format_lines(est: Estimate) -> list[str]:
    """The estimate as text lines for the terminal (deploy prints them beside the plan)."""
    out = [f"cost estimate ({est.region}, on-demand list prices; a month is {pricing.HOURS_PER_MONTH} h):"]
    width = max((len(ln.what) for ln in est.lines), default=0)
    for ln in est.lines:
        hourly = ln.hourly
        if hourly is None:
            cost = ln.note if ln.note.startswith("paid") else "no price (see `hpq prices refresh`)"
        else:
            rate = ln.rate
            assert rate is not None
            mark = "" if rate.confirmed else " *"
            cost = f"{per_hour(hourly):>12}/h {money(hourly * HOURS):>12}/month  (${rate.usd}/{rate.unit}{mark})"
        out.append(f"  {ln.what:<{width}}  {cost}")
        if ln.note and not ln.note.startswith("paid"):
            out.append(f"  {'':<{width}}    {ln.note}")
    total = "at least " if est.unpriced else ""
    out.append(f"  {'total':<{width}}  {total}{per_hour(est.hourly)}/h, {total}{money(est.monthly)}/month")
    if est.unpriced:
        out.append(f"  not priced: {', '.join(ln.item for ln in est.unpriced)} (no price for {est.region})")
    if est.unconfirmed:
        out.append("  * figure from the shipped price file, not confirmed against the AWS Price List:")
        for ln in est.unconfirmed:
            assert ln.rate is not None
            out.append(f"    {ln.item}: {ln.rate.why_unconfirmed or 'no reason recorded'}")
    out.append(f"  not estimated (usage-based): {'; '.join(est.not_estimated)}")
    out.append(f"  prices: {est.sources}")
    dates = sorted({ln.rate.effective for ln in est.lines if ln.rate and ln.rate.effective})
    if dates:
        out.append(f"  price dates: {', '.join(dates)}")
    return out
