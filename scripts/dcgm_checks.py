"""``dcgmi diag -r 1 -j`` read into findings: the optional DCGM half of the node checks (``--dcgm``).

DCGM's JSON (NVIDIA/DCGM testing/python3/tests/test_dcgm_diag.py checks the shape it prints):
``{"DCGM Diagnostic": {"test_categories": [{"category": ..., "tests": [{"name": ..., "results": [{"entity_group":
"GPU", "entity_id": 0, "status": "Pass"|"Fail"|"Skip"|"Warn", "warnings": [{"warning": ..., "error_id": N}]}],
"test_summary": {"status": ...}}]}]}}``; DCGM 3.x keys the same tree ``"DCGM GPU Diagnostic"``. Level 1 (``-r 1``)
runs the Deployment checks only (software, denylist, NVML and CUDA libraries, permissions, persistence mode,
page retirement and row remap, inforom): seconds, not the minutes of levels 2-4 (NVIDIA DCGM user guide,
https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html).

Where DCGM is: AWS's Deep Learning Base GPU AMIs, which HyperPod's Slurm images build on, list ``dcgm_version``
in their release notes (e.g. https://docs.aws.amazon.com/dlami/latest/devguide/ release notes of the Base AMI
with single CUDA, AL2023, 2026-05-20: DCGM 4.5.3); HyperPod's deep health checks run DCGM diagnostics level 4
on GPU instances (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-deep-health-
checks.html). A node without ``dcgmi`` is said plainly: "dcgmi not installed on NODE" (INCONCLUSIVE for that
check), never a pass. Standard library only: it runs on cluster nodes with the system python3.
"""

from __future__ import annotations

from typing import Any, List, Optional

from hpq.scripts.node_checks import Finding, tool_json
from hpq.scripts.xid_catalog import ACTION_DRAIN, SEVERITY_CRITICAL, SEVERITY_WARNING

ROOT_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # DCGM 4, DCGM 3


def _categories(doc: Any) -> Optional[list]:
    if not isinstance(doc, dict):
        return None
    for key in ROOT_KEYS:
        root = doc.get(key)
        if isinstance(root, dict) and isinstance(root.get("test_categories"), list):
            return root["test_categories"]
    return None


def judge_diag(text: str) -> List[Finding]:
    """One finding per failed (critical) or warned (warning) test and GPU; [] when every test passed or skipped.

    Raises ValueError on text that is not DCGM's diag JSON (the check is then unchecked, not passed)."""
    doc = tool_json(text, "dcgmi diag")
    categories = _categories(doc)
    if categories is None:
        raise ValueError("dcgmi diag JSON has no test_categories under %s" % " or ".join(ROOT_KEYS))
    findings: List[Finding] = []
    for category in categories:
        for test in (category.get("tests") or []) if isinstance(category, dict) else []:
            if not isinstance(test, dict):
                continue
            name = "%s/%s" % (category.get("category", "?"), test.get("name", "?"))
            for result in test.get("results") or []:
                if not isinstance(result, dict):
                    continue
                status = str(result.get("status", "")).lower()
                if status not in ("fail", "warn"):
                    continue
                where = "%s %s" % (result.get("entity_group", "GPU"), result.get("entity_id", "?"))
                warnings = "; ".join(str(w.get("warning", "")).strip() for w in result.get("warnings") or []
                                     if isinstance(w, dict))
                findings.append(Finding("dcgm_diag", SEVERITY_CRITICAL if status == "fail" else SEVERITY_WARNING,
                                        "dcgmi diag -r 1: %s %s on %s%s" % (name, status, where,
                                                                            ": " + warnings if warnings else ""),
                                        ACTION_DRAIN, str(result.get("entity_id", ""))))
    return findings
