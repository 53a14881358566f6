"""Every Ref and GetAtt hands on the shape its receiver's name says: an ``...Id`` never gets an ARN, an ``...Arn``
always gets one.

What ``Ref`` returns comes from AWS's CloudFormation resource provider schema of the referenced type, as cfn-lint
ships it (tests/resource_schemas.py: ``primaryIdentifier``). The class this closes: ``PrometheusWorkspaceId`` was
``Ref`` of an AWS::APS::Workspace, whose primaryIdentifier is ``/properties/Arn``, so the IAM stack's parameter of
that name (AllowedPattern ``^$|^ws-[a-zA-Z0-9-]+$``) got an ARN and a real deploy with observability on would have
failed parameter validation.

Receivers checked, in every template of every variant x size: each Output, each nested stack's Parameters, and each
resource property (the nearest property name; plural names such as ``SubnetIds`` for list items). Values checked:
a bare ``Ref`` to a resource of the same template, a ``Fn::GetAtt`` (its attribute name), either under ``Fn::If``,
and a nested stack's ``Outputs.X`` followed into that stack's template to the Ref/GetAtt behind it. Types without
a registry schema (custom resources) are skipped and counted.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests import resource_schemas
from tests.cfn_render import COMBOS

ID_NAME = re.compile(r"(Id|ID)s?$")
ARN_NAME = re.compile(r"(Arn|ARN)s?$")
ARN_VALUE = re.compile(r"(Arn|ARN)$")


@dataclass(frozen=True)
class Leaf:
    """One value a receiver may get: the resource's type and the property of it that is handed on."""

    file: str
    logical: str
    rtype: str
    prop: str | None  # None: the type has no registry schema (or a compound identifier)
    how: str  # "Ref" or "GetAtt"


@dataclass
class Tally:
    checked: Counter = field(default_factory=Counter)  # receiver kind -> values checked
    skipped: Counter = field(default_factory=Counter)  # resource type without a registry schema -> values skipped
    seen: set = field(default_factory=set)  # (file, kind, receiver name) checked
    problems: list[str] = field(default_factory=list)


def _nested_file(files: dict[str, dict], logical: str) -> str | None:
    res = files["root.json"]["Resources"].get(logical, {})
    if res.get("Type") != "AWS::CloudFormation::Stack":
        return None
    url = json.dumps(res["Properties"]["TemplateURL"])
    found = [name for name in files if f"/{name}" in url]
    return found[0] if len(found) == 1 else None


def leaves(files: dict[str, dict], fname: str, value: Any) -> Iterator[Leaf]:
    """The resource values ``value`` passes on unchanged (through Fn::If, list items and nested stack outputs)."""
    resources = files[fname].get("Resources") or {}
    if isinstance(value, list):
        for item in value:
            yield from leaves(files, fname, item)
        return
    if not isinstance(value, dict) or len(value) != 1:
        return
    (fn, arg), = value.items()
    if fn == "Ref" and arg in resources:
        rtype = resources[arg]["Type"]
        yield Leaf(fname, arg, rtype, resource_schemas.ref_property(rtype), "Ref")
    elif fn == "Fn::GetAtt":
        logical, attr = arg if isinstance(arg, list) else arg.split(".", 1)
        rtype = resources[logical]["Type"]
        if rtype == "AWS::CloudFormation::Stack" and attr.startswith("Outputs."):
            nested = _nested_file(files, logical)
            assert nested is not None, f"{fname}: {logical} is built from no rendered template"
            yield from leaves(files, nested, files[nested]["Outputs"][attr[len("Outputs."):]]["Value"])
        else:
            has_schema = resource_schemas.schema(rtype) is not None
            yield Leaf(fname, logical, rtype, attr.split(".")[-1] if has_schema else None, "GetAtt")
    elif fn == "Fn::If":
        yield from leaves(files, fname, arg[1:])


