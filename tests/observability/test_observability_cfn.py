"""The Observability stack's wiring (cfn/observability.py): workspace, hpq's rules, the grant that never widens.

Shapes from AWS's own references: ``AWS::APS::RuleGroupsNamespace`` takes the rules file as ``Data`` and the
workspace ARN as ``Workspace`` (CloudFormation template reference, aws-resource-aps-rulegroupsnamespace.html;
its Workspace pattern ``^arn:(aws|aws-us-gov|aws-cn):aps:[a-z0-9-]+:[0-9]+:workspace/[a-zA-Z0-9-]+$``); the EKS add-on
``amazon-sagemaker-hyperpod-observability`` with its pod identity association and configuration as AWS's Terraform
module writes them (awslabs/awsome-distributed-ai 1.architectures/7.sagemaker-hyperpod-eks/terraform-modules/
hyperpod-eks-tf/modules/observability/eks_addon.tf). The remote-write URL is the workspace endpoint plus
``api/v1/remote_write`` (AMP user guide, AMP-onboard-ingest-metrics-remote-write.html).

The property: in every rendered template of every variant and size, every IAM statement that names an ``aps:``
action names exactly one resource, this stack's workspace (``Fn::GetAtt PrometheusWorkspace.Arn`` in the
Observability stack; in the IAM stack, the ARN in this partition, region and account of the workspace whose ID
the root fills in from it). The
checker is proven on generated broken twins: any other resource in such a statement is caught.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hpq.cfn import observability, root, s3
from tests.cfn_render import COMBOS

WORKSPACE_GETATT = {"Fn::GetAtt": ["PrometheusWorkspace", "Arn"]}
WORKSPACE_PARAM = {
    "Fn::Sub": "arn:${AWS::Partition}:aps:${AWS::Region}:${AWS::AccountId}:workspace/${PrometheusWorkspaceId}"
}
ALLOWED_APS_RESOURCES = (WORKSPACE_GETATT, WORKSPACE_PARAM)


def _statements(template: dict):
    """(resource logical id, statement) for every statement of every IAM policy the template carries."""
    for rid, res in (template.get("Resources") or {}).items():
        props = res.get("Properties") or {}
        docs = []
        if res["Type"] == "AWS::IAM::Role":
            docs += [p["PolicyDocument"] for p in props.get("Policies") or []]
        if res["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::RolePolicy"):
            docs.append(props["PolicyDocument"])
        for doc in docs:
            stmts = doc["Statement"]
            for s in stmts if isinstance(stmts, list) else [stmts]:
                yield rid, s


def _grants_aps(statement: dict) -> bool:
    """Whether an Allow statement can grant an aps: action (IAM matches actions case-insensitively)."""
    if statement.get("Effect") != "Allow":
        return False
    if "NotAction" in statement:
        return True
    actions = statement.get("Action") or []
    actions = [actions] if isinstance(actions, str) else actions
    return any(isinstance(a, str) and (a == "*" or a.lower().startswith("aps:")) for a in actions)


def aps_widenings(template: dict) -> list[str]:
    """Statements that allow an aps: action on anything but this stack's one workspace."""
    bad = []
    for rid, s in _statements(template):
        if not _grants_aps(s):
            continue
        resources = s.get("Resource")
        if isinstance(resources, list) and len(resources) == 1:
            resources = resources[0]
        if "NotAction" in s or "NotResource" in s or resources not in ALLOWED_APS_RESOURCES:
            bad.append(f"{rid}: {json.dumps(s)}")
    return bad


@pytest.mark.parametrize(("variant", "size"), COMBOS)
def test_no_rendered_template_widens_the_workspace_grant(rendered, variant, size):
    files = rendered[(variant, size)]
    found = {name: aps_widenings(t) for name, t in files.items()}
    assert not any(found.values()), found
    # ... and the grants exist where they must: Slurm nodes' execution role, the EKS add-on's role.
    obs = files["Observability.json"]
    if variant.startswith("slurm"):
        grant = files["IAM.json"]["Resources"]["ExecutionRoleRemoteWrite"]
        assert grant["Condition"] == observability.HAS_WORKSPACE
        assert grant["Properties"]["Roles"] == [{"Ref": "ExecutionRole"}]
        assert grant["Properties"]["PolicyDocument"]["Statement"] == [
            {
                "Sid": "PrometheusRemoteWrite",
                "Effect": "Allow",
                "Action": ["aps:RemoteWrite"],
                "Resource": WORKSPACE_PARAM,
            }
        ]
    else:
        role = obs["Resources"]["AddonRole"]["Properties"]
        assert role["Policies"][0]["PolicyDocument"]["Statement"][0]["Resource"] == WORKSPACE_GETATT


