"""Package a release (templates + node bundle) into the bucket, then create or update the root stack.

The pieces are functions so tests drive them directly; ``hpq deploy``/``hpq publish`` only parse
options and print. ``transform`` lets a test adapt a *copy* of the synthesized templates to an
emulator's gaps without the real templates ever changing.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpq import __version__, vocab
from hpq.aws import deploy_plan, layer, preflight, stacks, training_plan
from hpq.aws.s3 import Upload, check_bucket, content_hash, object_url, upload_objects
from hpq.aws.session import aws_errors, client, region_of
from hpq.cfn import synth
from hpq.cfn.synth import to_json
from hpq.errors import UsageError
from hpq.lifecycle import names
from hpq.lifecycle.bundle import node_bundle_files

Templates = dict[str, dict[str, Any]]
Transform = Callable[[str, Templates], Templates]

P_TEMPLATE_BASE_URL = "TemplateBaseUrl"
P_ASSETS_BUCKET = "AssetsBucket"
P_ASSETS_PREFIX = "AssetsPrefix"
P_CLUSTER_NAME = "ClusterName"
P_HELM_LAYER_KEY = "HelmLayerS3Key"
P_KUBECTL_LAYER_ARN = "KubectlLayerArn"
LAUNCH_BUTTON = "https://s3.amazonaws.com/cloudformation-examples/cloudformation-launch-stack.png"


def check_variant(variant: str) -> str:
    if variant not in vocab.VARIANTS:
        raise UsageError(f"unknown variant {variant!r}; choose one of: {', '.join(vocab.VARIANTS)}")
    return variant


def check_size(size: str) -> str:
    if size not in vocab.SIZES:
        raise UsageError(f"unknown size {size!r}; choose one of: {', '.join(vocab.SIZES)}")
    return size


def synthesize(variant: str, size: str, params: dict[str, str] | None = None) -> Templates:
    """The real templates; ``params`` are validated by synth (one-line UsageErrors) and become Defaults."""
    return synth.synthesize(variant, size=size, params=params or None)


def template_json(template: dict[str, Any]) -> str:
    return to_json(template)


@dataclass
class Release:
    """One uploaded, content-addressed release in a bucket."""

    bucket: str
    region: str
    version: str
    variants: list[str]
    objects: dict[str, bytes]
    templates: dict[str, Templates]
    upload: Upload | None = None
    totals: dict[str, int] = field(default_factory=dict)
    helm_layer_key: str | None = None  # where the helm/kubectl layer zip lies (EKS variants)

    def template_url(self, variant: str, stack_file: str = names.ROOT_TEMPLATE) -> str:
        return object_url(self.bucket, self.region, names.template_key(self.version, variant, stack_file))

    def base_url(self, variant: str) -> str:
        return self.template_url(variant, "x").rsplit("/", 1)[0]

    @property
    def assets_prefix(self) -> str:
        return names.node_bundle_prefix(self.version)

    def root_parameters(self, variant: str) -> dict[str, str]:
        """Where the root stack finds its nested templates, the node bundle and (EKS) the helm layer."""
        out = {
            P_TEMPLATE_BASE_URL: self.base_url(variant),
            P_ASSETS_BUCKET: self.bucket,
            P_ASSETS_PREFIX: self.assets_prefix,
        }
        if self.helm_layer_key and is_eks(variant):
            out[P_HELM_LAYER_KEY] = self.helm_layer_key
        return out


def is_eks(variant: str) -> bool:
    from hpq.cfn.variants import VARIANTS

    return VARIANTS[variant].eks


def node_bundle_objects() -> dict[str, bytes]:
    return {key: Path(src).read_bytes() for key, src in sorted(node_bundle_files().items())}


def build_release(bucket: str, region: str, variants: list[str], size: str = "small",
                  transform: Transform | None = None, params: dict[str, str] | None = None) -> Release:
    """Synthesize, hash and lay out every object; no AWS calls."""
    templates: dict[str, Templates] = {}
    files: dict[str, bytes] = {}
    for variant in variants:
        rendered = synthesize(variant, size, params)
        if transform:
            rendered = transform(variant, json.loads(json.dumps(rendered)))
        templates[variant] = rendered
        for fname, body in rendered.items():
            files[f"templates/{variant}/{fname}"] = template_json(body).encode()
    bundle = node_bundle_objects()
    files.update({f"node/{k}": v for k, v in bundle.items()})
    version = f"{__version__}-{content_hash(files)}"
    objects: dict[str, bytes] = {}
    for variant, rendered in templates.items():
        for fname in rendered:
            objects[names.template_key(version, variant, fname)] = files[f"templates/{variant}/{fname}"]
    for key, body in bundle.items():
        objects[names.node_bundle_prefix(version) + key] = body
    layer_key = None
    if any(is_eks(v) for v in variants) and not (params or {}).get(P_KUBECTL_LAYER_ARN):
        # Content-addressed by its own digest, outside the release prefix: uploaded once, not per release.
        shipped = layer.helm_layer()
        objects[shipped.key] = shipped.body
        layer_key = shipped.key
    totals = {v: sum(len(t.get("Resources", {})) for t in r.values()) for v, r in templates.items()}
    return Release(bucket, region, version, list(variants), objects, templates, totals=totals,
                   helm_layer_key=layer_key)


def upload_release(s3: Any, release: Release, on_progress: Any = None, put: bool = True) -> Release:
    release.upload = upload_objects(s3, release.bucket, release.objects, on_progress, put=put)
    return release


AZ_PARAMS = ("AvailabilityZoneId", "EksAvailabilityZoneId")


def default_zone_ids(ec2: Any, how_many: int, exclude: tuple[str, ...] = ()) -> list[str]:
    """The region's first available AZ ids (sorted, so the choice is stable), less ``exclude``."""
    with aws_errors("ec2:DescribeAvailabilityZones"):
        zones = ec2.describe_availability_zones(
            Filters=[{"Name": "state", "Values": ["available"]}, {"Name": "zone-type", "Values": ["availability-zone"]}]
        )["AvailabilityZones"]
    ids = sorted(z["ZoneId"] for z in zones if z.get("ZoneId") and z["ZoneId"] not in exclude)
    if len(ids) < how_many:
        raise UsageError(f"the region has {len(ids)} available AZ(s); pass --param AvailabilityZoneId=... explicitly")
    return ids[:how_many]