def _receiver_spec(rtype: str, path: list[str]) -> dict[str, Any] | None:
    """The receiving resource's schema for the property at ``path`` (list positions as ``[]``), through $ref."""
    root = resource_schemas.schema(rtype)
    spec: Any = root
    for key in path:
        while isinstance(spec, dict) and "$ref" in spec:
            spec = root["definitions"][spec["$ref"].rsplit("/", 1)[-1]]  # type: ignore[index]
        if not isinstance(spec, dict):
            return None
        spec = spec.get("items") if key == "[]" else (spec.get("properties") or {}).get(key)
    while isinstance(spec, dict) and "$ref" in spec:
        spec = root["definitions"][spec["$ref"].rsplit("/", 1)[-1]]  # type: ignore[index]
    return spec if isinstance(spec, dict) else None


def _wants_arn(name: str, spec: dict[str, Any] | None) -> tuple[bool, bool] | None:
    """(takes an ARN, takes something else) for a receiver, or None when neither its schema nor its name says.

    A property's own registry schema decides where it says: cfn-lint's ``format`` annotations such as
    ``AWS::KMS::Key.Arn`` (AWS::Logs::LogGroup KmsKeyId takes a key ARN despite its name) or a pattern that
    starts with ``arn:``; otherwise the receiver's name: ``...Id`` takes no ARN, ``...Arn`` only one."""
    specs = [spec or {}, (spec or {}).get("items") or {}]
    specs += [alt for s in list(specs) for alt in (s.get("anyOf") or []) + (s.get("oneOf") or [])]
    formats = [s["format"] for s in specs if str(s.get("format", "")).startswith("AWS::")]
    if formats:
        return any(f.endswith("Arn") for f in formats), any(not f.endswith("Arn") for f in formats)
    if any(re.match(r"^\^?\(?arn:", str(s.get("pattern", ""))) for s in specs):
        return True, False
    if ID_NAME.search(name):
        return False, True
    if ARN_NAME.search(name):
        return True, False
    return None


def _check(files: dict[str, dict], fname: str, kind: str, name: str, value: Any, tally: Tally, label: str,
           spec: dict[str, Any] | None = None) -> None:
    wants = _wants_arn(name, spec)
    for leaf in leaves(files, fname, value):
        if leaf.prop is None:
            tally.skipped[leaf.rtype] += 1
            continue
        tally.checked[kind] += 1
        tally.seen.add((fname, kind, name))
        what = (f"{leaf.how} {leaf.logical} ({leaf.rtype} in {leaf.file}), which is its {leaf.prop}"
                + (" (the type's primaryIdentifier in AWS's registry schema, cfn-lint's copy)"
                   if leaf.how == "Ref" else ""))
        if wants is None:
            continue
        takes_arn, takes_other = wants
        gives_arn = bool(ARN_VALUE.search(leaf.prop))
        if gives_arn and not takes_arn:
            tally.problems.append(f"{label} {fname} {kind} {name} takes no ARN (an ID/name) but gets {what}")
        if not gives_arn and not takes_other:
            tally.problems.append(f"{label} {fname} {kind} {name} takes an ARN but gets {what}")


def _walk_properties(files: dict[str, dict], fname: str, rtype: str, node: Any, path: list[str], tally: Tally,
                     label: str) -> None:
    """Each property with the value under it, at every depth of a resource's Properties."""
    if isinstance(node, list):
        for item in node:
            _walk_properties(files, fname, rtype, item, path + ["[]"], tally, label)
        return
    if not isinstance(node, dict):
        return
    if len(node) == 1 and next(iter(node)) == "Fn::If":
        for branch in next(iter(node.values()))[1:]:
            _walk_properties(files, fname, rtype, branch, path, tally, label)
        return
    if len(node) == 1 and (next(iter(node)).startswith("Fn::") or next(iter(node)) == "Ref"):
        return  # an intrinsic's arguments are not properties
    for key, value in node.items():
        spec = _receiver_spec(rtype, path + [key]) if resource_schemas.schema(rtype) else None
        _check(files, fname, "property", key, value, tally, label, spec)
        _walk_properties(files, fname, rtype, value, path + [key], tally, label)