@settings(max_examples=60, deadline=None)
@given(
    variant=st.sampled_from(["slurm-gpu", "eks-gpu"]),
    resource=st.one_of(
        st.just("*"),
        st.text(alphabet="arn:aws-ps0123456789/*w", min_size=1, max_size=40),
        st.just({"Fn::Sub": "arn:${AWS::Partition}:aps:${AWS::Region}:${AWS::AccountId}:workspace/*"}),
        st.just([WORKSPACE_GETATT, "*"]),
    ),
    action=st.sampled_from(["aps:RemoteWrite", "aps:*", "APS:RemoteWrite", "*", "aps:QueryMetrics"]),
)
def test_checker_catches_every_widened_twin(rendered, variant, resource, action):
    """Broken twins: the real grant made wider (another resource), or a new statement with an aps action."""
    files = copy.deepcopy(rendered[(variant, "small")])
    if variant.startswith("slurm"):
        t = files["IAM.json"]
        stmt = t["Resources"]["ExecutionRoleRemoteWrite"]["Properties"]["PolicyDocument"]["Statement"][0]
    else:
        t = files["Observability.json"]
        stmt = t["Resources"]["AddonRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][0]
    stmt["Action"] = [action]
    stmt["Resource"] = resource
    assert aps_widenings(t), (action, resource)


def test_rule_groups_namespace_holds_hpqs_rules_file(rendered):
    obs = rendered[("slurm-gpu", "small")]["Observability.json"]
    ns = obs["Resources"]["AlertRules"]
    assert ns["Type"] == "AWS::APS::RuleGroupsNamespace"
    props = ns["Properties"]
    assert props["Workspace"] == WORKSPACE_GETATT
    assert 1 <= len(props["Name"]) <= 64 and re.fullmatch(r"[0-9A-Za-z][-.0-9A-Z_a-z]*", props["Name"])
    text = (observability.ALERTS_FILE).read_text(encoding="utf-8")
    assert props["Data"] == text
    groups = yaml.safe_load(props["Data"])["groups"]
    alerts = {r["alert"] for g in groups for r in g["rules"]}
    assert {"HpqGpuXidError", "HpqGpuUncorrectableEcc", "HpqEfaErrorSpike", "HpqNodeSilent"} <= alerts


def test_eks_addon_is_configured_as_awss_module_does(rendered):
    files = rendered[("eks-gpu", "small")]
    addon = files["Observability.json"]["Resources"]["ObservabilityAddon"]["Properties"]
    assert addon["AddonName"] == "amazon-sagemaker-hyperpod-observability"
    assert (
        addon["PodIdentityAssociations"][0]["ServiceAccount"]
        == "hyperpod-observability-operator-otel-collector"
    )
    config = json.loads(addon["ConfigurationValues"]["Fn::Sub"])
    assert config["ampWorkspace"] == {
        "prometheusEndpoint": "${PrometheusWorkspace.PrometheusEndpoint}",
        "arn": "${PrometheusWorkspace.Arn}",
    }
    assert {v["scrapeInterval"] for v in config["metricsProvider"].values()} == {30}
    assert set(config["metricsProvider"]) == {
        "trainingMetrics",
        "inferenceMetrics",
        "taskGovernanceMetrics",
        "scalingMetrics",
        "customMetrics",
        "nodeMetrics",
        "acceleratedComputeMetrics",
        "networkMetrics",
    }
    trust = files["Observability.json"]["Resources"]["AddonRole"]["Properties"]["AssumeRolePolicyDocument"]
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Statement"][0]["Condition"]["StringEquals"]["aws:SourceArn"] == {"Ref": "EksClusterArn"}
    # created after the HyperPod cluster (AWS's module depends_on module.hyperpod_cluster)
    stack = files["root.json"]["Resources"]["ObservabilityStack"]
    assert stack["Properties"]["Parameters"]["HyperPodClusterArn"] == {
        "Fn::GetAtt": ["HyperPodStack", "Outputs.ClusterArn"]
    }


def test_slurm_root_wires_workspace_into_iam_and_the_node_config(rendered):
    files = rendered[("slurm-gpu", "small")]
    res = files["root.json"]["Resources"]
    iam_param = res["IAMStack"]["Properties"]["Parameters"][observability.WORKSPACE_ID_PARAM]
    assert iam_param == {
        "Fn::If": [
            root.HAS_OBSERVABILITY,
            {"Fn::GetAtt": ["ObservabilityStack", f"Outputs.{observability.OUT_WORKSPACE_ID}"]},
            "",
        ]
    }
    url = res["S3Stack"]["Properties"]["Parameters"]["PrometheusRemoteWriteUrl"]
    assert url["Fn::If"][1] == {
        "Fn::GetAtt": ["ObservabilityStack", f"Outputs.{observability.OUT_REMOTE_WRITE_URL}"]
    }
    config = json.dumps(files["S3.json"])
    assert '\\"prometheus_remote_write_url\\":\\"${PrometheusRemoteWriteUrl}\\"' in config
    outputs = files["root.json"]["Outputs"]
    for name, _ in root.OBSERVABILITY_OUTPUTS:
        assert outputs[name]["Condition"] == root.HAS_OBSERVABILITY


# A real endpoint's shape: AMP user guide's remote-write example and CloudFormation's PrometheusEndpoint
# (``https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-a1b2c3d4-.../``).
REAL_URL = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f/api/v1/remote_write"


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),
        (REAL_URL, True),
        (REAL_URL.replace("us-west-2.amazonaws.com", "cn-north-1.amazonaws.com.cn"), True),
        (REAL_URL.replace("https://", "http://"), False),
        (REAL_URL.replace("/api/v1/remote_write", "/api/v1/query"), False),
        ("https://evil.example.com/workspaces/ws-1/api/v1/remote_write", False),
    ],
)
def test_remote_write_url_pattern(value, ok):
    assert bool(re.fullmatch(s3.REMOTE_WRITE_URL_PATTERN, value)) is ok


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),
        ("ws-1f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f", True),
        ("ws-*", False),
        ("*", False),
        ("ws-1/../*", False),
    ],
)
def test_workspace_id_pattern(value, ok):
    """A pattern that refuses '*' and '/': the ARN the grant builds from the ID names one workspace."""
    assert bool(re.fullmatch(observability.WORKSPACE_ID_PATTERN, value)) is ok
