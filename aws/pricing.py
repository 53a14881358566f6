"""Prices of what hpq creates: the AWS Price List API when reachable, else the price file hpq ships.

Both sources hold the Price List's own records. A GetProducts answer is a list of JSON strings, each one
product (``product.attributes``: servicecode, regionCode, usagetype, ...) with its ``terms.OnDemand``
offer terms and their ``priceDimensions`` (``unit``, ``beginRange``, ``pricePerUnit.USD``)
(https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html). The bulk
offer files hold the same products and terms, keyed by SKU, beside ``publicationDate``
(https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/reading-service-price-list-file-for-services.html).
The shipped file (``aws/prices.json``) is that offer-file shape, one subset per service code, plus a
``provenance`` entry per SKU saying where the figure came from, when, and whether it was confirmed against
the Price List; ``hpq prices refresh`` rewrites it from the API.

An item is found by its usage type with the region prefix left off (``USE1-Cluster:ml.g5.16xlarge`` and
us-east-1's unprefixed ``NatGateway-Hours`` both match their suffix) and the product's ``regionCode``.
Usage types, as AWS bills them: HyperPod instances ``<P>-Cluster:<type>`` and volumes
``<P>-Cluster:VolumeUsage.gp2`` (AmazonSageMaker), ``NatGateway-Hours`` (AmazonEC2),
``VpcEndpoint-Hours`` and ``PublicIPv4:InUseAddress`` (AmazonVPC), ``AmazonEKS-Hours:perCluster`` and
``AmazonEKS-Hours:extendedSupport`` (AmazonEKS). FSx for Lustre storage is matched on its attributes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import Any

from hpq import user_files
from hpq.aws.session import error_code
from hpq.errors import OperationFailed, UsageError
from hpq.standins import rendition

HOURS_PER_MONTH = 730  # the AWS Pricing Calculator's month (24 x 365 / 12)
PRICE_FILE = "prices.json"
MAX_PRICE_FILE_BYTES = 4 << 20  # the shipped file is ~46 KB; ~90x that is room for every region, not for /dev/zero
PRICE_FILE_ENV = "HPQ_PRICE_FILE"  # a price file to use instead of the shipped one (e.g. one `hpq prices refresh` wrote)
API_SOURCE = "AWS Price List API (pricing:GetProducts)"
# The Price List API answers from these endpoints only (API reference, "Price List Query API endpoints").
API_REGION = "us-east-1"


@dataclass(frozen=True)
class Item:
    """One thing hpq pays for, as the Price List names it."""

    key: str
    service: str  # Price List service code
    unit: str  # the price dimension's unit: Hrs, GB-Mo
    usagetype: str | None = None  # without the region prefix
    attributes: tuple[tuple[str, str], ...] = ()  # further product attributes that must match (any case)
    label: str = ""
    aliases: tuple[str, ...] = ()  # other spellings of the unit the Price List uses for it (AmazonEKS: "Hours")

    def takes_unit(self, unit: object) -> bool:
        return unit == self.unit or unit in self.aliases

    def matches(self, product: dict[str, Any], region: str) -> bool:
        attrs = product.get("attributes") or {}
        if attrs.get("servicecode") != self.service or attrs.get("regionCode") != region:
            return False
        if self.usagetype is not None:
            usage = str(attrs.get("usagetype", ""))
            if usage != self.usagetype and not usage.endswith("-" + self.usagetype):
                return False
        return all(str(attrs.get(k, "")).lower() == v.lower() for k, v in self.attributes)


def hyperpod_instance(instance_type: str) -> Item:
    return Item(f"hyperpod:{instance_type}", "AmazonSageMaker", "Hrs", f"Cluster:{instance_type}",
                label=f"HyperPod {instance_type}")


HYPERPOD_VOLUME = Item("hyperpod-volume", "AmazonSageMaker", "GB-Mo", "Cluster:VolumeUsage.gp2",
                       label="HyperPod instance storage (EBS)")
NAT_GATEWAY = Item("nat-gateway", "AmazonEC2", "Hrs", "NatGateway-Hours", label="NAT gateway")
PUBLIC_IPV4 = Item("public-ipv4", "AmazonVPC", "Hrs", "PublicIPv4:InUseAddress", label="public IPv4 address")
INTERFACE_ENDPOINT = Item("interface-endpoint", "AmazonVPC", "Hrs", "VpcEndpoint-Hours",
                          label="interface VPC endpoint (per AZ)")
# AmazonEKS prices its cluster hours in unit "Hours", not "Hrs" (us-east-1 SKU ZYWMR684YSMFHWEU, as public notes
# citing AmazonEKS offer 20260831092157 show it); extendedSupport is the surcharge billed on top of perCluster
# ($0.50 of the $0.60 total, https://aws.amazon.com/blogs/containers/amazon-eks-extended-support-for-kubernetes-versions-pricing/).
EKS_STANDARD = Item("eks-standard", "AmazonEKS", "Hrs", "AmazonEKS-Hours:perCluster", label="EKS control plane",
                    aliases=("Hours",))
EKS_EXTENDED = Item("eks-extended", "AmazonEKS", "Hrs", "AmazonEKS-Hours:extendedSupport",
                    label="EKS extended support surcharge", aliases=("Hours",))


def fsx_lustre(throughput_per_tib: int | str) -> Item:
    """PERSISTENT_2 SSD storage at a throughput tier (MB/s/TiB), billed per GB-month of provisioned capacity."""
    return Item(f"fsx-lustre-persistent2:{throughput_per_tib}", "AmazonFSx", "GB-Mo", None,
                (("fileSystemType", "Lustre"), ("deploymentOption", "Persistent_2"), ("storageType", "SSD"),
                 ("throughputCapacity", str(throughput_per_tib))),
                label=f"FSx for Lustre PERSISTENT_2 SSD {throughput_per_tib} MB/s/TiB")


@dataclass(frozen=True)
class Rate:
    """One on-demand price and where it came from."""

    item: str
    region: str
    usd: Decimal
    unit: str
    sku: str
    description: str
    effective: str  # the term's effectiveDate (or the file's publication date)
    source: str
    confirmed: bool  # False: the figure was not checked against the Price List (the file says why)
    why_unconfirmed: str = ""  # the price file's reason, for an unconfirmed figure

    def as_dict(self) -> dict[str, Any]:
        return {"item": self.item, "region": self.region, "usd": str(self.usd), "unit": self.unit, "sku": self.sku,
                "description": self.description, "effective": self.effective, "source": self.source,
                "confirmed": self.confirmed, "why_unconfirmed": self.why_unconfirmed}


def on_demand_rate(record: dict[str, Any], item: Item, region: str, source: str, confirmed: bool = True,
                   default_date: str = "") -> Rate | None:
    """The first-tier USD on-demand price of a Price List record (GetProducts item), if it has one in the item's unit."""
    product = record.get("product") or {}
    if not item.matches(product, region):
        return None
    terms = ((record.get("terms") or {}).get("OnDemand")) or {}
    for term in terms.values():
        for dim in (term.get("priceDimensions") or {}).values():
            if not item.takes_unit(dim.get("unit")) or str(dim.get("beginRange", "0")) not in ("0", "0.0"):
                continue
            try:
                usd = Decimal(str((dim.get("pricePerUnit") or {})["USD"]))
            except (KeyError, InvalidOperation):
                continue
            return Rate(item.key, region, usd, item.unit, str(product.get("sku") or term.get("sku") or ""),
                        str(dim.get("description", "")), str(term.get("effectiveDate") or default_date), source,
                        confirmed)
    return None


