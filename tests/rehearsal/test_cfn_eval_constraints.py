"""The rehearsal's CloudFormation evaluator refuses parameter values CloudFormation refuses.

CloudFormation checks each parameter value against the template's constraints when it creates or updates a stack,
a nested stack with the values its parent hands it (User Guide, "Parameters":
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/parameters-section-structure.html: AllowedPattern
matches the entire value, and each value of a CommaDelimitedList; AllowedValues; MinLength/MaxLength of a String;
MinValue/MaxValue of a Number). rehearsal/cfn_eval.StackScope does the same, so a value one stack hands another in
a shape the receiving template refuses fails in the rehearsal instead of on AWS.

The last tests evaluate the REAL root, Observability, S3 ... templates with resources whose Ref and GetAtt
return what AWS's registry schemas say (tests/resource_schemas.py: Ref is the primaryIdentifier), in the shapes
AWS documents, each checked against that property's pattern in the schema.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from hpq import vocab
from hpq.cfn import synth
from hpq.rehearsal import cfn_eval
from tests import resource_schemas
from tests.cfn_render import RENDER_DATE

REGION, ACCOUNT = "us-west-2", "123456789012"
PSEUDO = {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com",
          "AWS::StackName": "hpq-test", "AWS::NotificationARNs": [],
          "AWS::StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/hpq-test/1a2b3c4d-0000-1111-2222-333344445555"}


def _scope(parameters: dict[str, Any], declared: dict[str, dict], name: str = "IAM.json") -> cfn_eval.StackScope:
    return cfn_eval.StackScope(name, {"Parameters": declared, "Resources": {}}, parameters, PSEUDO,
                               ref=lambda lg: lg, getatt=lambda lg, attr: f"{lg}.{attr}")


WS_ID = {"Type": "String", "Default": "", "AllowedPattern": r"^$|^ws-[a-zA-Z0-9-]+$",
         "ConstraintDescription": "an AMP workspace ID, or empty."}
SPECS = {
    "Pattern": WS_ID,
    "Values": {"Type": "String", "AllowedValues": ["true", "false"]},
    "Short": {"Type": "String", "MinLength": 3},
    "Long": {"Type": "String", "MaxLength": 5},
    "Count": {"Type": "Number", "MinValue": 1, "MaxValue": 256},
    "Cidrs": {"Type": "CommaDelimitedList", "AllowedPattern": r"^[0-9.]+/[0-9]+$"},
    "Threads": {"Type": "Number", "AllowedValues": [1, 2]},
}
GOOD = {"Pattern": "ws-1f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f", "Values": "true", "Short": "abc", "Long": "abcde",
        "Count": "256", "Cidrs": "10.0.0.0/16, 192.168.0.0/24", "Threads": 2}


def test_values_within_every_constraint_pass():
    sc = _scope(GOOD, SPECS)
    assert sc.parameters["Cidrs"] == ["10.0.0.0/16", "192.168.0.0/24"] and sc.parameters["Count"] == "256"
    assert _scope({"Pattern": ""}, {"Pattern": WS_ID}).parameters["Pattern"] == ""  # observability off


@pytest.mark.parametrize(("key", "value", "message"), [
    ("Pattern", "arn:aws:aps:us-west-2:123456789012:workspace/ws-1f9e8d7c",
     r"Parameter 'Pattern' must match pattern \^\$\|\^ws-"),
    ("Pattern", "ws-1 ", r"must match pattern"),  # the whole value, not a prefix
    ("Values", "True", r"Parameter 'Values' must be one of AllowedValues"),
    ("Short", "ab", r"Parameter 'Short' must contain at least 3 characters"),
    ("Long", "abcdef", r"Parameter 'Long' must contain at most 5 characters"),
    ("Count", "0", r"Parameter 'Count' must be a number not less than 1"),
    ("Count", "257", r"Parameter 'Count' must be a number not greater than 256"),
    ("Count", "two", r"Parameter 'Count' must be a number"),
    ("Cidrs", "10.0.0.0/16,10.1.0.0", r"Parameter 'Cidrs' must match pattern"),  # each element
    ("Threads", "3", r"Parameter 'Threads' must be one of AllowedValues"),
])
def test_each_constraint_refuses_with_stack_parameter_value_and_constraint(key, value, message):
    with pytest.raises(cfn_eval.EvalError) as exc:
        _scope({**GOOD, key: value}, SPECS)
    text = str(exc.value)
    shown = repr([v.strip() for v in value.split(",")]) if key == "Cidrs" else repr(value)
    assert text.startswith("IAM.json: ") and re.search(message, text) and f"value {shown}" in text, text


def test_the_constraint_description_is_said_and_undeclared_parameters_refused():
    with pytest.raises(cfn_eval.EvalError, match=r"\(an AMP workspace ID, or empty\.\)"):
        _scope({"Pattern": "arn:aws:aps:x"}, {"Pattern": WS_ID})
    with pytest.raises(cfn_eval.EvalError, match=r"Parameters: \[Extra\] do not exist in the template"):
        _scope({"Pattern": "", "Extra": "1"}, {"Pattern": WS_ID})


# ---------------------------------------------------------------------------- the real templates

WS = "ws-1f9e8d7c-6b5a-4c3d-2e1f-0a9b8c7d6e5f"
# What Ref/GetAtt return, (type, property) -> value, in the shapes AWS documents: the AMP workspace ID and ARN as
# AMP's API shows them (WorkspaceDescription: arn:aws:aps:<region>:123456789012:workspace/ws-...), its endpoint as
# CloudFormation's PrometheusEndpoint ("https://aps-workspaces.<region>.amazonaws.com/workspaces/ws-.../"), EC2 and
# FSx IDs as their APIs print them, FSx's DNS name <fs-id>.fsx.<region>.amazonaws.com and 8-character mount name.
# Each value is checked against its property's pattern in the registry schema (test_the_shapes_are_aws_shapes).
SHAPES: dict[tuple[str, str], str] = {
    ("AWS::APS::Workspace", "WorkspaceId"): WS,
    ("AWS::APS::Workspace", "Arn"): f"arn:aws:aps:{REGION}:{ACCOUNT}:workspace/{WS}",
    ("AWS::APS::Workspace", "PrometheusEndpoint"): f"https://aps-workspaces.{REGION}.amazonaws.com/workspaces/{WS}/",
    ("AWS::EC2::VPC", "VpcId"): "vpc-0a1b2c3d4e5f60718",
    ("AWS::EC2::Subnet", "SubnetId"): "subnet-0a1b2c3d4e5f60718",
    ("AWS::EC2::SecurityGroup", "Id"): "sg-0a1b2c3d4e5f60718",
    ("AWS::EC2::SecurityGroup", "GroupId"): "sg-0a1b2c3d4e5f60718",
    ("AWS::FSx::FileSystem", "Id"): "fs-0a1b2c3d4e5f60718",
    ("AWS::FSx::FileSystem", "DNSName"): f"fs-0a1b2c3d4e5f60718.fsx.{REGION}.amazonaws.com",
    ("AWS::FSx::FileSystem", "LustreMountName"): "abcdef12",
    ("AWS::S3::Bucket", "BucketName"): "hpq-test-s3stack-lifecyclebucket-1a2b3c4d5e6f",
    ("AWS::IAM::Role", "Arn"): f"arn:aws:iam::{ACCOUNT}:role/hpq-test-IAMStack-ExecutionRole-1A2B3C4D5E6F",
    ("AWS::SageMaker::Cluster", "ClusterArn"): f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdefabcdef",
    ("AWS::EKS::Cluster", "Name"): "hpq-eks-gpu",
    ("AWS::EKS::Cluster", "Arn"): f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/hpq-eks-gpu",
}
# Custom resources have no registry schema: Ref is the PhysicalResourceId their handler answers
# (cfn/handlers/helm.py physical_id: cluster/namespace/release).
CUSTOM_REFS = {"Custom::HyperPodHelmChart": "hpq-eks-gpu/kube-system/dependencies"}


class RegistryDeploy:
    """Scopes of a rendered variant whose resources answer Ref/GetAtt per the registry schemas (SHAPES)."""

    def __init__(self, files: dict[str, dict], root_params: dict[str, str]):
        self.files = files
        self.root_params = root_params
        self.scopes: dict[str, cfn_eval.StackScope] = {}

    def _nested_file(self, logical: str) -> str:
        url = json.dumps(self.files["root.json"]["Resources"][logical]["Properties"]["TemplateURL"])
        return next(name for name in self.files if f"/{name}" in url)

    def scope(self, fname: str) -> cfn_eval.StackScope:
        if fname not in self.scopes:
            if fname == "root.json":
                params = dict(self.root_params)
            else:
                root = self.scope("root.json")
                logical = next(lg for lg, r in root.template["Resources"].items()
                               if r["Type"] == "AWS::CloudFormation::Stack" and self._nested_file(lg) == fname)
                params = root.evaluate(root.template["Resources"][logical]["Properties"]["Parameters"])
            self.scopes[fname] = cfn_eval.StackScope(
                fname, self.files[fname], params, PSEUDO, ref=lambda lg, f=fname: self.ref(f, lg),
                getatt=lambda lg, attr, f=fname: self.getatt(f, lg, attr))
        return self.scopes[fname]

    def _type(self, fname: str, logical: str) -> str:
        return self.files[fname]["Resources"][logical]["Type"]

    def ref(self, fname: str, logical: str) -> str:
        rtype = self._type(fname, logical)
        if resource_schemas.schema(rtype) is None:
            return CUSTOM_REFS[rtype]
        return SHAPES[(rtype, resource_schemas.ref_property(rtype))]  # type: ignore[index]

    def getatt(self, fname: str, logical: str, attr: str) -> Any:
        rtype = self._type(fname, logical)
        if rtype == "AWS::CloudFormation::Stack":
            nested = self._nested_file(logical)
            return self.scope(nested).evaluate(self.files[nested]["Outputs"][attr[len("Outputs."):]]["Value"])
        return SHAPES[(rtype, attr)]


ROOT_PARAMS = {"TemplateBaseUrl": "https://hpq-assets.s3.us-west-2.amazonaws.com/hpq/templates/slurm-gpu",
               "AssetsBucket": "hpq-assets", "AvailabilityZoneId": "usw2-az1", "EnableObservability": "true"}


@pytest.fixture(scope="module")
def slurm_files() -> dict[str, dict]:
    return synth.synthesize("slurm-gpu", "small", as_of=RENDER_DATE)


def test_the_shapes_are_aws_shapes():
    """Every stand-in value matches its property's pattern and lengths in AWS's registry schema (where given)."""
    for (rtype, prop), value in SHAPES.items():
        spec = resource_schemas.property_spec(rtype, prop)
        if "pattern" in spec:
            assert re.search(spec["pattern"], value), (rtype, prop, value, spec["pattern"])
        assert spec.get("minLength", 0) <= len(value) <= spec.get("maxLength", 10**6), (rtype, prop, value)
    assert resource_schemas.ref_property("AWS::APS::Workspace") == "Arn"  # what the old output handed on


def test_the_real_iam_stack_takes_the_workspace_id_with_observability_on(slurm_files):
    deploy = RegistryDeploy(slurm_files, ROOT_PARAMS)
    iam = deploy.scope("IAM.json")
    assert iam.parameters["PrometheusWorkspaceId"] == WS
    assert iam.condition("HasPrometheusWorkspace")
    # ... and the nodes' grant names the workspace's ARN, built from the ID as AMP's ARN format has it
    grant = iam.evaluate(iam.template["Resources"]["ExecutionRoleRemoteWrite"]["Properties"]["PolicyDocument"])
    assert grant["Statement"][0]["Resource"] == SHAPES[("AWS::APS::Workspace", "Arn")]


@pytest.mark.parametrize("variant", vocab.VARIANTS)
def test_every_real_nested_stack_takes_what_the_root_hands_it(variant):
    """All optional stacks on: each nested stack of the variant is created (its parameters checked) from what the
    root evaluates for it, through the other stacks' outputs."""
    files = synth.synthesize(variant, "small", as_of=RENDER_DATE)
    params = {**ROOT_PARAMS, "EnableValidation": "true", "NotificationEmail": "ops@example.com"}
    if variant.startswith("eks"):
        params["EksAvailabilityZoneId"] = "usw2-az2"
    deploy = RegistryDeploy(files, params)
    for fname in files:
        deploy.scope(fname)
    assert len(deploy.scopes) == len(files) >= 8


def test_the_real_iam_stack_with_observability_off_takes_the_empty_id(slurm_files):
    iam = RegistryDeploy(slurm_files, {**ROOT_PARAMS, "EnableObservability": "false"}).scope("IAM.json")
    assert iam.parameters["PrometheusWorkspaceId"] == "" and not iam.condition("HasPrometheusWorkspace")


def test_broken_twin_the_old_ref_fails_the_iam_stack(slurm_files):
    """The old ``Ref(PrometheusWorkspace)`` output hands the IAM stack the workspace ARN: CloudFormation would
    refuse the nested stack; the evaluator does too, naming stack, parameter, value and pattern."""
    files = copy.deepcopy(slurm_files)
    files["Observability.json"]["Outputs"]["PrometheusWorkspaceId"]["Value"] = {"Ref": "PrometheusWorkspace"}
    with pytest.raises(cfn_eval.EvalError) as exc:
        RegistryDeploy(files, ROOT_PARAMS).scope("IAM.json")
    text = str(exc.value)
    assert text.startswith("IAM.json: Parameter 'PrometheusWorkspaceId' must match pattern ^$|^ws-"), text
    assert repr(SHAPES[("AWS::APS::Workspace", "Arn")]) in text, text