def quick_create_url(release: Release, variant: str, stack_name: str | None = None) -> str:
    """Console Launch Stack link with the release locations pre-filled (param_ fields)."""
    console = "console.amazonaws.cn" if release.region.startswith("cn-") else "console.aws.amazon.com"
    query = [("templateURL", release.template_url(variant)), ("stackName", stack_name or f"hpq-{variant}")]
    query += [(f"param_{k}", v) for k, v in release.root_parameters(variant).items()]
    fragment = "/stacks/quickcreate?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    return f"https://{console}/cloudformation/home?region={release.region}#{fragment}"


def markdown_table(release: Release) -> str:
    rows = ["| Variant | Launch | Template |", "|---|---|---|"]
    for variant in release.variants:
        url = quick_create_url(release, variant)
        rows.append(f"| `{variant}` | [![Launch Stack]({LAUNCH_BUTTON})]({url}) | {release.template_url(variant)} |")
    return "\n".join(rows)


@dataclass
class Deployment:
    stack_name: str
    variant: str
    release: Release
    submit: stacks.SubmitResult
    parameters: dict[str, str]
    plan: Any = None  # deploy_plan.ParameterPlan: every parameter, old -> new, and the rule that chose it
    existing: stacks.StackInfo | None = None


def user_values(root: dict[str, Any], user: dict[str, str]) -> dict[str, str]:
    """The user's ``--param``s as synth normalized them (it stored each as the parameter's Default)."""
    declared = root.get("Parameters", {}) or {}
    return {k: str(declared[k]["Default"]) if "Default" in declared.get(k, {}) else v for k, v in user.items()}


