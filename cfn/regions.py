"""Where each variant can be deployed: regions whose CloudFormation has every resource type it uses.

cfn-lint ships, per region, the CloudFormation resource provider schemas AWS publishes for that region
(``cfnlint/data/schemas/providers/<region>.json``: resource type -> schema digest, the data behind
cfn-lint's E3006 "resource type does not exist in region"). A type missing there cannot be created
there: in cfn-lint 1.58.0 ``AWS::SageMaker::Cluster`` is absent from eu-central-2 and ap-southeast-5
(where the HyperPod pricing data still lists on-demand types) and ``AWS::Grafana::Workspace`` from
ap-south-1, ap-south-2, ap-southeast-3, ap-southeast-4, ca-central-1, eu-north-1, eu-south-2,
sa-east-1 and us-west-1.

HyperPod regions, as hpq counts them: the regions of cfn-lint's HyperPod on-demand offer data
(cfn/offers.py, from the AWS pricing API) whose CloudFormation has ``AWS::SageMaker::Cluster``. A
variant's regions are those of the HyperPod regions whose CloudFormation has every resource type the
variant's templates create, less the types a resource only gets under a region condition (Managed
Grafana: the Observability stack creates the Grafana workspace only where the type exists and keeps
Managed Prometheus everywhere). Custom resources (``Custom::*``) are Lambda-backed and exist wherever
Lambda does. Nothing here is a hand-kept list: a new cfn-lint pin moves the lists, and the tests check
them against the schemas.

Used by the root template's ``RegionHasEveryResourceType`` rule (CloudFormation refuses the stack before
anything is created), ``hpq deploy``'s pre-flight (aws/preflight.py) and ``hpq lint``'s default
regions (cfn/lint.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from hpq.cfn import offers, synth

PROVIDERS_PACKAGE = "cfnlint.data.schemas.providers"
CLUSTER_TYPE = "AWS::SageMaker::Cluster"
GRAFANA_TYPE = "AWS::Grafana::Workspace"
# Resources with this condition exist only where their type does (observability.py); their types do not limit
# where a variant deploys.
GRAFANA_CONDITION = "GrafanaInRegion"
REGION_CONDITIONS = (GRAFANA_CONDITION,)
REGION_RULE = "RegionHasEveryResourceType"


@lru_cache(maxsize=1)
def _providers() -> dict[str, frozenset[str]]:
    """Region -> resource types its CloudFormation has (cfn-lint's provider schema index)."""
    out = {}
    for entry in resources.files(PROVIDERS_PACKAGE).iterdir():
        name = entry.name
        if not name.endswith(".json") or name == "sam.json":
            continue
        out[name[:-len(".json")]] = frozenset(json.loads(entry.read_text(encoding="utf-8")))
    return out


def source() -> str:
    from importlib.metadata import version

    return f"cfn-lint {version('cfn-lint')} ({PROVIDERS_PACKAGE.replace('.', '/')}/<region>.json)"


def has_type(region: str, resource_type: str) -> bool:
    """Whether CloudFormation in the region has the type (custom resources: always)."""
    if resource_type.startswith("Custom::") or resource_type == "AWS::CloudFormation::CustomResource":
        return True
    return resource_type in _providers().get(region, frozenset())


def known_regions() -> list[str]:
    return sorted(_providers())


@lru_cache(maxsize=1)
def hyperpod_regions() -> tuple[str, ...]:
    """Regions with HyperPod on-demand offers (pricing data) whose CloudFormation has AWS::SageMaker::Cluster."""
    return tuple(r for r in offers.regions() if has_type(r, CLUSTER_TYPE))


def regions_with(types: Iterable[str], candidates: Iterable[str] | None = None) -> tuple[str, ...]:
    """Of ``candidates`` (default: the HyperPod regions), those whose CloudFormation has every type."""
    wanted = sorted(set(types))
    pool = hyperpod_regions() if candidates is None else tuple(candidates)
    return tuple(r for r in pool if all(has_type(r, t) for t in wanted))


def missing_types(region: str, types: Iterable[str]) -> list[str]:
    return sorted(t for t in set(types) if not has_type(region, t))


def grafana_regions() -> tuple[str, ...]:
    """HyperPod regions where the Observability stack also creates Managed Grafana."""
    return regions_with([GRAFANA_TYPE])


def required_types(templates: Iterable[dict[str, Any]]) -> set[str]:
    """Resource types the templates create unconditionally on region (REGION_CONDITIONS left out)."""
    out: set[str] = set()
    for template in templates:
        for resource in (template.get("Resources") or {}).values():
            if resource.get("Condition") in REGION_CONDITIONS:
                continue
            out.add(resource["Type"])
    return out


@cache
def variant_regions(variant: str) -> tuple[str, ...]:
    """The HyperPod regions where every resource type of the variant's templates exists."""
    return regions_with(required_types(synth.synthesize(variant).values()))


def region_condition(where: Iterable[str]) -> dict[str, Any]:
    """A Conditions entry true in the given regions (Fn::Or takes 2 to 10 operands: nested)."""
    return offers._any([{"Fn::Equals": [{"Ref": "AWS::Region"}, r]} for r in where])
