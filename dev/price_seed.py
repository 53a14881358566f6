#!/usr/bin/env python3
"""Write aws/prices.json, the price file hpq ships, from the figures below, WHEN THE PRICE LIST API IS OUT OF REACH.

The real way to build the file is `hpq prices refresh` (the AWS Price List API, pricing:GetProducts): every record
then is AWS's own, marked confirmed. This machine could not reach the API (pricing.us-east-1.amazonaws.com does not
resolve here, 2026-11-26), so the shipped file holds the few figures below, each one quoted from a public page or
note that names its usage type and date, in the Price List's record shape, and EVERY ONE is marked
``confirmed: false`` with its source. The SKUs are hpq's own (``HPQSEED-...``), not AWS SKUs. docs/cost.md lists
them. Items without a figure here (most HyperPod instance types, the FSx tiers other than 125 MB/s/TiB, HyperPod
EBS) are absent: the estimate says "no price" for them instead of guessing.

Usage: python dev/price_seed.py            (writes aws/prices.json)
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUILT = "2026-11-26"
US = ("us-east-1", "us-east-2", "us-west-2")
PREFIX = {"us-east-1": "USE1", "us-east-2": "USE2", "us-west-2": "USW2"}

# (service, productFamily, region, usagetype suffix, extra attributes, unit, USD, description, source, date quoted)
NOTE_NAT = ("public cost notes quoting AWS's VPC pricing page (https://aws.amazon.com/vpc/pricing/): "
            "'$0.045 per NAT Gateway Hour', usage type NatGateway-Hours")
NOTE_IPV4 = ("public cost notes quoting AWS's VPC pricing page: $0.005 per in-use public IPv4 address-hour, "
             "usage type USE1-PublicIPv4:InUseAddress (quoted for us-east-1, 2026-07-24)")
NOTE_VPCE = ("AWS PrivateLink pricing page (https://aws.amazon.com/privatelink/pricing/) bills per endpoint per AZ "
             "hour; $0.01/hour as quoted in public cost notes (usage type VpcEndpoint-Hours)")
NOTE_EKS = ("AWS EKS pricing page (https://aws.amazon.com/eks/pricing/): $0.10 per cluster-hour in standard support, "
            "$0.60 in extended support, as measured in public CUR notes (AmazonEKS-Hours:perCluster)")
NOTE_FSX = ("c3x.dev's FSx for Lustre page: ~$0.145/GB-month for SSD at 125 MB/s/TiB (us-east-1 list price); "
            "the Price List attribute names used to match it are hpq's assumption")
NOTE_HP = "a public note quoting the AWS Price List API, usage type {usage}, checked {date}"

FIGURES = []
for region in US:
    FIGURES += [
        ("AmazonEC2", "NAT Gateway", region, "NatGateway-Hours", {}, "Hrs", "0.045", "NAT gateway hour", NOTE_NAT,
         BUILT),
        ("AmazonVPC", "VPCPublicIPv4Address", region, "PublicIPv4:InUseAddress", {}, "Hrs", "0.005",
         "in-use public IPv4 address hour", NOTE_IPV4, BUILT),
        ("AmazonVPC", "VpcEndpoint", region, "VpcEndpoint-Hours", {}, "Hrs", "0.01", "VPC endpoint hour per AZ",
         NOTE_VPCE, BUILT),
        ("AmazonEKS", "Compute", region, "AmazonEKS-Hours:perCluster", {}, "Hrs", "0.10", "EKS cluster hour",
         NOTE_EKS, BUILT),
        ("AmazonEKS", "Compute", region, "AmazonEKS-Hours:extendedSupport", {}, "Hrs", "0.60",
         "EKS cluster hour in extended support", NOTE_EKS, BUILT),
    ]
FIGURES += [
    ("AmazonFSx", "Storage", "us-east-1", None,
     {"fileSystemType": "Lustre", "deploymentOption": "Persistent_2", "storageType": "SSD", "throughputCapacity": "125"},
     "GB-Mo", "0.145", "FSx for Lustre PERSISTENT_2 SSD 125 MB/s/TiB, per GB-month", NOTE_FSX, BUILT),
    ("AmazonSageMaker", "ML Instance", "us-west-2", "Cluster:ml.p4d.24xlarge", {}, "Hrs", "25.91001756",
     "HyperPod ml.p4d.24xlarge cluster instance hour",
     NOTE_HP.format(usage="USW2-Cluster:ml.p4d.24xlarge", date="2026-10-01"), "2026-10-01"),
    ("AmazonSageMaker", "ML Instance", "us-east-1", "Cluster:ml.g5.8xlarge", {}, "Hrs", "3.06",
     "HyperPod ml.g5.8xlarge cluster instance hour",
     NOTE_HP.format(usage="USE1-Cluster:ml.g5.8xlarge", date="2026 (API)"), BUILT),
]


def record(service, family, region, usage, attrs, unit, usd, description, date):  # type: ignore[no-untyped-def]
    sku = "HPQSEED-" + hashlib.sha256(f"{service}/{region}/{usage}/{sorted(attrs.items())}".encode()).hexdigest()[:12]
    attributes = {"servicecode": service, "regionCode": region, **attrs}
    if usage:  # FSx's usage type is not known here: that record is matched on its attributes only
        attributes["usagetype"] = f"{PREFIX[region]}-{usage}"
    term = f"{sku}.JRTCKXETXF"  # JRTCKXETXF: the on-demand offer term code the Price List uses
    return {
        "product": {"sku": sku, "productFamily": family, "attributes": attributes},
        "serviceCode": service,
        "terms": {"OnDemand": {term: {"sku": sku, "offerTermCode": "JRTCKXETXF", "effectiveDate": date,
                                      "termAttributes": {},
                                      "priceDimensions": {f"{term}.6YS6EN2CT7": {
                                          "rateCode": f"{term}.6YS6EN2CT7", "description": description,
                                          "beginRange": "0", "endRange": "Inf", "unit": unit,
                                          "pricePerUnit": {"USD": usd}, "appliesTo": []}}}}},
    }


def main() -> None:
    from hpq.aws.pricing import offer_files

    records, provenance = [], {}
    for service, family, region, usage, attrs, unit, usd, description, source, date in FIGURES:
        rec = record(service, family, region, usage, attrs, unit, usd, description, date)
        records.append(rec)
        provenance[rec["product"]["sku"]] = {"source": source, "retrieved": date, "confirmed": False}
    data = offer_files(records, provenance, BUILT,
                       "dev/price_seed.py: quoted public figures, NOT confirmed against the Price List API "
                       "(unreachable when built); run `hpq prices refresh` for AWS's own records")
    out = ROOT / "aws" / "prices.json"
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(records)} records)")


if __name__ == "__main__":
    main()
