"""cfn-lint (AWS's resource schemas, real linter) finds nothing on any variant x size."""

from __future__ import annotations

import json

import pytest

from hpq.cfn import lint as cfn_lint
from hpq.cfn import synth
from hpq.tests.fixtures_cfn import COMBOS, lint_results, rendered  # noqa: F401


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_lint_clean(lint_results, rendered, variant, size):  # noqa: F811
    owners, by_path = lint_results
    found = []
    for name in rendered[(variant, size)]:
        path = owners[(variant, size, name)]
        found += [f"{name}: {f.rule} {f.message}" for f in by_path.get(str(path.resolve()), [])]
    assert not found, "\n".join(found)


def test_lint_runs_in_the_three_regions_with_the_pinned_cfn_lint():
    """The templates are linted in us-east-1, us-east-2 and us-west-2 (their per-region data differs) with
    the cfn-lint that dev/constraints.txt pins and docs/templates.md records."""
    from importlib.metadata import version
    from pathlib import Path

    assert cfn_lint.DEFAULT_REGIONS == ("us-east-1", "us-east-2", "us-west-2")
    repo = Path(__file__).resolve().parent.parent
    pinned = next(line.split("==")[1] for line in (repo / "dev" / "constraints.txt").read_text().splitlines()
                  if line.startswith("cfn-lint=="))
    assert version("cfn-lint") == pinned
    assert f"cfn-lint {pinned}" in (repo / "docs" / "templates.md").read_text()


def test_lint_reports_a_broken_template(tmp_path):
    """The lint must be able to fail: a security group without its required description is an error."""
    template = synth.synthesize("slurm-gpu")["Security.json"]
    del template["Resources"]["ClusterSecurityGroup"]["Properties"]["GroupDescription"]
    template["Parameters"]["Unused"] = {"Type": "String"}
    path = tmp_path / "Security.json"
    path.write_text(json.dumps(template), encoding="utf-8")
    findings = cfn_lint.lint_files([path])
    assert {f.severity for f in findings} >= {"error", "warning"}, findings
    assert any("GroupDescription" in f.message for f in findings)
