#!/usr/bin/env python3
"""Write aws/prices.json, the price file hpq ships, WHEN THE PRICE LIST API IS OUT OF REACH (docs/cost.md).

The real way to build the file is `hpq prices refresh` (the AWS Price List API, pricing:GetProducts): every record
then is AWS's own, marked confirmed. The machine this file was built on could not reach the API, so it holds two
kinds of record, each with its own provenance entry:

- REAL: AWS Price List records, taken from public sources that keep AWS's own data (source named per record,
  repo@commit and path), marked ``confirmed: true``:
  * NAT gateway hours from a trimmed extract of AWS's bulk offer files, which keeps AWS's SKU, usage type, unit,
    price and offer version but not the price dimension's description or rate code: the rate code is written by
    AWS's on-demand convention (``<SKU>.JRTCKXETXF.6YS6EN2CT7``: JRTCKXETXF is the on-demand offer term,
    6YS6EN2CT7 the single price dimension) and the description is hpq's; provenance says so.
  * in-use public IPv4 address hours from a recorded GetProducts answer (AWS's aws_v1 product documents kept
    whole: attributes, SKU, rate code, description, effective date, offer version); nothing is hpq's.
- SEED: figures no stored public source holds as an AWS record; quoted from AWS's pricing pages or from notes
  that cite the Price List. SKUs are hpq's own (``HPQSEED-...``) and each is marked ``confirmed: false`` with the
  reason in ``why_unconfirmed``. The estimate marks every line priced from one with ``*``.

Items without any figure (most HyperPod instance types, the FSx tiers other than 125 MB/s/TiB, HyperPod EBS) are
absent: the estimate says "no price" for them instead of guessing.

Usage: python dev/price_seed.py            (writes aws/prices.json)
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUILT = "2026-11-27"
US = ("us-east-1", "us-east-2", "us-west-2")
PREFIX = {"us-east-1": "USE1", "us-east-2": "USE2", "us-west-2": "USW2"}

# (service, productFamily, region, usagetype suffix, extra attributes, unit, USD, description, source, date quoted)
NOTE_IPV4 = ("public cost notes quoting AWS's VPC pricing page: $0.005 per in-use public IPv4 address-hour, "
             "usage type USE1-PublicIPv4:InUseAddress (quoted for us-east-1, 2026-07-24)")
NOTE_VPCE = ("AWS PrivateLink pricing page (https://aws.amazon.com/privatelink/pricing/) bills per endpoint per AZ "
             "hour; $0.01/hour as quoted in public cost notes (usage type VpcEndpoint-Hours)")
NOTE_EKS = ("AWS EKS pricing page (https://aws.amazon.com/eks/pricing/): $0.10 per cluster-hour in standard support, "
            "$0.60 in extended support, as measured in public CUR notes (AmazonEKS-Hours:perCluster)")
NOTE_FSX = ("c3x.dev's FSx for Lustre page: ~$0.145/GB-month for SSD at 125 MB/s/TiB (us-east-1 list price); "
            "the Price List attribute names used to match it are hpq's assumption")
NOTE_HP = "a public note quoting the AWS Price List API, usage type {usage}, checked {date}"
NOTE_EKS_EXT = ("AWS containers blog 'Amazon EKS extended support for Kubernetes versions pricing' "
                "(https://aws.amazon.com/blogs/containers/amazon-eks-extended-support-for-kubernetes-versions-pricing/): "
                "$0.60 per cluster-hour in total in extended support, $0.10 in standard; the Price List bills the "
                "difference, $0.50, as its own usage type (us-east-1 SKU M7977BSVFGDUJZ67 in AmazonEKS offer "
                "20260831092157, as public cost notes cite it)")

# Why each seed is not a real record (none of these was found as an AWS record in any stored public source).
WHY = {
    "PublicIPv4:InUseAddress": ("no AWS record for this region in a stored public source (AWS's records for "
                                "us-east-1 and eu-west-1 are in the file, at 0.005); the figure is the VPC "
                                "pricing page's as quoted"),
    "VpcEndpoint-Hours": "no AWS record in a stored public source; figure from AWS's PrivateLink page as quoted",
    "AmazonEKS-Hours:perCluster": ("no AWS record in a stored public source; public notes cite us-east-1 SKU "
                                   "ZYWMR684YSMFHWEU (unit Hours, AmazonEKS offer 20260831092157) at 0.10"),
    "AmazonEKS-Hours:extendedSupport": "no AWS record in a stored public source; see the source note",
    "fsx": ("no AmazonFSx record in a stored public source; the figure is a third-party estimate and the attribute "
            "names it is matched by are hpq's assumption"),
    "Cluster:": "no AmazonSageMaker record in a stored public source; a third-party note quoting the API",
}

# REAL records: AWS Price List NAT gateway hours (AmazonEC2, productFamily "NAT Gateway", on demand), from the
# AmazonEC2 bulk offer version 20260904231117 (published 2026-09-04T23:11:17Z), as trimmed into
# mooncitizen/togen@36c1abbf17c7cd190fb02627aefb401567190523 internal/cost/prices/aws.json (snapshot dated
# 2026-09-06, "AWS Price List bulk offer files trimmed to the skus the matchers name"). The us-east-1 row is also
# in that repository's internal/cost/cmd/offer_test.go as a verbatim line of AWS's CSV offer file
# ("M2YSHUBETB3JX4M4","OnDemand","Hrs","0.0450000000",...), and public cost notes cite the same SKU and price.
# (region, SKU, usagetype, USD) -- only HyperPod regions (hpq.cfn.regions) the extract covers.
REAL_SOURCE = ("mooncitizen/togen@36c1abbf17c7cd190fb02627aefb401567190523 internal/cost/prices/aws.json: AWS Price "
               "List bulk offer AmazonEC2 version 20260904231117 (/offers/v1.0/aws/AmazonEC2/20260904231117/"
               "<region>/index.json), trimmed; SKU, usagetype, unit and price as AWS published them")
REAL_NAT = [
    ("us-east-1", "M2YSHUBETB3JX4M4", "NatGateway-Hours", "0.0450000000"),
    ("us-east-2", "SRB9S9CM9RDPW97X", "USE2-NatGateway-Hours", "0.0450000000"),
    ("us-west-1", "C8JU5MW5DN6ZHDX4", "USW1-NatGateway-Hours", "0.0480000000"),
    ("us-west-2", "44T683R45QPT8RYQ", "USW2-NatGateway-Hours", "0.0450000000"),
    ("ca-central-1", "N8T4EWFNU7QDZYSA", "CAN1-NatGateway-Hours", "0.0500000000"),
    ("sa-east-1", "N3JNXFX89DVACZ9Q", "SAE1-NatGateway-Hours", "0.0930000000"),
    ("eu-west-1", "KFNSSCHWD43WZK2R", "EU-NatGateway-Hours", "0.0480000000"),
    ("eu-west-2", "D8BXG95NJW6MV3B3", "EUW2-NatGateway-Hours", "0.0500000000"),
    ("eu-central-1", "FY5BA3Q38RMNEMJS", "EUC1-NatGateway-Hours", "0.0520000000"),
    ("eu-north-1", "BYQ4CZQVRHZ225T7", "EUN1-NatGateway-Hours", "0.0460000000"),
    ("eu-south-2", "J68CACDFX6JYYNVN", "EUS2-NatGateway-Hours", "0.0480000000"),
    ("ap-northeast-1", "CA23TN2NAN47KGCF", "APN1-NatGateway-Hours", "0.0620000000"),
    ("ap-northeast-2", "P63FHTYZXQBC6HX5", "APN2-NatGateway-Hours", "0.0590000000"),
    ("ap-south-1", "DJ4GYZ29AWV3WFQX", "APS3-NatGateway-Hours", "0.0560000000"),
    ("ap-southeast-1", "98TA3WPUP3A4AH4Y", "APS1-NatGateway-Hours", "0.0590000000"),
    ("ap-southeast-2", "NUKV5QPTHVFBW7DE", "APS2-NatGateway-Hours", "0.0590000000"),
]
REAL_PUBLISHED = "2026-09-04"  # the offer version's publication date
REAL_READ = "2026-09-06"  # the extract's snapshot date

# REAL records: AWS Price List in-use public IPv4 address hours (AmazonVPC, no productFamily, on demand), as the
# Price List API answered GetProducts (FormatVersion aws_v1) for AmazonVPC offer version 20260724154225 (published
# 2026-07-24T15:42:25Z), recorded whole in TypeOneLabs/tellury@c2acfab386e779e32e3f1c62599539190e92cd96
# pkg/pricing/aws/testdata/getproducts-recorded.json (file committed 2026-08-11 in 38f9187895782b23f18ff6953e921cb0215ecbe0;
# "the fixture stores the raw aws_v1 product documents exactly as GetProducts returns them", its
# pkg/pricing/aws/catalog_test.go). Every value below is AWS's; hpq composes nothing in these records.
# (region, SKU, usagetype, location, price dimension description, USD)
REAL_IPV4_SOURCE = ("TypeOneLabs/tellury@c2acfab386e779e32e3f1c62599539190e92cd96 "
                    "pkg/pricing/aws/testdata/getproducts-recorded.json: AWS Price List GetProducts answer (aws_v1) "
                    "for AmazonVPC, offer version 20260724154225, recorded whole; every field as AWS published it")
REAL_IPV4 = [
    ("us-east-1", "4GQUNXTFWVSGPUZK", "USE1-PublicIPv4:InUseAddress", "US East (N. Virginia)",
     "$0.005 per In-use public IPv4 address per hour", "0.0050000000"),
    ("eu-west-1", "CNZ4XSXPRJXGA4ZF", "EU-PublicIPv4:InUseAddress", "EU (Ireland)",
     "$0.005 per In-use public IPv4 address per hour", "0.0050000000"),
]
REAL_IPV4_EFFECTIVE = "2026-07-01T00:00:00Z"  # the terms' effectiveDate as recorded
REAL_IPV4_PUBLISHED = "2026-07-24"  # the AmazonVPC offer version's publication date
REAL_IPV4_READ = "2026-08-11"  # when the answer was recorded (the commit that added it)

FIGURES = []
for region in US:
    if region not in {r[0] for r in REAL_IPV4}:  # AWS's own record replaces the seed where there is one
        FIGURES.append(("AmazonVPC", "VPCPublicIPv4Address", region, "PublicIPv4:InUseAddress", {}, "Hrs",
                        "0.005", "in-use public IPv4 address hour", NOTE_IPV4, BUILT))
    FIGURES += [
        ("AmazonVPC", "VpcEndpoint", region, "VpcEndpoint-Hours", {}, "Hrs", "0.01", "VPC endpoint hour per AZ",
         NOTE_VPCE, BUILT),
        # The Price List's EKS unit is "Hours" (public notes citing SKU ZYWMR684YSMFHWEU), not "Hrs".
        ("AmazonEKS", "Compute", region, "AmazonEKS-Hours:perCluster", {}, "Hours", "0.10", "EKS cluster hour",
         NOTE_EKS, BUILT),
        ("AmazonEKS", "Compute", region, "AmazonEKS-Hours:extendedSupport", {}, "Hours", "0.50",
         "EKS extended support, per cluster-hour on top of the standard rate", NOTE_EKS_EXT, BUILT),
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


def why_unconfirmed(usage: str | None) -> str:
    for key, why in WHY.items():
        if usage and (usage == key or usage.startswith(key)):
            return why
    return WHY["fsx"]


def real_nat(region: str, sku: str, usagetype: str, usd: str) -> dict:
    """AWS's NAT gateway hour record as the offer file has it (attributes the extract keeps, AWS's SKU and price)."""
    term = f"{sku}.JRTCKXETXF"
    return {
        "product": {"sku": sku, "productFamily": "NAT Gateway",
                    "attributes": {"servicecode": "AmazonEC2", "regionCode": region, "usagetype": usagetype,
                                   "operation": "NatGateway"}},
        "serviceCode": "AmazonEC2",
        "terms": {"OnDemand": {term: {"sku": sku, "offerTermCode": "JRTCKXETXF",
                                      "effectiveDate": REAL_PUBLISHED, "termAttributes": {},
                                      "priceDimensions": {f"{term}.6YS6EN2CT7": {
                                          "rateCode": f"{term}.6YS6EN2CT7",
                                          "description": "NAT gateway hour (hpq's wording)",
                                          "beginRange": "0", "endRange": "Inf", "unit": "Hrs",
                                          "pricePerUnit": {"USD": usd}, "appliesTo": []}}}}},
    }


def real_ipv4(region: str, sku: str, usagetype: str, location: str, description: str, usd: str) -> dict:
    """AWS's in-use public IPv4 record as GetProducts answered it (every attribute the recording keeps)."""
    term = f"{sku}.JRTCKXETXF"
    return {
        "product": {"sku": sku,
                    "attributes": {"regionCode": region, "servicecode": "AmazonVPC",
                                   "groupDescription": "Hourly charge for In-use Public IPv4 Addresses",
                                   "usagetype": usagetype, "locationType": "AWS Region", "location": location,
                                   "servicename": "Amazon Virtual Private Cloud", "operation": "",
                                   "group": "VPCPublicIPv4Address"}},
        "serviceCode": "AmazonVPC",
        "terms": {"OnDemand": {term: {"sku": sku, "offerTermCode": "JRTCKXETXF",
                                      "effectiveDate": REAL_IPV4_EFFECTIVE, "termAttributes": {},
                                      "priceDimensions": {f"{term}.6YS6EN2CT7": {
                                          "rateCode": f"{term}.6YS6EN2CT7", "description": description,
                                          "beginRange": "0", "endRange": "Inf", "unit": "Hrs",
                                          "pricePerUnit": {"USD": usd}, "appliesTo": []}}}}},
    }


