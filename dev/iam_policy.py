"""Write docs/iam-policy.json: the AWS API actions hpq itself calls, found in its code.

Every Python file of the packages that run on the user's machine (aws, cli, validation, kube) is
parsed; every service hpq makes a client for ("client(session, 'cloudformation')" or
".client('s3')") has each call anywhere whose name is one of its botocore operations (snake case)
counted as that operation's IAM action. The action names are botocore's operation names under the
service's IAM prefix, as the Service Authorization Reference lists them:
https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonsagemaker.html,
.../list_awscloudformation.html, .../list_amazonelastickubernetesservice.html,
.../list_amazonec2.html, .../list_amazonfsx.html, .../list_servicequotas.html,
.../list_awspricelist.html, .../list_amazons3.html (S3's actions differ from its operation names:
S3_ACTIONS below, from that page), .../list_awssecuritytokenservice.html.
tests/aws/test_iam_policy.py fails when the code calls an action the page lacks.

    python dev/iam_policy.py            # rewrite docs/iam-policy.json
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "iam-policy.json"
PACKAGES = ("aws", "cli", "validation", "kube")

# The Service Authorization Reference's IAM prefix of each botocore service hpq uses.
PREFIX = {"service-quotas": "servicequotas", "pricing": "pricing"}
# Services hpq reaches through the AWS CLI rather than a client of its own.
CLI_SERVICES = {"ssm"}
# S3 operations -> the IAM action that authorizes them (list_amazons3.html, "Actions defined by Amazon S3").
S3_ACTIONS = {
    "HeadBucket": "ListBucket", "HeadObject": "GetObject", "ListObjectsV2": "ListBucket",
    "ListObjects": "ListBucket", "ListObjectVersions": "ListBucketVersions", "DeleteObjects": "DeleteObject",
    "CopyObject": "PutObject", "UploadFile": "PutObject", "CreateMultipartUpload": "PutObject",
}
# boto3's managed S3 transfer: not botocore operations, but PutObject/GetObject underneath.
S3_TRANSFER = {"upload_file": "PutObject", "upload_fileobj": "PutObject", "download_file": "GetObject"}
# Calls no permission governs (sts:GetCallerIdentity needs none, per its API reference).
FREE = {"sts:GetCallerIdentity"}


def _services(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "client":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    out.add(arg.value)
    return out


def _is_client_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "client"


def _signs_for(tree: ast.AST, service: str) -> bool:
    """True where the module signs its own HTTP requests for ``service`` (``SigV4Auth(creds, "aps", region)``),
    which no botocore client call shows."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "SigV4Auth":
            if any(isinstance(a, ast.Constant) and a.value == service for a in node.args):
                return True
    return False


def client_names(trees: Iterable[ast.AST]) -> set[str]:
    """The names hpq gives its clients: assigned from, or passed as a keyword, a client(...) call."""
    out = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(_is_client_call(n) for n in ast.walk(node.value)):
                out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            if isinstance(node, ast.keyword) and node.arg and _is_client_call(node.value):
                out.add(node.arg)
    return out


def _called(tree: ast.AST, clients: set[str]) -> set[str]:
    """Operation names used on a client: ``sm.batch_reboot_cluster_nodes`` (passed around uncalled too),
    ``client(session, "eks").describe_cluster``, paginator names; not ``re.search`` or a Kubernetes client."""
    names = set()
    for node in ast.walk(tree):
        receiver = node.value if isinstance(node, ast.Attribute) else None
        if receiver is not None and (isinstance(receiver, ast.Name) and receiver.id in clients
                                     or isinstance(receiver, ast.Attribute) and receiver.attr in clients  # self.sq
                                     or _is_client_call(receiver)):
            names.add(node.attr)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get_paginator", "get_waiter") and node.args):
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
        if isinstance(node, ast.List) and [getattr(e, "value", None) for e in node.elts[:3]] == [
                "aws", "ssm", "start-session"]:
            names.add("ssm:start_session")  # hpq connect/remote run `aws ssm start-session`
    return names


def actions_in(sources: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """IAM action -> the files calling it, for (path, text) pairs."""
    import botocore.session
    from botocore import xform_name

    session = botocore.session.get_session()
    ops: dict[str, dict[str, str]] = {}
    found: dict[str, set[str]] = {}
    parsed = [(path, ast.parse(text)) for path, text in sources]
    # Clients are made in one module and used in another (aws/stacks.py gets `cfn`), so every call is
    # matched against every service hpq makes a client for; a name two services share counts for both.
    services = set().union(*(_services(t) for _, t in parsed)) & set(session.get_available_services())
    clients = client_names(t for _, t in parsed) | services  # a parameter named after its service: `sagemaker`
    for path, tree in parsed:
        called = _called(tree, clients)
        if "ssm:start_session" in called:
            found.setdefault("ssm:StartSession", set()).add(path)
        if _signs_for(tree, "aps"):  # aws/amp.py: PromQL over HTTP, SigV4 for aps (AMP query API: aps:QueryMetrics)
            found.setdefault("aps:QueryMetrics", set()).add(path)
        for svc in sorted(services - CLI_SERVICES):
            if svc not in ops:
                model = session.get_service_model(svc)
                ops[svc] = {xform_name(op): op for op in model.operation_names}
            prefix = PREFIX.get(svc, session.get_service_model(svc).signing_name or svc)
            hits = {ops[svc][c] for c in called if c in ops[svc]}
            if svc == "s3":
                hits = {S3_ACTIONS.get(h, h) for h in hits} | {S3_TRANSFER[c] for c in called if c in S3_TRANSFER}
            for op in hits:
                action = f"{prefix}:{op}"
                if action not in FREE:
                    found.setdefault(action, set()).add(path)
    return {a: sorted(p) for a, p in sorted(found.items())}


def code_sources() -> list[tuple[str, str]]:
    return [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))
            for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


def render() -> str:
    actions = sorted(actions_in(code_sources()))
    policy = {"Version": "2012-10-17", "Statement": [
        {"Sid": "HpqApiCalls", "Effect": "Allow", "Action": actions, "Resource": "*"},
    ]}
    return json.dumps(policy, indent=2) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        return 0 if PAGE.is_file() and PAGE.read_text(encoding="utf-8") == text else 1
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
