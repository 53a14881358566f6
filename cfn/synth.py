"""Synthesis: variant + size + parameter overrides -> deterministic template JSON files.

The public API other parts of hpq use (deploy, publish, tests):
``synthesize``, ``to_json``, ``write_variant`` (or ``write_files`` for templates already
synthesized), ``root_parameters``, ``stack_files``.
``--param K=V`` sets the Default of root parameter K after validating V against
the parameter's own constraints, so bad input fails here with one line, not
minutes later in CloudFormation.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any

from hpq.cfn import synth_out
from hpq.cfn.synth_out import MANIFEST_FILE  # noqa: F401 - where `hpq synth` records what it wrote
from hpq.errors import UsageError
from hpq.lifecycle import catalog

ROOT_FILE = "root.json"
INSTANCE_TYPE_PARAMS = ("WorkerInstanceType", "ControllerInstanceType", "LoginInstanceType")


def _resolve(variant: str, size: str):
    from hpq.cfn.variants import SIZES, VARIANTS

    if variant not in VARIANTS:
        raise UsageError(f"unknown variant {variant!r}; choose one of: {', '.join(VARIANTS)}")
    if size not in SIZES:
        raise UsageError(f"unknown size {size!r}; choose one of: {', '.join(SIZES)}")
    return VARIANTS[variant], SIZES[size]


def _check_instance_type(variant, key: str, value: str, allowed: list[str]) -> str:
    """Accept ``p5.48xlarge`` for ``ml.p5.48xlarge``; explain a type of the wrong kind."""
    try:
        entry = catalog.lookup(value)
    except catalog.UnknownInstanceType as exc:
        raise UsageError(f"{key}: {exc}; {variant.name} allows: {', '.join(allowed)}") from None
    if entry.name in allowed:
        return entry.name
    kind = "controller/login (CPU)" if key != "WorkerInstanceType" else variant.accelerator_label
    raise UsageError(f"{key}: {entry.name} is not a {kind} type for {variant.name}; "
                     f"allowed: {', '.join(allowed)}")


def _check_value(variant, key: str, value: str, spec: dict[str, Any]) -> str:
    if key in INSTANCE_TYPE_PARAMS:
        return _check_instance_type(variant, key, value, spec.get("AllowedValues", []))
    allowed = spec.get("AllowedValues")
    if allowed is not None and value not in allowed:
        raise UsageError(f"{key}={value!r} is not allowed; choose one of: {', '.join(map(str, allowed))}")
    pattern = spec.get("AllowedPattern")
    # CloudFormation applies a CommaDelimitedList's pattern to each of its values.
    items = [v.strip() for v in value.split(",")] if spec.get("Type") == "CommaDelimitedList" else [value]
    if pattern is not None and not all(re.fullmatch(pattern, item) for item in items):
        hint = spec.get("ConstraintDescription", f"must match {pattern}")
        raise UsageError(f"{key}={value!r} is invalid: {hint}")
    if spec.get("Type") == "Number":
        # Every Number parameter hpq has counts something (nodes, GiB, threads): plain ASCII digits only.
        # float() would also take '2.5', '1_0', ' 2', '+2' or non-ASCII digits and write them as the Default.
        if not re.fullmatch(r"-?[0-9]{1,12}", value):
            raise UsageError(f"{key}={value!r} is not a whole number (digits 0-9 only)")
        number = int(value)
        lo, hi = spec.get("MinValue"), spec.get("MaxValue")
        if (lo is not None and number < lo) or (hi is not None and number > hi):
            raise UsageError(f"{key}={value} is out of range [{lo}, {hi}]")
    for bound, test in (("MinLength", lambda n: len(value) < n), ("MaxLength", lambda n: len(value) > n)):
        if bound in spec and test(spec[bound]):
            raise UsageError(f"{key}={value!r} violates {bound} {spec[bound]}")
    return value


def synthesize(variant: str, size: str = "small", params: dict[str, str] | None = None,
               as_of: datetime.date | None = None) -> dict[str, dict]:
    """File name -> template dict: ``root.json`` plus ``<Stack>.json`` per nested stack of the variant.

    ``as_of`` is the date whose EKS calendar the EKS templates follow (default today; cfn/eks.py). A
    ``KubernetesVersion`` newer than HyperPod's documented list is rendered into AllowedValues only when
    ``params`` asks for it (``calendar_notes`` has the warning to show)."""
    v, s = _resolve(variant, size)
    from hpq.cfn import eks, root, variants

    eks_cfg = eks.EksConfig(as_of=as_of or datetime.date.today(),
                            extra_versions=tuple(str(x) for k, x in (params or {}).items() if k == "KubernetesVersion"))
    nested = variants.nested_templates(v, s, eks_cfg)
    root_t = root.build(v, s, nested)
    for key, value in (params or {}).items():
        if key not in root_t.parameters:
            raise UsageError(f"unknown parameter {key!r} for {variant}; valid: {', '.join(sorted(root_t.parameters))}")
        spec = root_t.parameters[key].to_dict()
        root_t.parameters[key].Default = _check_value(v, key, str(value), spec)
    files = {root.stack_file(name): tmpl.to_dict() for name, tmpl in nested.items()}
    files[ROOT_FILE] = root_t.to_dict()
    return dict(sorted(files.items()))


def calendar_notes(variant: str, params: dict[str, str] | None = None,
                   as_of: datetime.date | None = None) -> list[str]:
    """Warnings for rendered EKS templates: a version leaving standard support soon (republish after), or one
    newer than HyperPod documents asked for explicitly (cfn/eks.py)."""
    from hpq.cfn import eks
    from hpq.cfn.variants import VARIANTS

    if variant not in VARIANTS or not VARIANTS[variant].eks:
        return []
    day = as_of or datetime.date.today()
    asked = [str(x) for k, x in (params or {}).items() if k == "KubernetesVersion"]
    return eks.calendar_notes(day, sorted(set(eks.offered_versions(day)) | set(asked), key=eks.version_key))


def to_json(template: dict) -> str:
    """Deterministic JSON: sorted keys, two-space indent, trailing newline."""
    return json.dumps(template, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_variant(variant: str, out_dir: str | Path, size: str = "small",
                  params: dict[str, str] | None = None) -> list[Path]:
    """Write OUT/<variant>/<file>.json for the root and every nested stack; return the paths."""
    return write_files(synthesize(variant, size, params), Path(out_dir) / variant)


def write_files(files: dict[str, dict], target: str | Path, trust_existing: bool = False) -> list[Path]:
    """Write what ``synthesize`` returned into target (OUT/<variant>); return the paths.

    Through hpq.cfn.synth_out: atomic, all or nothing, and only over files an earlier synth wrote
    (``trust_existing`` for folders git tracks instead, such as the test goldens). A file a previous
    synth wrote that is no longer rendered is removed; unchanged files keep their modification times.
    """
    target = Path(target)
    data = {name: to_json(t).encode("utf-8") for name, t in files.items()}
    return synth_out.write_trees(target.parent, {target.name: data}, trust_existing=trust_existing)


def root_parameters(variant: str, size: str = "small") -> list[dict[str, Any]]:
    """The root stack's parameters as data: name plus its CloudFormation definition."""
    root_t = synthesize(variant, size)[ROOT_FILE]
    return [{"Name": name, **spec} for name, spec in root_t["Parameters"].items()]


def stack_files(variant: str) -> list[str]:
    """Nested template file names of a variant (what TemplateBaseUrl must hold besides root.json)."""
    v, _ = _resolve(variant, "small")
    from hpq.cfn import root, variants

    return [root.stack_file(name) for name in variants.stack_names(v)]


def parse_params(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["K=V", ...]`` -> dict; a pair without '=' is a usage error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--param expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out
