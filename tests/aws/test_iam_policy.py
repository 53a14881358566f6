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


# Actions with no botocore operation behind them: AMP's query and remote-write APIs are Prometheus's HTTP API,
# authorized as aps:QueryMetrics and aps:RemoteWrite (https://docs.aws.amazon.com/service-authorization/latest/
# reference/list_amazonmanagedserviceforprometheus.html).
HTTP_ONLY_ACTIONS = {"aps:QueryMetrics", "aps:RemoteWrite"}


def test_every_action_is_a_real_operation():
    session = botocore.session.get_session()
    prefixes = {"servicequotas": "service-quotas"}
    s3_actions = set(SCAN["S3_ACTIONS"].values()) | {"ListBucketVersions"}
    for action in allowed(POLICY) - HTTP_ONLY_ACTIONS:
        prefix, op = action.split(":")
        service = prefixes.get(prefix, prefix)
        assert op in session.get_service_model(service).operation_names or (prefix == "s3" and op in s3_actions), action


# --- Part two: the resources CloudFormation creates with the deployer's credentials --------------------------
# hpq passes no service role, so CloudFormation uses a session built from the deployer's credentials
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-iam-servicerole.html); each resource
# type's registry schema (cfn-lint's copy, data/schemas) lists what its handlers call.

import re  # noqa: E402

import cfnlint  # noqa: E402

SCHEMAS = Path(cfnlint.__file__).parent / "data" / "schemas"
DOCS = ROOT / "docs"
# Prefixes botocore has no service for, each in the Service Authorization Reference
# (https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html):
# vpce (AWS PrivateLink: vpce:AllowMultiRegion, a permission-only action in AWS::EC2::VPCEndpoint's schema).
PERMISSION_ONLY_PREFIXES = {"vpce"}


@pytest.fixture(scope="module")
def templates() -> dict[str, dict]:
    return SCAN["synthesized_templates"]()


def resource_policies() -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(DOCS.glob(SCAN["RESOURCE_PAGES"]))]


def schema_needs(rtype: str) -> set[str]:
    """create/update/delete/read permissions of the type's schema, read here, not through the generator."""
    providers = json.loads((SCHEMAS / "providers" / "us-east-1.json").read_text(encoding="utf-8"))
    schema = json.loads((SCHEMAS / "resources" / f"{providers[rtype]}.json").read_text(encoding="utf-8"))
    return {a for h in ("create", "update", "delete", "read")
            for a in schema.get("handlers", {}).get(h, {}).get("permissions", [])}


def uncovered(policies: list[dict], templates: dict[str, dict]) -> dict[str, set[str]]:
    """Type -> schema permissions (IAM-shaped ones) none of the policies allows, over every template."""
    granted = set().union(*(allowed(p) for p in policies))
    out = {}
    for rtype in {r["Type"] for t in templates.values() for r in (t.get("Resources") or {}).values()}:
        if SCAN["is_custom"](rtype):
            need = {"lambda:InvokeFunction"}
        elif rtype in SCAN["NO_HANDLERS"]:
            need = set(SCAN["NO_HANDLERS"][rtype][1])
        else:
            need = {a for a in schema_needs(rtype) if SCAN["ACTION"].match(a)}
        if need - granted:
            out[rtype] = need - granted
    return out


def test_every_docs_file_is_what_the_script_writes(templates):
    files = SCAN["render_all"](templates)
    for name, text in files.items():
        assert (DOCS / name).read_text(encoding="utf-8") == text, f"run python dev/iam_policy.py ({name})"
    assert {p.name for p in DOCS.glob(SCAN["RESOURCE_PAGES"])} <= set(files), "stale resource policy file"


def test_the_templates_cover_every_variant_size_and_optional_stack(templates):
    from hpq import vocab

    assert {k.rsplit("/", 1)[0] for k in templates} == {f"{v}/{s}" for v in vocab.VARIANTS for s in vocab.SIZES}
    types = SCAN["resource_types"](templates)
    for rtype in ("AWS::APS::Workspace", "AWS::Grafana::Workspace", "AWS::SNS::Topic",  # observability, validation
                  "AWS::EKS::Cluster", "AWS::SageMaker::Cluster", "AWS::FSx::FileSystem", "AWS::CloudFormation::Stack"):
        assert rtype in types, rtype