def _object(value: Any, where: str) -> str:
    return "" if isinstance(value, dict) else f"{where} is not a JSON object"


def shape_problem(data: Any) -> str:
    """What keeps ``data`` from being a price file (the Price List offer-file shape hpq reads and writes:
    ``offers.<service>.products.<sku>.attributes`` and ``offers.<service>.terms.OnDemand.<sku>.<term>.
    priceDimensions.<dim>.pricePerUnit.USD``, a finite price >= 0); "" when nothing does. Checked whole on load,
    so a file of the wrong shape is one line, never a traceback halfway through an estimate."""
    if not isinstance(data, dict) or "offers" not in data:
        return "not a JSON object with 'offers'"
    for key in ("offers", "provenance", "hpq"):
        if key in data and (problem := _object(data[key], key)):
            return problem
    for service, offer in data["offers"].items():
        where = f"offers.{service}"
        problem = _object(offer, where) or _object(offer.get("products", {}), f"{where}.products") \
            or _object(offer.get("terms", {}), f"{where}.terms")
        if problem:
            return problem
        for sku, product in offer.get("products", {}).items():
            if problem := (_object(product, f"{where}.products.{sku}")
                           or _object(product.get("attributes", {}), f"{where}.products.{sku}.attributes")):
                return problem
        on_demand = offer.get("terms", {}).get("OnDemand", {})
        if problem := _object(on_demand, f"{where}.terms.OnDemand"):
            return problem
        for sku, terms in on_demand.items():
            if problem := _object(terms, f"{where}.terms.OnDemand.{sku}"):
                return problem
            for code, term in terms.items():
                at = f"{where}.terms.OnDemand.{sku}.{code}"
                if problem := _object(term, at) or _object(term.get("priceDimensions", {}), f"{at}.priceDimensions"):
                    return problem
                for rate_code, dim in term.get("priceDimensions", {}).items():
                    if problem := (_object(dim, f"{at}.priceDimensions.{rate_code}") or _object(
                            dim.get("pricePerUnit", {}), f"{at}.priceDimensions.{rate_code}.pricePerUnit")):
                        return problem
                    usd = dim.get("pricePerUnit", {}).get("USD")
                    if usd is not None and not _price(usd):
                        return f"{at}.priceDimensions.{rate_code}: USD {str(usd)[:40]!r} is not a price"
    for sku, prov in (data.get("provenance") or {}).items():
        if problem := _object(prov, f"provenance.{sku}"):
            return problem
    return ""


