"""``node_doctor --dcgm``: dcgmi diag -r 1 -j read into findings (scripts/dcgm_checks.py).

No host here has DCGM (tests/data/node_tools/*/dcgmi-version.rc is 127 on both GPU hosts captured), so the JSON is
the shape NVIDIA's own DCGM tests assert on (NVIDIA/DCGM testing/python3/tests/test_dcgm_diag.py: "DCGM Diagnostic"
-> test_categories -> tests -> results with entity_group, entity_id, status, warnings; test_summary), a passing
document and its broken twin; and node_doctor run with and without a dcgmi on PATH."""

from __future__ import annotations

import copy
import json
import stat

import pytest

from hpq.scripts import dcgm_checks, node_doctor

PASSING = {"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
    {"name": "software", "results": [{"entity_group": "GPU", "entity_id": g, "status": "Pass"} for g in (0, 1)],
     "test_summary": {"status": "Pass"}},
    {"name": "inforom", "results": [{"entity_group": "GPU", "entity_id": g, "status": "Skip"} for g in (0, 1)],
     "test_summary": {"status": "Skip"}}]}]}}


def _failing() -> dict:
    doc = copy.deepcopy(PASSING)
    test = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    test["results"][1] = {"entity_group": "GPU", "entity_id": 1, "status": "Fail", "warnings": [
        {"error_category": 8, "error_id": 29, "error_severity": 5, "warning": "Persistence mode for GPU 1 is disabled."}]}
    test["test_summary"]["status"] = "Fail"
    return doc


def test_a_passing_diag_has_no_finding_and_its_twin_names_the_gpu():
    assert dcgm_checks.judge_diag(json.dumps(PASSING)) == []
    found = dcgm_checks.judge_diag(json.dumps(_failing()))
    assert [(f.kind, f.severity, f.action, f.gpu) for f in found] == [("dcgm_diag", "critical", "drain", "1")]
    assert "Deployment/software fail on GPU 1: Persistence mode" in found[0].evidence
    # DCGM 3.x names the root "DCGM GPU Diagnostic": the same tree.
    old = {"DCGM GPU Diagnostic": _failing()["DCGM Diagnostic"]}
    assert [f.gpu for f in dcgm_checks.judge_diag(json.dumps(old))] == ["1"]


@pytest.mark.parametrize("bad", ["", "Error: unable to connect to host engine", "{}", '{"DCGM Diagnostic": {}}'])
def test_what_is_not_diag_json_is_refused(bad):
    with pytest.raises(ValueError):
        dcgm_checks.judge_diag(bad)


def _dcgmi(tmp_path, monkeypatch, doc: dict | None, rc: int = 0) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if doc is not None:
        (tmp_path / "diag.json").write_text(json.dumps(doc))
        path = bin_dir / "dcgmi"
        path.write_text(f"#!/bin/sh\ncat {tmp_path}/diag.json\nexit {rc}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


@pytest.mark.parametrize("doc,rc,kinds,unchecked", [
    (PASSING, 0, [], []),
    (_failing(), 226, ["dcgm_diag"], []),  # dcgmi exits non-zero on a failed test: its JSON still says which
    (None, 0, [], ["dcgm: dcgmi not installed on node-7"]),
])
def test_node_doctor_runs_dcgmi_where_installed_and_says_where_not(tmp_path, monkeypatch, doc, rc, kinds, unchecked):
    _dcgmi(tmp_path, monkeypatch, doc, rc)
    found, why = node_doctor.dcgm_findings("node-7")
    assert ([f.kind for f in found], why) == (kinds, unchecked)