def test_every_resource_type_has_every_handler_permission_in_the_policies(templates):
    assert uncovered(resource_policies(), templates) == {}


def test_a_policy_missing_one_handler_permission_fails(templates):
    twin = json.loads(json.dumps(resource_policies()))
    for policy in twin:
        for st in policy["Statement"]:
            st["Action"] = [a for a in st["Action"] if a != "sagemaker:CreateCluster"]
    assert uncovered(twin, templates) == {"AWS::SageMaker::Cluster": {"sagemaker:CreateCluster"}}


def test_a_made_up_resource_type_is_refused_in_one_line(templates, monkeypatch, capsys):
    broken = dict(templates)
    broken["slurm-gpu/small/Made.json"] = {"Resources": {"Thing": {"Type": "AWS::Made::Up", "Properties": {}}}}
    with pytest.raises(SCAN["UnknownResourceType"], match="AWS::Made::Up"):
        SCAN["render_all"](broken)
    before = {p.name: p.read_text(encoding="utf-8") for p in DOCS.glob("iam*.json")}
    monkeypatch.setitem(SCAN["main"].__globals__, "synthesized_templates", lambda: broken)  # runpy copies globals
    assert SCAN["main"]([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "AWS::Made::Up" in err and "Traceback" not in err
    assert {p.name: p.read_text(encoding="utf-8") for p in DOCS.glob("iam*.json")} == before


def test_types_without_handlers_are_listed_with_why():
    record = json.loads((DOCS / "iam-resource-types.json").read_text(encoding="utf-8"))["types"]
    no_handlers = {t for t, e in record.items() if "no_handlers" in e}
    assert no_handlers == {"AWS::FSx::FileSystem", "Custom::HyperPodHelmChart", "Custom::LifecycleBucketContents"}
    assert all(record[t]["no_handlers"] and record[t]["actions"] for t in no_handlers)


def test_every_policy_file_is_a_valid_document_under_the_size_limit():
    for path in [DOCS / "iam-policy.json", *sorted(DOCS.glob(SCAN["RESOURCE_PAGES"]))]:
        policy = json.loads(path.read_text(encoding="utf-8"))
        assert policy["Version"] == "2012-10-17" and policy["Statement"], path.name
        for st in policy["Statement"]:
            assert st["Effect"] == "Allow" and st["Resource"] == "*" and st["Action"] and st["Sid"].isalnum()
        assert SCAN["policy_size"](policy) <= 6144, path.name
    assert len(resource_policies()) >= 2  # the union is over 6,144 characters, so it must be split


@pytest.mark.parametrize("count", [1, 400])
def test_split_keeps_every_action_and_each_part_under_the_limit(count: int):
    actions = [f"ec2:Action{i:04d}" for i in range(count)]
    parts = SCAN["split_policies"](actions)
    assert sorted(a for p in parts for a in allowed(p)) == actions
    assert all(SCAN["policy_size"](p) <= 6144 for p in parts)
    assert (len(parts) > 1) == (count == 400)


def test_every_resource_action_is_service_colon_action_of_a_known_service():
    session = botocore.session.get_session()
    prefixes = set()
    for svc in session.get_available_services():
        model = session.get_service_model(svc)
        prefixes |= {svc, model.signing_name, model.endpoint_prefix}
    shape = re.compile(r"^[a-z0-9-]+:[A-Za-z0-9]+$")
    actions = set().union(*(allowed(p) for p in resource_policies()))
    assert actions
    assert {a for a in actions if not shape.match(a)} == set()
    assert {a.split(":")[0] for a in actions} - prefixes - PERMISSION_ONLY_PREFIXES == set()
    assert not shape.match("s3:REST.PUT.OBJECT") and "s3:REST.PUT.OBJECT" not in actions  # the schema's odd one
