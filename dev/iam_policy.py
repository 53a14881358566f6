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

Second part: hpq deploys without a CloudFormation service role, so CloudFormation creates every resource of
every nested stack with the deployer's own credentials ("By default, CloudFormation uses a temporary session
that it generates from your user credentials for stack operations":
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-iam-servicerole.html). For every
resource type of every template hpq synthesizes (all variants x sizes; the optional stacks are always in the
templates, switched by CloudFormation conditions, so every one is counted), the permissions its resource
handlers need (``handlers.{create,update,delete,read}.permissions`` of the type's registry schema, as
cfn-lint ships them: https://docs.aws.amazon.com/cloudformation-cli/latest/userguide/resource-type-schema.html)
go into docs/iam-policy-resources-N.json, split to stay under IAM's 6,144-character managed-policy limit
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html, white space not counted).
docs/iam-resource-types.json says, per type, where its actions came from (or why none).

    python dev/iam_policy.py            # rewrite docs/iam-policy.json and the files beside it
    python dev/iam_policy.py --check    # exit 1 when any of them is stale
"""

from __future__ import annotations

import ast
import datetime
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGE = DOCS / "iam-policy.json"
TYPES_PAGE = DOCS / "iam-resource-types.json"
RESOURCE_PAGES = "iam-policy-resources-*.json"
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


def _posts_signed(tree: ast.AST) -> bool:
    """True where the module POSTs through aws/amp.py's signed requests (``amp.send(..., method="POST")`` or
    ``signed_headers(..., method="POST")``): a Prometheus remote write to AMP (aws/remote_write.py), which needs
    aps:RemoteWrite."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "signed_headers", "send"):
            if any(k.arg == "method" and isinstance(k.value, ast.Constant) and k.value.value == "POST"
                   for k in node.keywords):
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
        if _posts_signed(tree):  # aws/remote_write.py: EKS results to the workspace (AMP remote write API)
            found.setdefault("aps:RemoteWrite", set()).add(path)
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


# --- Part two: what CloudFormation does with the deployer's credentials ---------------------------------

# The registry handlers CloudFormation calls for a stack's create, update and delete; read is called during
# each of them (to wait for stabilization and to return attributes). "list" is not used by stack operations.
HANDLERS = ("create", "update", "delete", "read")
# One region's type -> schema map: every type hpq uses is in it (the generator refuses a type that is not).
SCHEMA_REGION = "us-east-1"
# Managed-policy size limit; IAM does not count white space
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html).
POLICY_LIMIT = 6144
# The date the EKS templates are rendered for: fixed, so the files do not change as days pass (the resource
# types do not depend on it; tests/cfn_render.py uses the same one).
RENDER_DATE = datetime.date(2026, 11, 26)
CUSTOM_REASON = (
    "custom resource: no registry handler; CloudFormation sends the request to the ServiceToken Lambda, which "
    "runs with its own execution role (https://docs.aws.amazon.com/lambda/latest/dg/services-cloudformation.html). "
    "The invocation itself is made in the stack operation's session, which without a service role is built "
    "from the deployer's credentials (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/"
    "using-iam-servicerole.html), so lambda:InvokeFunction is granted")
CUSTOM_ACTIONS = ("lambda:InvokeFunction",)
# Types whose registry schema has no handlers (non-provider, "legacy" types CloudFormation implements
# itself): listed with why, and with the actions of their service's API the resource maps to (botocore's
# FSx operations; Service Authorization Reference list_amazonfsx.html), tested to be real operations.
NO_HANDLERS = {
    "AWS::FSx::FileSystem": (
        "its registry schema has no handlers section (not a registry provider type); the actions are the FSx "
        "API calls that create, describe, update, tag and delete a file system, plus the service-linked role "
        "FSx creates on first use (https://docs.aws.amazon.com/fsx/latest/LustreGuide/"
        "using-service-linked-roles.html)",
        ("fsx:CreateFileSystem", "fsx:DescribeFileSystems", "fsx:UpdateFileSystem", "fsx:DeleteFileSystem",
         "fsx:TagResource", "fsx:UntagResource", "fsx:ListTagsForResource", "iam:CreateServiceLinkedRole")),
}


# An IAM action: service prefix, colon, action name of letters and digits
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_grammar.html). A schema entry of another
# shape (AWS::Logs::LogGroup lists "s3:REST.PUT.OBJECT", an S3 log-delivery operation, not an IAM action) is
# recorded as dropped in docs/iam-resource-types.json, never put into a policy.
ACTION = re.compile(r"^[a-z0-9-]+:[A-Za-z0-9]+$")


class UnknownResourceType(ValueError):
    """A template declares a type that has no schema in cfn-lint's registry copy and no stated reason."""


def _schemas() -> Path:
    import cfnlint

    return Path(cfnlint.__file__).parent / "data" / "schemas"


def synthesized_templates() -> dict[str, dict]:
    """"variant/size/file" -> template dict, for every variant x size hpq synthesizes."""
    from hpq import vocab
    from hpq.cfn import synth

    return {f"{v}/{s}/{name}": t for v in vocab.VARIANTS for s in vocab.SIZES
            for name, t in synth.synthesize(v, s, as_of=RENDER_DATE).items()}


