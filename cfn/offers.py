"""Where each HyperPod instance type has an on-demand offer, from the data cfn-lint ships.

cfn-lint keeps, per region, the instance types SageMaker HyperPod clusters can be created with on
demand (gathered from the AWS pricing API): ``cfnlint/data/schemas/extensions/aws_sagemaker_cluster/
instancetype_enum.json``, the data behind rule E3644 and, when a parameter's value is resolved into
``AWS::SageMaker::Cluster InstanceGroups[].InstanceType``, warning W1030. A type missing from a
region's list (ml.p5e.48xlarge everywhere, ml.trn2.48xlarge outside us-east-2 in cfn-lint 1.58.0) can
only be had there through a SageMaker training plan.

hpq uses this one maintained source three ways, never a hand-kept table:
- the HyperPod stack's ``WorkerOnDemandOffer`` condition (only a type with an offer in the deploy
  region gets an on-demand worker group; cfn-lint checks that claim against the same data);
- the ``WorkerTypeNeedsATrainingPlan`` rule (a type without an offer is accepted only with a
  TrainingPlanArn), which CloudFormation checks before it creates anything;
- ``hpq deploy``'s pre-flight (aws/preflight.py), which says what to do instead.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

DATA_PACKAGE = "cfnlint.data.schemas.extensions.aws_sagemaker_cluster"
DATA_FILE = "instancetype_enum.json"
FN_MAX_OPERANDS = 10  # Fn::And / Fn::Or take 2 to 10 conditions


@lru_cache(maxsize=1)
def _data() -> dict[str, frozenset[str]]:
    raw = json.loads(resources.files(DATA_PACKAGE).joinpath(DATA_FILE).read_text(encoding="utf-8"))
    return {region: frozenset(body["enum"]) for region, body in raw.items()
            if isinstance(body, dict) and "enum" in body}


def source() -> str:
    """Where the data comes from, with the cfn-lint version (for messages and docs)."""
    from importlib.metadata import version

    return f"cfn-lint {version('cfn-lint')} ({DATA_PACKAGE.replace('.', '/')}/{DATA_FILE})"


def regions() -> list[str]:
    """Regions the data covers (where HyperPod has on-demand prices at all)."""
    return sorted(_data())


def offer_regions(instance_type: str) -> list[str]:
    """Regions where the type has an on-demand HyperPod offer."""
    return [r for r in regions() if instance_type in _data()[r]]


def has_on_demand_offer(instance_type: str, region: str) -> bool:
    return instance_type in _data().get(region, frozenset())


def type_groups(instance_types: list[str] | tuple[str, ...]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(types, regions) pairs: the types grouped by the exact set of regions that offer them, in the
    order the types are given; types with no offer anywhere are left out (no region makes them on demand)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for t in instance_types:
        where = tuple(offer_regions(t))
        if where:
            groups.setdefault(where, []).append(t)
    return [(tuple(ts), where) for where, ts in groups.items()]


def _any(items: list[Any], fn: str = "Fn::Or") -> Any:
    """One condition true when any of ``items`` is: a single item as is, more nested in chunks of ten."""
    if len(items) == 1:
        return items[0]
    if len(items) <= FN_MAX_OPERANDS:
        return {fn: items}
    chunks = [items[i:i + FN_MAX_OPERANDS] for i in range(0, len(items), FN_MAX_OPERANDS)]
    return _any([_any(c, fn) for c in chunks], fn)


def offer_condition(type_param: str, instance_types: list[str] | tuple[str, ...]) -> Any:
    """A Conditions entry: true when Ref type_param has an on-demand offer in AWS::Region."""
    terms = []
    for types, where in type_groups(instance_types):
        is_type = _any([{"Fn::Equals": [{"Ref": type_param}, t]} for t in types])
        in_region = _any([{"Fn::Equals": [{"Ref": "AWS::Region"}, r]} for r in where])
        terms.append({"Fn::And": [is_type, in_region]})
    if not terms:  # no type offered anywhere: a condition that is never true
        return {"Fn::Equals": ["on-demand", "none"]}
    return _any(terms)


def offer_rule_assertion(type_param: str, instance_types: list[str] | tuple[str, ...]) -> Any:
    """The same predicate for a template Rule (Rules have Fn::Contains, Conditions do not)."""
    terms = [{"Fn::And": [{"Fn::Contains": [list(types), {"Ref": type_param}]},
                          {"Fn::Contains": [list(where), {"Ref": "AWS::Region"}]}]}
             for types, where in type_groups(instance_types)]
    if not terms:
        return {"Fn::Equals": ["on-demand", "none"]}
    return _any(terms)
