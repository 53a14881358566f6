"""docs/iam-policy.json lists every AWS API action hpq's own code calls (dev/iam_policy.py scans it).

The scan: every botocore operation name used on one of hpq's clients, as its IAM action (prefixes and
S3's action names from the Service Authorization Reference, cited in dev/iam_policy.py). The test fails
when the code calls an action the committed policy lacks; proven on a broken twin (a new call).
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import botocore.session
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCAN = runpy.run_path(str(ROOT / "dev" / "iam_policy.py"))
POLICY = json.loads((ROOT / "docs" / "iam-policy.json").read_text(encoding="utf-8"))


def allowed(policy: dict) -> set[str]:
    return {a for st in policy["Statement"] if st["Effect"] == "Allow" for a in st["Action"]}


def missing(policy: dict, sources: list[tuple[str, str]]) -> dict[str, list[str]]:
    return {a: files for a, files in SCAN["actions_in"](sources).items() if a not in allowed(policy)}


def test_the_policy_allows_every_action_the_code_calls():
    assert missing(POLICY, SCAN["code_sources"]()) == {}


def test_the_page_is_what_the_script_writes():
    assert (ROOT / "docs" / "iam-policy.json").read_text(encoding="utf-8") == SCAN["render"](), \
        "run python dev/iam_policy.py"


def test_the_scan_sees_the_calls_it_must():
    found = SCAN["actions_in"](SCAN["code_sources"]())
    for action in ("cloudformation:CreateChangeSet", "cloudformation:ExecuteChangeSet", "s3:PutObject",
                   "sagemaker:ListClusterNodes", "sagemaker:BatchReplaceClusterNodes", "ssm:StartSession",
                   "servicequotas:GetServiceQuota", "pricing:GetProducts"):
        assert action in found, action


TWIN = '''
import re
from hpq.aws.session import client

def protect(session, name):
    cfn = client(session, "cloudformation")
    cfn.update_termination_protection(StackName=name, EnableTerminationProtection=True)
    return re.search("x", name)            # a regex, not sagemaker:Search
'''


@pytest.mark.parametrize("source, expected", [
    ("", {}),
    (TWIN, {"cloudformation:UpdateTerminationProtection": ["aws/twin.py"]}),
])
def test_a_new_call_missing_from_the_policy_fails_on_a_twin(source: str, expected: dict):
    sources = SCAN["code_sources"]() + ([("aws/twin.py", source)] if source else [])
    assert missing(POLICY, sources) == expected


# Actions with no botocore operation behind them: AMP's query API is Prometheus's HTTP API, authorized as
# aps:QueryMetrics (https://docs.aws.amazon.com/service-authorization/latest/reference/
# list_amazonmanagedserviceforprometheus.html).
HTTP_ONLY_ACTIONS = {"aps:QueryMetrics"}


def test_every_action_is_a_real_operation():
    session = botocore.session.get_session()
    prefixes = {"servicequotas": "service-quotas"}
    s3_actions = set(SCAN["S3_ACTIONS"].values()) | {"ListBucketVersions"}
    for action in allowed(POLICY) - HTTP_ONLY_ACTIONS:
        prefix, op = action.split(":")
        service = prefixes.get(prefix, prefix)
        assert op in session.get_service_model(service).operation_names or (prefix == "s3" and op in s3_actions), action