def resource_types(templates: dict[str, dict]) -> dict[str, list[str]]:
    """Resource type -> the templates ("variant/size/file") declaring it."""
    out: dict[str, set[str]] = {}
    for where, tmpl in templates.items():
        for res in (tmpl.get("Resources") or {}).values():
            out.setdefault(res["Type"], set()).add(where)
    return {t: sorted(w) for t, w in sorted(out.items())}


def is_custom(rtype: str) -> bool:
    return rtype.startswith("Custom::") or rtype == "AWS::CloudFormation::CustomResource"


def type_permissions(types: Iterable[str]) -> dict[str, dict]:
    """Type -> {"schema": file, "handlers": {handler: [actions]}} or {"no_handlers": why, "actions": [...]}.

    Raises UnknownResourceType (one line naming the type) for a type with neither a schema nor a reason."""
    root = _schemas()
    providers = json.loads((root / "providers" / f"{SCHEMA_REGION}.json").read_text(encoding="utf-8"))
    out: dict[str, dict] = {}
    for rtype in sorted(types):
        if is_custom(rtype):
            out[rtype] = {"no_handlers": CUSTOM_REASON, "actions": list(CUSTOM_ACTIONS)}
            continue
        if rtype in NO_HANDLERS:
            why, actions = NO_HANDLERS[rtype]
            out[rtype] = {"no_handlers": why, "actions": sorted(actions)}
            continue
        digest = providers.get(rtype)
        if not isinstance(digest, str):
            raise UnknownResourceType(
                f"resource type {rtype} has no CloudFormation registry schema in cfn-lint's "
                f"providers/{SCHEMA_REGION}.json; cannot derive its IAM actions")
        schema = json.loads((root / "resources" / f"{digest}.json").read_text(encoding="utf-8"))
        handlers = schema.get("handlers") or {}
        if not handlers:
            raise UnknownResourceType(
                f"resource type {rtype}: its registry schema has no handlers; add it to NO_HANDLERS with why")
        listed = {h: set(handlers[h].get("permissions", [])) for h in HANDLERS if h in handlers}
        entry: dict = {"schema": f"{digest}.json",
                       "handlers": {h: sorted(a for a in acts if ACTION.match(a)) for h, acts in listed.items()}}
        dropped = sorted({a for acts in listed.values() for a in acts if not ACTION.match(a)})
        if dropped:
            entry["dropped_not_iam_actions"] = dropped
        out[rtype] = entry
    return out


def resource_actions(perms: dict[str, dict]) -> list[str]:
    """Every action any type needs, sorted."""
    found: set[str] = set()
    for entry in perms.values():
        found |= set(entry.get("actions", []))
        for actions in entry.get("handlers", {}).values():
            found |= set(actions)
    return sorted(found)


def policy_size(policy: dict) -> int:
    """Characters IAM counts against the managed-policy limit (white space is not counted)."""
    return len(json.dumps(policy, separators=(",", ":")))


def _policy(sid: str, actions: list[str]) -> dict:
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": "*"}]}


def split_policies(actions: list[str], sid: str = "CloudFormationCreatesResources") -> list[dict]:
    """Policies of at most POLICY_LIMIT characters each, filled in order (services stay together)."""
    pages: list[list[str]] = [[]]
    for action in actions:
        if pages[-1] and policy_size(_policy(f"{sid}{len(pages)}", pages[-1] + [action])) > POLICY_LIMIT:
            pages.append([])
        pages[-1].append(action)
    return [_policy(f"{sid}{i}", page) for i, page in enumerate(pages, 1) if page]


def _text(obj: dict) -> str:
    return json.dumps(obj, indent=2) + "\n"


def render_all(templates: dict[str, dict] | None = None) -> dict[str, str]:
    """docs file name -> text: the direct-call policy, the resource policies and the per-type record."""
    templates = synthesized_templates() if templates is None else templates
    direct = sorted(actions_in(code_sources()))
    types = resource_types(templates)
    perms = type_permissions(types)
    out = {PAGE.name: _text(_policy("HpqApiCalls", direct))}
    for i, policy in enumerate(split_policies(resource_actions(perms)), 1):
        out[RESOURCE_PAGES.replace("*", str(i))] = _text(policy)
    record = {"source": "cfn-lint data/schemas (registry schemas), providers/" + SCHEMA_REGION + ".json",
              "handlers": list(HANDLERS),
              "types": {t: {**perms[t], "templates": len(types[t])} for t in perms}}
    out[TYPES_PAGE.name] = _text(record)
    return out


def render() -> str:
    """docs/iam-policy.json alone (hpq's direct calls)."""
    return _text(_policy("HpqApiCalls", sorted(actions_in(code_sources()))))


def main(argv: list[str]) -> int:
    try:
        files = render_all()
    except UnknownResourceType as err:
        print(f"iam_policy: {err}", file=sys.stderr)
        return 2
    stale = {p.name for p in DOCS.glob(RESOURCE_PAGES)} - set(files)
    if "--check" in argv:
        same = all((DOCS / n).is_file() and (DOCS / n).read_text(encoding="utf-8") == t for n, t in files.items())
        return 0 if same and not stale else 1
    for name, text in files.items():
        (DOCS / name).write_text(text, encoding="utf-8")
    for name in stale:
        (DOCS / name).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