def plan_parameters(session: Any, variant: str, root: dict[str, Any], name: str, existing: Any,
                    user: dict[str, str], size: str | None, on_note: Callable[[str], None] | None = None,
                    ) -> tuple[Any, Any]:
    """Every root parameter's value for this deploy and the rule that chose it (aws/deploy_plan.py), less
    the release locations (known once the release is built); plus the described training plan, if any."""
    declared: dict[str, Any] = root.get("Parameters", {}) or {}
    unknown = sorted(set(user) - set(declared))
    if unknown:
        raise UsageError(f"unknown parameter(s) {', '.join(unknown)} for {variant}; known: {', '.join(sorted(declared))}")
    current = existing.parameters if existing is not None else None
    plan = deploy_plan.parameter_plan(declared, current, user_values(root, user), size)
    if existing is None and P_CLUSTER_NAME in declared and P_CLUSTER_NAME not in user:
        if not names.valid_hyperpod_name(name):  # never fall back silently to the template's default name
            raise UsageError(f"stack name {name!r} is also the HyperPod cluster name, which must be 1-63 "
                             "letters, digits and '-': shorten it or pass --param ClusterName=NAME")
        plan.set(P_CLUSTER_NAME, name, deploy_plan.RULE_STACK_NAME)
    values = plan.values
    if P_CLUSTER_NAME in values and not names.valid_hyperpod_name(values[P_CLUSTER_NAME]):
        raise UsageError(f"invalid cluster name {values[P_CLUSTER_NAME]!r}: letters, digits and '-', 1-63 chars")
    training = None
    if preflight.plan_arn_given(values):  # the workers' capacity is in the plan's AZ: the node subnet goes there
        training = training_plan.describe(client(session, "sagemaker"), client(session, "ec2"),
                                          values["TrainingPlanArn"].strip(), region_of(session))
    missing = [k for k in plan.missing(declared) if k not in deploy_plan.RELEASE_PARAMETERS]
    if missing:
        zone = training.default_zone(values.get("WorkerInstanceType", "")) if training else None
        preferred = {"AvailabilityZoneId": (zone, f"where training plan {training.name or training.arn} reserves "
                                                  "the workers")} if training and zone else None
        chosen = choose_zones(client(session, "ec2"), variant, {k: values[k] for k in AZ_PARAMS if k in values},
                              missing, on_note, preferred)
        for key, zone_id in chosen.items():
            plan.set(key, zone_id, deploy_plan.RULE_CHOSEN)
        rest = [k for k in missing if k not in chosen]
        if rest:
            raise UsageError(f"missing parameter(s) for {variant}: " + ", ".join(f"--param {k}=..." for k in rest))
    return plan, training


def choose_zones(ec2: Any, variant: str, taken_params: dict[str, str], missing: list[str],
                 on_note: Callable[[str], None] | None = None,
                 preferred: dict[str, tuple[str, str]] | None = None) -> dict[str, str]:
    """AZ ids for the AZ parameters in ``missing``: ``preferred`` ones first, else the region's first, distinct."""
    out: dict[str, str] = {}
    for key, (zone, why) in (preferred or {}).items():
        if key in missing:
            out[key] = zone
            if on_note:
                on_note(f"{key} not given: using {zone}, {why}")
    azs = [k for k in AZ_PARAMS if k in missing and k not in out]
    if azs:
        taken = set(taken_params.values()) | set(out.values())
        exclude: tuple[str, ...] = ()
        if is_eks(variant):  # both subnets are EKS control-plane subnets
            from hpq.cfn.networking import EKS_UNSUPPORTED_AZ_IDS

            exclude = EKS_UNSUPPORTED_AZ_IDS
        choices = [z for z in default_zone_ids(ec2, len(azs) + len(taken), exclude) if z not in taken]
        for key, zone in zip(azs, choices, strict=False):
            out[key] = zone
            if on_note:
                on_note(f"{key} not given: using {zone} (choose with --param {key}=<zone id>, e.g. where your "
                        "instance capacity is)")
    return out


def build_planned_release(bucket: str, region: str, variant: str, size: str | None, values: dict[str, str],
                          existing: Any, transform: Transform | None) -> Release:
    """The release with the planned values as its templates' Defaults, so the same inputs give the same release
    (a redeploy changes nothing) and the uploaded templates show what the stack runs with."""
    baked = {k: v for k, v in values.items() if k not in deploy_plan.RELEASE_PARAMETERS}
    try:
        return build_release(bucket, region, [variant], size or deploy_plan.size_of(values) or "small", transform,
                             baked)
    except UsageError as exc:
        if existing is None:
            raise
        # The user's values passed synth already: the stack's current ones are what this release refuses.
        raise UsageError(f"the stack's current parameters do not fit this release: {exc}; pass --param KEY=VALUE "
                         "to choose a value it accepts") from None