def _price(value: Any) -> bool:
    """A Price List price: a decimal string (or number) that is finite and not negative."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return False
    try:
        usd = Decimal(str(value))
    except InvalidOperation:
        return False
    return usd.is_finite() and usd >= 0


class PriceFile:
    """The offer-file-shaped price file (``aws/prices.json`` unless a path is given)."""

    def __init__(self, path: str | Path | None = None) -> None:
        path = path or os.environ.get(PRICE_FILE_ENV) or None
        if path is None:
            text = resources.files("hpq.aws").joinpath(PRICE_FILE).read_text(encoding="utf-8")
            self.path = f"hpq/aws/{PRICE_FILE}"
        else:
            text = user_files.read_text(str(path), MAX_PRICE_FILE_BYTES, "price file")
            self.path = str(path)
        self.data = user_files.parse_json(text, f"price file {user_files.shown(self.path)}")
        problem = shape_problem(self.data)
        if problem:
            raise UsageError(f"price file {user_files.shown(self.path)} is not an hpq price file: {problem}")
        self.offers: dict[str, Any] = self.data["offers"]
        self.provenance: dict[str, Any] = self.data.get("provenance") or {}

    @property
    def source(self) -> str:
        meta = self.data.get("hpq") or {}
        return f"price file {self.path} (built {meta.get('built', '?')}: {meta.get('how', '?')})"

    def records(self, service: str) -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
        """(GetProducts-shaped record, offer) for every product of the service in the file."""
        offer = self.offers.get(service) or {}
        on_demand = ((offer.get("terms") or {}).get("OnDemand")) or {}
        for sku, product in (offer.get("products") or {}).items():
            yield {"product": product, "terms": {"OnDemand": on_demand.get(sku) or {}}}, offer

    def rate(self, item: Item, region: str) -> Rate | None:
        for record, offer in self.records(item.service):
            sku = (record["product"] or {}).get("sku", "")
            prov = self.provenance.get(sku) or {}
            source = f"{self.path}: {prov.get('source', 'no provenance recorded')}"
            found = on_demand_rate(record, item, region, source, bool(prov.get("confirmed", False)),
                                   str(prov.get("retrieved") or offer.get("publicationDate", "")))
            if found is not None:
                if not found.confirmed:
                    why = str(prov.get("why_unconfirmed") or "no reason recorded")
                    found = Rate(**{**found.__dict__, "why_unconfirmed": why})
                return found
        return None


@dataclass
class Prices:
    """Live Price List first (when ``client`` is given), the price file for whatever it cannot answer."""

    file: PriceFile
    client: Any = None
    why_not_live: str = ""
    strict: bool = False  # --prices api: an API failure is an error, not a fallback
    _cache: dict[tuple[str, str], Rate | None] = field(default_factory=dict)

    def rate(self, item: Item, region: str) -> Rate | None:
        key = (item.key, region)
        if key not in self._cache:
            found = self._live(item, region) if self.client is not None else None
            self._cache[key] = found or self.file.rate(item, region)
        return self._cache[key]

    def _live(self, item: Item, region: str) -> Rate | None:
        try:
            records = get_products(self.client, item, region)
        except Exception as exc:  # noqa: BLE001 - any failure of the API means: use the file, and say why
            if self.strict:
                raise OperationFailed(f"the AWS Price List API did not answer ({_why(exc)}); "
                                      "--prices auto or file uses the shipped price file") from None
            self.why_not_live = _why(exc)
            self.client = None
            return None
        for record in records:
            found = on_demand_rate(record, item, region, API_SOURCE)
            if found is not None:
                return found
        return None

    @property
    def sources(self) -> str:
        live = API_SOURCE if self.client is not None else f"API not used ({self.why_not_live or 'offline'})"
        return f"{live}; fallback {self.file.source}"


def _why(exc: BaseException) -> str:
    code = error_code(exc)
    return code or " ".join(str(exc).split())[:160] or type(exc).__name__


def get_products(client: Any, item: Item, region: str, max_pages: int = 20) -> list[dict[str, Any]]:
    """Every Price List record for the item in the region (GetProducts, following NextToken)."""
    filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}]
    if item.usagetype is not None:
        # The region prefix (USE1-, EU-, none in us-east-1 for some services) is not derivable: match the suffix.
        filters.append({"Type": "CONTAINS", "Field": "usagetype", "Value": item.usagetype})
    filters += [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in item.attributes]
    out: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"ServiceCode": item.service, "Filters": filters, "FormatVersion": "aws_v1",
                              "MaxResults": 100}
    for _ in range(max_pages):
        page = client.get_products(**kwargs)
        out.extend(json.loads(p) if isinstance(p, str) else p for p in page.get("PriceList", []))
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    return out


def pricing_client(session: Any) -> Any:
    """A Price List client with short timeouts and one retry: an unreachable API must not stall a deploy."""
    from botocore.config import Config

    return session.client("pricing", region_name=API_REGION,
                          config=Config(connect_timeout=3, read_timeout=10, retries={"max_attempts": 1},
                                        user_agent_extra="hpq"))


def prices(session: Any = None, source: str = "auto", path: str | Path | None = None) -> Prices:
    """``auto``: the API when a session is given and the endpoint is AWS's, else the file; ``api``; ``file``."""
    file = PriceFile(path)
    if source == "file" or session is None:
        return Prices(file, why_not_live="--prices file" if source == "file" else "no AWS session")
    if rendition.endpoint_is_moto():
        return Prices(file, why_not_live="the endpoint is an emulator")
    try:
        client = pricing_client(session)
    except Exception as exc:  # noqa: BLE001 - no client (no region config, bad endpoint): the file answers
        return Prices(file, why_not_live=_why(exc))
    return Prices(file, client, strict=source == "api")


