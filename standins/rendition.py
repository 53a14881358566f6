"""The moto rendition of the templates: what a moto server's CloudFormation can create.

moto's CloudFormation only stubs FSx, EKS and SageMaker::Cluster (a GetAtt on them is HTTP 500),
drops nested stacks' ``Outputs.X``, has no ``Fn::Cidr`` and cannot run Lambda-backed custom
resources. ``hpq deploy --emulate moto`` (and ``hpq rehearse``, which always says so) sends moto a
transformed COPY of the templates; it is never chosen implicitly, and the real templates
(``hpq synth``) never change. ``endpoint_is_moto`` only lets ``hpq deploy`` say why a plain deploy
against moto is about to fail.
"""

from __future__ import annotations

import http.client
import os
import urllib.request

# Resource types moto's CloudFormation only stubs (GetAtt -> HTTP 500) or cannot run (Lambda-backed
# custom resources need Docker). The moto transform swaps them for SSM parameters in a COPY.
MOTO_STUB_ONLY = ("AWS::FSx::", "AWS::SageMaker::Cluster", "AWS::EKS::", "Custom::", "AWS::Lambda::Function",
                  "AWS::Lambda::LayerVersion", "AWS::APS::", "AWS::Grafana::")


RENDITION_NOTE = ("--emulate moto: deploying the moto rendition of the templates (FSx, EKS, SageMaker::Cluster, "
                  "Lambda and custom resources become SSM parameter stand-ins; nested outputs become literals). "
                  "The real templates are unchanged: see `hpq synth`.")


def is_stub_only(rtype: str) -> bool:
    """Whether the moto rendition swaps this resource type for a stand-in (the rehearsal realizes those itself)."""
    return any(rtype == t or (t.endswith("::") and rtype.startswith(t)) for t in MOTO_STUB_ONLY)


def _replace_getatts(node, replaced: set[str], nested: set[str]):
    """GetAtt on a swapped resource or a nested stack's Outputs.X -> a literal placeholder."""
    if isinstance(node, dict):
        if set(node) == {"Fn::GetAtt"}:
            target = node["Fn::GetAtt"]
            logical, attr = (target if isinstance(target, list) else target.split(".", 1))
            if logical in replaced or logical in nested:
                return f"moto-{logical}-{attr}"
        return {k: _replace_getatts(v, replaced, nested) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_getatts(v, replaced, nested) for v in node]
    return node


def _expand_cidr(node, defaults: dict[str, str]):
    """moto has no Fn::Cidr: compute it here from the parameter's default (the root's 10.0.0.0/16)."""
    import ipaddress

    if isinstance(node, dict):
        if set(node) == {"Fn::Cidr"}:
            block, count, bits = node["Fn::Cidr"]
            if isinstance(block, dict) and "Ref" in block:
                block = defaults.get(block["Ref"], "10.0.0.0/16")
            net = ipaddress.ip_network(block)
            return [str(n) for n in list(net.subnets(new_prefix=net.max_prefixlen - int(bits)))[: int(count)]]
        return {k: _expand_cidr(v, defaults) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand_cidr(v, defaults) for v in node]
    return node


def moto_compatible(variant: str, templates: dict) -> dict:
    """Transform a COPY of the synthesized templates for moto's CloudFormation gaps.

    Stub-only resource types become AWS::SSM::Parameter placeholders, and GetAtt on them or on a
    nested stack's outputs becomes a literal; Fn::Cidr (unknown to moto) is computed from the
    parameter default; KMS keys lose their tags (moto reads them in the KMS API's shape); conditional
    resources (the optional stacks, off by default) are left out because moto cannot update a stack
    that skipped them. Everything else (VPC, subnets, NAT, endpoints, SG
    rules, IAM, S3 bucket + policy, SNS, nested-stack wiring, parameters, conditions) is deployed
    by moto as written. The swapped types are covered elsewhere: cfn-lint on the real templates,
    SageMaker create_cluster directly against moto, handlers as Python.
    """
    out = {}
    for fname, tmpl in templates.items():
        resources = tmpl.get("Resources", {})
        replaced = {k for k, r in resources.items() if is_stub_only(r["Type"])}
        nested = {k for k, r in resources.items() if r["Type"] == "AWS::CloudFormation::Stack"}
        defaults = {k: p["Default"] for k, p in tmpl.get("Parameters", {}).items() if "Default" in p}
        new = _expand_cidr(_replace_getatts(tmpl, replaced, nested), defaults)
        for logical in replaced:
            old = new["Resources"][logical]
            swapped = {"Type": "AWS::SSM::Parameter",
                       "Properties": {"Type": "String", "Value": f"stand-in for {old['Type']}",
                                      "Name": {"Fn::Sub": f"/moto-stand-in/${{AWS::StackName}}/{logical}"}}}
            for key in ("Condition", "DependsOn"):
                if key in old:
                    swapped[key] = old[key]
            new["Resources"][logical] = swapped
        # moto's AWS::KMS::Key reads Tags in the KMS API's shape (TagKey/TagValue) and fails on CloudFormation's
        # Key/Value, which the real service takes: the copy leaves the keys' tags out.
        for res in new["Resources"].values():
            if res["Type"] == "AWS::KMS::Key":
                res.get("Properties", {}).pop("Tags", None)
        # moto crashes updating a stack whose conditional (skipped) nested stack it never created, so
        # the optional stacks (Observability, Validation: off by default) are left out of the copy.
        for logical in [k for k, r in new["Resources"].items() if "Condition" in r]:
            del new["Resources"][logical]
        out[fname] = new
    return out


def endpoint_is_moto(endpoint_url: str | None = None, timeout: float = 2.0) -> bool:
    """Whether the configured endpoint is a moto server (its dashboard lives at ``/moto-api/``)."""
    url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    if not url:
        return False
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/moto-api/", timeout=timeout) as resp:
            body = resp.read(200_000).decode("utf-8", "replace").lower()
            return resp.status == 200 and "moto" in body
    except (OSError, ValueError, http.client.HTTPException):
        return False