def deploy_stack(session: Any, variant: str, bucket: str, stack_name: str | None = None, size: str | None = None,
                 user_params: dict[str, str] | None = None, transform: Transform | None = None,
                 on_changes: Any = None, on_progress: Any = None, on_note: Any = None, on_plan: Any = None,
                 dry_run: bool = False, confirm: Any = None, quotas: bool = True) -> Deployment:
    """Plan every parameter, check, upload, then create the stack or execute exactly the change set shown.

    ``size`` None: a new stack gets small, an update keeps the stack's sizes. ``on_plan(plan, existing)`` sees the
    parameter plan before anything is uploaded; ``on_changes(actions)`` the change set's resource actions;
    ``confirm(actions)`` may raise to refuse them. ``dry_run`` stops after the plan: no stack, no change set,
    and the objects this run uploaded (only an update's change set needs them) are removed again.
    """
    check_variant(variant)
    if size is not None:
        check_size(size)
    name = stack_name or f"hpq-{variant}"
    region = region_of(session)
    s3 = client(session, "s3")
    cfn = client(session, "cloudformation")
    check_bucket(s3, bucket, region)
    existing = stacks.exists(cfn, name)
    if existing is not None:
        stacks.check_updatable(existing)
    probe = synthesize(variant, size or "small", user_params)  # validates every --param (one-line errors)
    root = probe.get(names.ROOT_TEMPLATE, {})
    plan, training = plan_parameters(session, variant, root, name, existing, user_params or {}, size, on_note)
    values = plan.values
    # Before anything in AWS changes: the values the stack will get, checked against what AWS accepts.
    preflight.check(variant, region, values, on_note, plan=training, ec2=client(session, "ec2"))
    if quotas:
        preflight.check_quotas(session, variant, values, existing.parameters if existing else None, on_note)
    release = build_planned_release(bucket, region, variant, size, values, existing, transform)
    declared = release.templates[variant].get(names.ROOT_TEMPLATE, {}).get("Parameters", {}) or {}
    for key, value in release.root_parameters(variant).items():
        if key in declared or not declared:
            plan.set(key, value, deploy_plan.RULE_RELEASE)
    params = plan.values
    if on_plan:
        on_plan(plan, existing)
    tags = {names.MANAGED_BY_TAG_KEY: names.MANAGED_BY_TAG_VALUE, "hpq:variant": variant}
    if existing is not None and unchanged(existing, params):
        submit = stacks.SubmitResult("no-changes", existing.stack_id)
        # The stack is as asked, but its release must still be in the bucket (node replacement reads the lifecycle
        # scripts from there): put back what is missing, or on a dry run count it, so the counters are true.
        upload_release(s3, release, on_progress, put=not dry_run)
    elif existing is None and dry_run:
        submit = stacks.SubmitResult("dry-run", "")
    else:
        upload_release(s3, release, on_progress)
        # No per-release tag: stack tags propagate to every resource, so a changing tag would touch them all.
        if existing is None:
            submit = stacks.create_stack(cfn, name, release.template_url(variant), params, tags)
        else:
            try:
                submit = stacks.update_via_change_set(cfn, existing, release.template_url(variant), params, tags,
                                                      on_changes, dry_run=dry_run, confirm=confirm)
            finally:
                if dry_run:
                    remove_uploaded(s3, release)
    return Deployment(name, variant, release, submit, params, plan, existing)


def remove_uploaded(s3: Any, release: Release) -> None:
    """Take back what this run uploaded (a dry run's change set needed the templates): the exact versions it wrote,
    so a versioned bucket keeps no delete markers; objects that were there before stay."""
    up = release.upload
    if up is None:
        return
    for key in up.written:
        kw = {"VersionId": up.versions[key]} if up.versions.get(key) else {}
        try:
            s3.delete_object(Bucket=release.bucket, Key=key, **kw)
        except Exception:  # noqa: BLE001 - best effort: a left object is harmless (content-addressed)
            pass


def unchanged(existing: stacks.StackInfo, params: dict[str, str]) -> bool:
    """Same content hash (it is part of AssetsPrefix and TemplateBaseUrl) and same parameters: nothing to do.

    Decided here because a change set on a stack with nested stacks always lists them as Modify.
    """
    if stacks.is_failed(existing.status) or not stacks.is_terminal(existing.status):
        return False
    return all(existing.parameters.get(k) == v for k, v in params.items()) and set(existing.parameters) <= set(params)


def publish(session: Any, bucket: str, size: str = "small", variants: list[str] | None = None,
            transform: Transform | None = None, on_progress: Any = None) -> Release:
    """Upload every variant (one shared node bundle) for console Launch Stack links."""
    check_size(size)
    region = region_of(session)
    s3 = client(session, "s3")
    check_bucket(s3, bucket, region)
    release = build_release(bucket, region, list(variants or vocab.VARIANTS), size, transform)
    return upload_release(s3, release, on_progress)


def next_commands(variant: str, stack: str, outputs: dict[str, str], region: str,
                  parameters: dict[str, str] | None = None) -> list[str]:
    cluster = stacks.cluster_name_of(parameters or {}, outputs, stack) or stack
    cmds = []
    if vocab.orchestrator_of(variant) == vocab.SLURM:
        cmds += [f"hpq connect {cluster} --region {region}"]
    else:
        eks = outputs.get(names.OUT_EKS_CLUSTER_NAME) or "<EksClusterName>"
        cmds += [f"aws eks update-kubeconfig --name {eks} --region {region}"]
    # `hpq test` reads the orchestrator from the cluster, so one line serves Slurm and EKS (README, quickstart)
    cmds += [f"hpq test nccl {cluster} 2 --region {region}"]
    cmds += [f"hpq status {stack} --region {region}", f"hpq destroy {stack} --region {region}"]
    return cmds