def main() -> None:
    from hpq.aws.pricing import offer_files

    records, provenance = [], {}
    for region, sku, usagetype, usd in REAL_NAT:
        records.append(real_nat(region, sku, usagetype, usd))
        provenance[sku] = {"source": REAL_SOURCE, "retrieved": REAL_READ, "published": REAL_PUBLISHED,
                           "confirmed": True, "record": "AWS Price List offer-file record",
                           "composed_by_hpq": ["description", "rateCode (AWS's on-demand convention)"]}
    for region, sku, usagetype, location, description, usd in REAL_IPV4:
        records.append(real_ipv4(region, sku, usagetype, location, description, usd))
        provenance[sku] = {"source": REAL_IPV4_SOURCE, "retrieved": REAL_IPV4_READ,
                           "published": REAL_IPV4_PUBLISHED, "confirmed": True,
                           "record": "AWS Price List GetProducts record (aws_v1), whole", "composed_by_hpq": []}
    for service, family, region, usage, attrs, unit, usd, description, source, date in FIGURES:
        rec = record(service, family, region, usage, attrs, unit, usd, description, date)
        records.append(rec)
        provenance[rec["product"]["sku"]] = {"source": source, "retrieved": date, "confirmed": False,
                                             "why_unconfirmed": why_unconfirmed(usage)}
    data = offer_files(records, provenance, BUILT,
                       "dev/price_seed.py: AWS Price List records from public sources that keep them (confirmed) "
                       "and quoted public figures (confirmed: false, each with why_unconfirmed); "
                       "run `hpq prices refresh` for AWS's own records of everything")
    out = ROOT / "aws" / "prices.json"
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(records)} records)")


if __name__ == "__main__":
    main()