def shape_check(files: dict[str, dict], label: str = "") -> Tally:
    """Every receiver of one rendered variant (file name -> template), checked."""
    tally = Tally()
    for fname, template in sorted(files.items()):
        for name, spec in (template.get("Outputs") or {}).items():
            _check(files, fname, "output", name, spec["Value"], tally, label)
        for logical, res in (template.get("Resources") or {}).items():
            props = res.get("Properties") or {}
            if res["Type"] == "AWS::CloudFormation::Stack":
                for name, value in (props.get("Parameters") or {}).items():
                    _check(files, fname, f"{logical} parameter", name, value, tally, label)
                props = {k: v for k, v in props.items() if k != "Parameters"}
            _walk_properties(files, fname, res["Type"], props, [], tally, label)
    return tally


def test_every_ref_and_getatt_gives_the_shape_its_receiver_is_named_for(rendered):
    total = Tally()
    for variant, size in COMBOS:
        tally = shape_check(rendered[(variant, size)], f"{variant}/{size}")
        total.problems += tally.problems
        total.checked.update(tally.checked)
        total.skipped.update(tally.skipped)
        if variant.startswith("slurm"):  # the chain that was broken is among what is checked
            assert ("root.json", "IAMStack parameter", "PrometheusWorkspaceId") in tally.seen
        assert ("Observability.json", "output", "PrometheusWorkspaceId") in tally.seen
    assert not total.problems, "\n".join(total.problems)
    # Floors well under today's counts (12 renders: 378 output values, 186 nested-stack parameter values, 858
    # property values), so a walker that stops finding values fails here instead of passing on nothing.
    stack_params = sum(n for kind, n in total.checked.items() if kind.endswith(" parameter"))
    assert total.checked["output"] >= 250 and stack_params >= 120 and total.checked["property"] >= 500, total.checked
    # Only types without a registry schema are skipped (today the Helm chart's custom resource), and few.
    assert all(resource_schemas.schema(t) is None for t in total.skipped), total.skipped
    assert sum(total.skipped.values()) < sum(total.checked.values()) // 20, total.skipped


@pytest.mark.parametrize("variant", ["slurm-gpu", "eks-gpu"])
def test_broken_twin_the_workspace_ref_is_refused(rendered, variant):
    """The old ``Ref(PrometheusWorkspace)`` put back: the output, and on Slurm the IAM stack's parameter fed from
    it, are named IDs and get the workspace ARN."""
    files = copy.deepcopy(rendered[(variant, "small")])
    files["Observability.json"]["Outputs"]["PrometheusWorkspaceId"]["Value"] = {"Ref": "PrometheusWorkspace"}
    problems = shape_check(files, variant).problems
    assert any("Observability.json output PrometheusWorkspaceId takes no ARN (an ID/name) but gets Ref PrometheusWorkspace"
               in p and "its Arn" in p for p in problems), problems
    in_root = [p for p in problems if "root.json IAMStack parameter PrometheusWorkspaceId" in p]
    assert bool(in_root) is variant.startswith("slurm"), problems


def test_broken_twins_of_the_other_shapes_are_refused(rendered):
    """An ``...Arn`` output given a Ref that returns a name, and an ``...Id`` given GetAtt Arn."""
    files = copy.deepcopy(rendered[("slurm-gpu", "small")])
    outputs = files["Observability.json"]["Outputs"]
    outputs["PrometheusWorkspaceArn"]["Value"] = {"Ref": "GrafanaRole"}  # AWS::IAM::Role: RoleName
    outputs["PrometheusWorkspaceId"]["Value"] = {"Fn::GetAtt": ["PrometheusWorkspace", "Arn"]}
    problems = shape_check(files).problems
    assert any("output PrometheusWorkspaceArn takes an ARN but gets Ref GrafanaRole" in p
               and "its RoleName" in p for p in problems), problems
    assert any("output PrometheusWorkspaceId takes no ARN (an ID/name) but gets GetAtt PrometheusWorkspace" in p
               for p in problems), problems
    healthy = shape_check(rendered[("slurm-gpu", "small")]).problems
    assert healthy == []
