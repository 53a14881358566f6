"""cfn-lint (AWS's resource schemas, real linter) finds nothing on any variant x size."""

from __future__ import annotations

import json

import pytest

from hpq.cfn import lint, synth
from tests.cfn_render import COMBOS


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_lint_clean(lint_results, rendered, variant, size):
    """0 errors, 0 warnings in every region the variant deploys to (every HyperPod region today)."""
    owners, by_path, _ = lint_results
    found = []
    for name in rendered[(variant, size)]:
        path = owners[(variant, size, name)]
        found += [f"{name}: {f.rule} {f.message}" for f in by_path.get(str(path.resolve()), [])]
    assert not found, "\n".join(found)


def test_every_file_was_linted_in_every_region_of_its_variants(lint_results):
    """The clean result above covers each variant's whole region list, not a sample of it."""
    from hpq.cfn import regions

    owners, _, where = lint_results
    for (variant, _size, _name), path in owners.items():
        assert set(regions.variant_regions(variant)) <= where[path]
        assert len(regions.variant_regions(variant)) >= 19  # cfn-lint 1.58.0: 19 HyperPod regions


def test_lint_runs_with_the_pinned_newest_cfn_lint():
    """The templates are linted with the cfn-lint that dev/constraints.txt pins (the newest on PyPI on
    2026-11-26: `pip index versions cfn-lint` lists 1.58.0 as latest) and docs/templates.md records."""
    from importlib.metadata import version
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    pinned = next(line.split("==")[1] for line in (repo / "dev" / "constraints.txt").read_text().splitlines()
                  if line.startswith("cfn-lint=="))
    assert version("cfn-lint") == pinned
    assert f"cfn-lint {pinned}" in (repo / "docs" / "templates.md").read_text()
    assert lint.default_regions() == regions_module().hyperpod_regions()


def regions_module():
    from hpq.cfn import regions

    return regions


def test_lint_finds_a_resource_type_missing_in_a_region(tmp_path):
    """Broken twin of the region lists: the HyperPod stack linted where CloudFormation has no
    AWS::SageMaker::Cluster (eu-central-2 in cfn-lint 1.58.0) is an E3006 error, and so is the Observability
    stack with its Grafana workspace no longer under the region condition in a region without Grafana."""
    files = synth.synthesize("slurm-gpu")
    hp = tmp_path / "HyperPod.json"
    hp.write_text(synth.to_json(files["HyperPod.json"]), encoding="utf-8")
    assert "eu-central-2" not in regions_module().variant_regions("slurm-gpu")
    assert any(f.rule == "E3006" for f in lint.lint_files([hp], ["eu-central-2"]))
    obs = files["Observability.json"]
    assert not lint.lint_files([_write(tmp_path / "ok" / "Observability.json", obs)], ["us-west-1"])
    for resource in obs["Resources"].values():
        resource.pop("Condition", None)
    obs["Outputs"]["GrafanaUrl"]["Value"] = obs["Outputs"]["GrafanaUrl"]["Value"]["Fn::If"][1]
    broken = lint.lint_files([_write(tmp_path / "broken" / "Observability.json", obs)], ["us-west-1"])
    assert any(f.rule == "E3006" and "Grafana" in f.message for f in broken), broken


def _write(path, template):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(synth.to_json(template), encoding="utf-8")
    return path


def test_lint_reports_a_broken_template(tmp_path):
    """The lint must be able to fail: a security group without its required description is an error."""
    template = synth.synthesize("slurm-gpu")["Security.json"]
    del template["Resources"]["ClusterSecurityGroup"]["Properties"]["GroupDescription"]
    template["Parameters"]["Unused"] = {"Type": "String"}
    path = tmp_path / "Security.json"
    path.write_text(json.dumps(template), encoding="utf-8")
    findings = lint.lint_files([path], ["us-east-1"])
    assert {f.severity for f in findings} >= {"error", "warning"}, findings
    assert any("GroupDescription" in f.message for f in findings)
