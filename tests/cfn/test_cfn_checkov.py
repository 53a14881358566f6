"""checkov (``--framework cloudformation``) over every rendered variant x size: no failed check, every skip
with a reason (issue 12, item 2).

checkov runs from its own virtualenv (dev/checkov-venv.sh, from dev/checkov-constraints.txt): it pins
boto3 exactly and must not share the test environment. Without it these tests fail, they never skip.
A skip is the template's ``Metadata: {checkov: {skip: [{id, comment}]}}``; checkov reports a skip
without a comment as "No comment provided", which counts as a skip without a reason here.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from hpq.cfn import synth
from tests.cfn.checkov import REPO, checkov_binary, pinned_checkov_version
from tests.cfn_render import COMBOS

NO_REASON = "No comment provided"  # what checkov 3.3.30 reports for a skip without a comment
MIN_REASON_CHARS = 40  # a reason a reviewer can weigh, not "n/a"
TIMEOUT_S = 300


def run_checkov(folder: Path) -> list[dict]:
    """checkov over every template under ``folder``: one dict per check result, with the file relative to it.

    --skip-download keeps it offline (no Prisma Cloud guidelines); the JSON report has passed, failed and
    skipped checks with the skip's comment. checkov must have parsed every resource of every template."""
    cmd = [str(checkov_binary()), "-d", str(folder), "--framework", "cloudformation", "--skip-download",
           "--output", "json", "--compact"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if proc.returncode not in (0, 1):  # 1: some check failed
        pytest.fail(f"checkov exited {proc.returncode}: {proc.stderr[-2000:]}", pytrace=False)
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    out = []
    resources = sum(len(json.loads(p.read_text())["Resources"]) for p in folder.rglob("*.json"))
    assert [r["check_type"] for r in reports] == ["cloudformation"]
    assert reports[0]["summary"]["parsing_errors"] == 0, reports[0]["summary"]
    assert reports[0]["summary"]["resource_count"] == resources, "checkov did not read every resource"
    for report in reports:
        for kind in ("passed_checks", "failed_checks", "skipped_checks"):
            for check in report["results"][kind]:
                out.append({"kind": kind.removesuffix("_checks"), "file": check["file_path"].lstrip("/"),
                            "id": check["check_id"], "resource": check["resource"],
                            "comment": check["check_result"].get("suppress_comment")})
    return out


def failed_checks(results: list[dict]) -> list[str]:
    return [f"{r['file']} {r['resource']}: {r['id']}" for r in results if r["kind"] == "failed"]


def unjustified_skips(results: list[dict]) -> list[str]:
    return [f"{r['file']} {r['resource']}: {r['id']} ({r['comment']!r})" for r in results
            if r["kind"] == "skipped" and (not r["comment"] or r["comment"] == NO_REASON
                                           or len(r["comment"].strip()) < MIN_REASON_CHARS)]


@pytest.fixture(scope="session")
def checkov_results(rendered, tmp_path_factory):
    """(variant, size) -> checkov's results for its templates. Identical files (most nested stacks do not change
    with the size) are scanned once, in one checkov run."""
    root = tmp_path_factory.mktemp("checkov")
    by_digest: dict[str, str] = {}
    owners: dict[tuple[str, str], list[str]] = {}
    for combo, files in rendered.items():
        for name, template in files.items():
            text = synth.to_json(template)
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            if digest not in by_digest:
                (root / digest).mkdir()
                (root / digest / name).write_text(text, encoding="utf-8")
                by_digest[digest] = f"{digest}/{name}"
            owners.setdefault(combo, []).append(by_digest[digest])
    results = run_checkov(root)
    return {combo: [r for r in results if r["file"] in set(paths)] for combo, paths in owners.items()}


def counts(results: list[dict]) -> dict[str, int]:
    c = Counter(r["kind"] for r in results)
    return {k: c.get(k, 0) for k in ("passed", "failed", "skipped")}


def test_checkov_is_the_pinned_version():
    """The checkov that runs is the one dev/checkov-constraints.txt pins and docs/templates.md records."""
    want = pinned_checkov_version()
    got = subprocess.run([str(checkov_binary()), "--version"], capture_output=True, text=True, timeout=120,
                         check=True).stdout.strip()
    assert got == want
    assert f"checkov {want}" in (REPO / "docs" / "templates.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_checkov_finds_nothing_unfixed_or_unjustified(checkov_results, variant, size):
    results = checkov_results[(variant, size)]
    assert counts(results)["passed"] > 50, "checkov ran too few checks to mean anything"
    assert not failed_checks(results), "checkov failed checks:\n" + "\n".join(failed_checks(results))
    assert not unjustified_skips(results), "skips without a reason:\n" + "\n".join(unjustified_skips(results))


def _template_skips(files: dict[str, dict]) -> set[tuple[str, str, str]]:
    out = set()
    for name, template in files.items():
        for logical, body in template.get("Resources", {}).items():
            for skip in body.get("Metadata", {}).get("checkov", {}).get("skip", []):
                out.add((name, f"{body['Type']}.{logical}", skip.get("id", "")))
    return out


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_every_skip_in_the_templates_is_one_checkov_applies(checkov_results, rendered, variant, size):
    """No stale skip: each skip in a template is for a check checkov runs on that resource (it reports it as
    skipped), so the list in docs/templates.md is exactly what the scan waives."""
    declared = _template_skips(rendered[(variant, size)])
    reported = {(r["file"].split("/")[-1], r["resource"], r["id"]) for r in checkov_results[(variant, size)]
                if r["kind"] == "skipped"}
    assert declared == reported
    assert all(re.fullmatch(r"CKV_AWS_\d+", check) for _, _, check in declared)


def test_the_checkov_test_can_fail(rendered, tmp_path):
    """The checks above flag a real finding and a reasonless skip: EKS secrets encryption removed (CKV_AWS_58)
    and the Lambda DLQ skip's comment dropped are both reported."""
    files = rendered[("eks-gpu", "small")]
    eks = copy.deepcopy(files["EKS.json"])
    del eks["Resources"]["Cluster"]["Properties"]["EncryptionConfig"]
    helm = copy.deepcopy(files["Helm.json"])
    for skip in helm["Resources"]["HelmFunction"]["Metadata"]["checkov"]["skip"]:
        if skip["id"] == "CKV_AWS_116":
            del skip["comment"]
    for name, template in (("EKS.json", eks), ("Helm.json", helm)):
        (tmp_path / name).write_text(synth.to_json(template), encoding="utf-8")
    results = run_checkov(tmp_path)
    assert failed_checks(results) == ["EKS.json AWS::EKS::Cluster.Cluster: CKV_AWS_58"]
    assert unjustified_skips(results) == [f"Helm.json AWS::Lambda::Function.HelmFunction: CKV_AWS_116 ({NO_REASON!r})"]


def test_docs_record_the_scan(checkov_results):
    """docs/templates.md's "Security scan" table holds checkov's counts for every variant (the same for every size:
    sizes change parameter defaults only) and names every skipped check with its resource."""
    doc = (REPO / "docs" / "templates.md").read_text(encoding="utf-8")
    section = doc.split("## Security scan", 1)[1].split("\n## ", 1)[0]
    for variant in sorted({v for v, _ in COMBOS}):
        per_size = {size: counts(checkov_results[(variant, size)]) for v, size in COMBOS if v == variant}
        assert len({tuple(c.values()) for c in per_size.values()}) == 1, per_size
        c = next(iter(per_size.values()))
        row = f"| `{variant}` | {c['passed']} | {c['failed']} | {c['skipped']} |"
        assert row in section, f"docs/templates.md lacks the row {row}"
    skipped = {(r["id"], r["resource"].split(".")[-1]) for results in checkov_results.values() for r in results
               if r["kind"] == "skipped"}
    for check, logical in skipped:
        assert re.search(rf"`{check}`[^\n]*`{logical}`", section), f"docs/templates.md does not justify {check} on {logical}"
