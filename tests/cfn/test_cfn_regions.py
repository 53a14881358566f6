"""Where each variant deploys: computed here straight from cfn-lint's per-region provider schemas
(cfnlint/data/schemas/providers/<region>.json) and its HyperPod pricing data, and compared with what the
templates' Rules and conditions say (cfn/regions.py must not be a hand list)."""

from __future__ import annotations

import json
from pathlib import Path

import cfnlint
import pytest

from hpq.cfn import regions
from tests.cfn_render import COMBOS

PROVIDERS = Path(cfnlint.__file__).parent / "data" / "schemas" / "providers"
OFFERS = Path(cfnlint.__file__).parent / "data" / "schemas" / "extensions" / "aws_sagemaker_cluster" / \
    "instancetype_enum.json"


def schema_types() -> dict[str, set[str]]:
    return {p.stem: set(json.loads(p.read_text())) for p in PROVIDERS.glob("*.json") if p.stem != "sam"}


def evaluate(node, region: str) -> bool:
    (fn, arg), = node.items()
    if fn == "Fn::Equals":
        return [region if a == {"Ref": "AWS::Region"} else a for a in arg][0] == arg[1]
    if fn == "Fn::Or":
        return any(evaluate(a, region) for a in arg)
    raise AssertionError(fn)


def test_hyperpod_regions_are_the_priced_regions_whose_cloudformation_has_the_cluster_type():
    types = schema_types()
    priced = {r for r, v in json.loads(OFFERS.read_text()).items() if isinstance(v, dict)}
    expected = sorted(r for r in priced if "AWS::SageMaker::Cluster" in types.get(r, set()))
    assert list(regions.hyperpod_regions()) == expected
    # cfn-lint 1.58.0: priced but without the cluster type in CloudFormation (issue 20).
    assert {"eu-central-2", "ap-southeast-5"} <= priced - set(expected)
    assert len(expected) == 19


@pytest.mark.parametrize(("variant", "size"), [c for c in COMBOS if c[1] == "small"])
def test_region_rule_lists_exactly_the_regions_with_every_type(rendered, variant, size):
    """Each root's RegionHasEveryResourceType rule: the HyperPod regions whose CloudFormation has every type the
    variant's templates create, less types under the Grafana region condition; custom resources count anywhere."""
    types = schema_types()
    files = rendered[(variant, size)]
    used = {r["Type"] for t in files.values() for r in t.get("Resources", {}).values()
            if r.get("Condition") != regions.GRAFANA_CONDITION and not r["Type"].startswith("Custom::")}
    expected = [r for r in regions.hyperpod_regions() if used <= types[r]]
    rule = files["root.json"]["Rules"][regions.REGION_RULE]["Assertions"][0]["Assert"]
    assert rule == {"Fn::Contains": [expected, {"Ref": "AWS::Region"}]}
    assert list(regions.variant_regions(variant)) == expected


def test_grafana_condition_is_true_exactly_where_the_type_exists(rendered):
    types = schema_types()
    obs = rendered[("slurm-gpu", "small")]["Observability.json"]
    condition = obs["Conditions"][regions.GRAFANA_CONDITION]
    for region in regions.hyperpod_regions():
        assert evaluate(condition, region) is ("AWS::Grafana::Workspace" in types[region]), region
    without = [r for r in regions.hyperpod_regions() if "AWS::Grafana::Workspace" not in types[r]]
    assert len(without) == 9 and "us-west-1" in without  # issue 20: 11 of 21 priced regions, 9 of the 19
    grafana = [k for k, r in obs["Resources"].items() if r["Type"] == "AWS::Grafana::Workspace"]
    assert grafana and all(obs["Resources"][k]["Condition"] == regions.GRAFANA_CONDITION for k in grafana)
    # Broken twin: the workspace without its condition would limit the variant to the Grafana regions.
    twin = json.loads(json.dumps(obs))
    for k in grafana:
        del twin["Resources"][k]["Condition"]
    assert "AWS::Grafana::Workspace" in regions.required_types([twin])
    assert len(regions.regions_with(regions.required_types([twin]))) == 19 - len(without)