def offer_files(records: Iterable[dict[str, Any]], provenance: dict[str, dict[str, Any]], built: str, how: str
                ) -> dict[str, Any]:
    """The price file: per service code an offer file (products and OnDemand terms keyed by SKU) of ``records``
    (GetProducts items), plus ``provenance`` per SKU and who built it when."""
    offers: dict[str, Any] = {}
    for record in records:
        product = record["product"]
        service = product["attributes"]["servicecode"]
        sku = product["sku"]
        offer = offers.setdefault(service, {"formatVersion": "v1.0", "offerCode": service, "version": built,
                                            "publicationDate": built, "products": {}, "terms": {"OnDemand": {}}})
        offer["products"][sku] = product
        offer["terms"]["OnDemand"][sku] = (record.get("terms") or {}).get("OnDemand") or {}
    return {"hpq": {"built": built, "how": how}, "offers": offers, "provenance": provenance}


def price_items(instance_types: Iterable[str], throughputs: Iterable[int | str]) -> list[Item]:
    """Everything an estimate can ask for: the instance types, the FSx tiers and the fixed items."""
    fixed = [HYPERPOD_VOLUME, NAT_GATEWAY, PUBLIC_IPV4, INTERFACE_ENDPOINT, EKS_STANDARD, EKS_EXTENDED]
    return [hyperpod_instance(t) for t in instance_types] + [fsx_lustre(t) for t in throughputs] + fixed


def refresh(client: Any, regions: Iterable[str], items: Iterable[Item], built: str,
            on_progress: Any = None) -> tuple[dict[str, Any], list[str]]:
    """A new price file from the Price List API: one record per (item, region) found; the misses, named."""
    records: list[dict[str, Any]] = []
    provenance: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    items = list(items)
    for region in regions:
        for item in items:
            found = next((r for r in get_products(client, item, region)
                          if on_demand_rate(r, item, region, API_SOURCE) is not None), None)
            if found is None:
                missing.append(f"{item.key} in {region}")
                continue
            sku = found["product"]["sku"]
            records.append(found)
            provenance[sku] = {"source": API_SOURCE, "retrieved": built, "confirmed": True}
        if on_progress:
            on_progress(region)
    return offer_files(records, provenance, built, f"hpq prices refresh ({API_SOURCE})"), missing
