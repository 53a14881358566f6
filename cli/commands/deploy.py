"""``hpq deploy`` and ``hpq publish``: thin commands over hpq.aws.deploy."""

from __future__ import annotations

import click

import hpq.aws.deploy
from hpq import vocab
from hpq.aws import deploy_plan, estimate, pricing
from hpq.aws.session import client, make_session, region_of
from hpq.aws.stacks import describe
from hpq.cfn.synth import calendar_notes, parse_params
from hpq.cli import inputs, printing
from hpq.cli.common_options import aws_options, output_option
from hpq.errors import UsageError
from hpq.lifecycle import names
from hpq.standins import rendition


def release_counts(upload) -> str:  # type: ignore[no-untyped-def]
    """What happened to the release's objects, each counted from the bucket's answers (never a bare 0 for
    objects nobody looked at)."""
    if upload is None:
        return "objects not checked"
    text = f"{len(upload.written)} uploaded, {len(upload.skipped)} unchanged"
    if upload.missing:
        text += f", {len(upload.missing)} missing (dry run: not uploaded)"
    return text


def _upload_progress(console):  # type: ignore[no-untyped-def]
    def report(i: int, n: int, key: str, upload) -> None:  # type: ignore[no-untyped-def]
        if i == n or i % 10 == 0:  # what happened so far, not a count that reads as "uploaded" when nothing was
            console.print(f"checked {i}/{n} objects: {release_counts(upload)}", highlight=False)

    return report


def _print_plan(err, plan, existing, name: str, variant: str) -> None:  # type: ignore[no-untyped-def]
    changed = sum(r.changed for r in plan.rows)
    what = f"update stack {name}" if existing is not None else f"create stack {name}"
    err.print(f"plan: {what} ({variant}); {changed} of {len(plan.rows)} parameter(s) "
              f"{'change' if existing is not None else 'set'}", highlight=False, markup=False)
    err.print("  (rule: --param > --size > kept: the stack's current value > default; release: this release's "
              "locations" + ("; ~ marks a change)" if existing is not None else ")"), highlight=False, markup=False)
    for line in deploy_plan.format_parameters(plan, creating=existing is None):
        err.print("  " + line, highlight=False, markup=False)


# -t/-n, hpq's one spelling of instance type and node count (docs/cli.md), name these root parameters.
WORKER_OPTIONS = (("-t/--instance-type", "WorkerInstanceType"), ("-n/--nodes", "WorkerCount"))


def worker_params(params: tuple[str, ...], instance_type: str | None, nodes: int | None) -> tuple[str, ...]:
    """``params`` with -t/-n as the --param each stands for; giving both spellings of one is refused."""
    given = {pair.partition("=")[0] for pair in params}
    out = list(params)
    for (flag, key), value in zip(WORKER_OPTIONS, (instance_type, nodes), strict=True):
        if value is None:
            continue
        if key in given:
            raise UsageError(f"{flag} and --param {key}= set the same parameter; give one of them")
        out.append(f"{key}={value}")
    return tuple(out)


@click.command("deploy")
@click.argument("variant", metavar="VARIANT", type=inputs.VARIANT)
@click.argument("bucket", type=inputs.BUCKET)
@aws_options(services=inputs.SERVICES_DEPLOY)
@click.option("--stack-name", default=None, type=inputs.STACK_NAME,
              help="Root stack name (default: hpq-VARIANT; also the cluster name).")
@click.option("--size", default=None, type=inputs.SIZE,
              help=f"Size preset ({', '.join(vocab.SIZES)}): sets WorkerCount, FsxStorageCapacityGiB and "
                   "EbsVolumeSizeGB. A new stack without it is small; an update without it keeps the stack's values.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", type=inputs.KEY_VALUE,
              callback=inputs.unique_keys, help="Root stack parameter (repeatable, each KEY once); wins over --size.")
@click.option("-t", "--instance-type", "instance_type", default=None, type=inputs.ACCELERATED_TYPE,
              help="Worker instance type: the same as --param WorkerInstanceType=TYPE.")
@click.option("-n", "--nodes", "nodes", default=None, type=inputs.NODES,
              help="Worker count: the same as --param WorkerCount=N (wins over --size).")
@click.option("--dry-run", is_flag=True,
              help="Print the plan (every parameter old -> new, and for an update the change set's resource "
                   "actions) and stop: no stack, no change set and no uploaded object is left behind.")
@click.option("--yes", "-y", "assume_yes", is_flag=True,
              help="Do not ask: create the stack at the estimated cost, and allow an update that replaces or removes "
                   "the FSx file system, the HyperPod cluster or the EKS cluster. Without it both are asked on a "
                   "terminal and refused otherwise (exit 2).")
@click.option("--prices", "price_source", type=click.Choice(["auto", "api", "file"]), default="auto",
              show_default=True,
              help="Where the cost estimate's prices come from: the AWS Price List API (pricing:GetProducts), the "
                   "price file shipped with hpq, or the API with the file for what it cannot answer (auto). "
                   "See docs/cost.md.")
@click.option("--no-quota-check", is_flag=True,
              help="Skip the service-quota step of the pre-flight (what `hpq check-quotas` reads); the other checks "
                   "still run.")
@click.option("--no-wait", is_flag=True, help="Start the create/update and return without following it.")
@click.option("--poll-seconds", default=5.0, show_default=True, hidden=True, type=inputs.POLL_SECONDS)
@click.option("--emulate", type=click.Choice(["moto"]), default=None,
              help="Deploy the rendition of the templates an emulator can create (moto: FSx, EKS, "
                   "SageMaker::Cluster, Lambda and custom resources become SSM parameter stand-ins). "
                   "For a moto server at AWS_ENDPOINT_URL; never for real AWS.")
@output_option
def deploy(variant: str, bucket: str, region: str | None, profile: str | None, stack_name: str | None,
           size: str | None, params: tuple[str, ...], instance_type: str | None, nodes: int | None,
           dry_run: bool, assume_yes: bool, price_source: str,
           no_quota_check: bool, no_wait: bool, poll_seconds: float, emulate: str | None, output: str) -> None:
    """Package VARIANT into BUCKET, create or update its stack, follow it to the end.

    VARIANT is one of slurm-gpu, slurm-trn, eks-gpu, eks-trn. BUCKET must exist in the
    region; templates and the node bundle go under a versioned prefix (hpq/<version>-<hash>/).
    Pre-flight checks (instance offers, AZs, Kubernetes support, service quotas) run first.
    The plan comes next: every root parameter with its old and new value and the rule that
    chose it (--param, then --size, then the stack's current value, then the template
    default). An existing stack is updated by executing exactly the change set shown, whose
    resource actions (replacements called out) are printed first; replacing FSx, the
    HyperPod cluster or the EKS cluster needs --yes. See docs/updates.md.
    Beside the plan comes the cost estimate (per hour and per month, each line with its price,
    its source and date; docs/cost.md); creating a stack asks first (--yes for scripts; without
    a terminal and without --yes it refuses, exit 2).
    Ctrl-C stops following, not the stack. --emulate moto sends a moto server the rendition
    it can create (standins/rendition.py); the real templates (`hpq synth`) never change.

    \b
    Examples:
      hpq deploy slurm-gpu my-artifacts --region us-west-2
      hpq deploy slurm-gpu my-artifacts --size large --dry-run     # plan and cost only
      hpq deploy slurm-gpu my-artifacts --yes                      # no question (scripts, CI)
      hpq deploy eks-gpu my-artifacts --size medium -t ml.p5.48xlarge -n 4
      hpq deploy slurm-gpu my-artifacts --stack-name team-a --no-wait
      AWS_ENDPOINT_URL=http://127.0.0.1:5000 hpq deploy slurm-gpu my-artifacts --emulate moto
    """
    import sys

    from rich.console import Console

    # Bad input exits 2 before any credential lookup or network call: VARIANT, BUCKET and --size are checked by
    # their parameter types (hpq.cli.inputs), the rest here.
    params = worker_params(params, instance_type, nodes)
    inputs.check_cluster_name_for_stack(stack_name or f"hpq-{variant}", params)
    user_params = parse_params(params)
    templates = hpq.aws.deploy.synthesize(variant, size or "small", user_params)  # every --param checked here, before AWS
    if emulate == "moto" and not rendition.endpoint_is_moto():
        raise UsageError("--emulate moto needs AWS_ENDPOINT_URL pointing at a running moto server "
                         "(it deploys stand-ins that only make sense there)")
    session = make_session(region, profile)
    err = Console(stderr=True, soft_wrap=True)
    name = stack_name or f"hpq-{variant}"
    seen: dict = {}

    def show_plan(plan, existing):  # type: ignore[no-untyped-def]
        seen["plan"] = plan
        _print_plan(err, plan, existing, name, variant)
        est = estimate.estimate(variant, region_of(session), plan.values, templates,
                                pricing.prices(session, price_source))
        seen["cost"] = est
        for line in estimate.format_lines(est):
            err.print(line, highlight=False, markup=False)
        if existing is None and not dry_run:
            confirm_create(est)

    def confirm_create(est):  # type: ignore[no-untyped-def]
        if assume_yes:
            return
        least = "at least " if est.unpriced else ""
        cost = f"{least}{estimate.per_hour(est.hourly)}/h, {least}{estimate.money(est.monthly)}/month"
        if sys.stdin is not None and sys.stdin.isatty():
            if click.confirm(f"Create stack {name} ({cost})?", default=False, err=True):
                return
            raise UsageError(f"not created: stack {name} (nothing was uploaded or created)")
        raise UsageError(f"refusing to create stack {name} ({cost}) without confirmation: standard input is not a "
                         "terminal; pass --yes to create it (--dry-run shows the plan and the cost only)")

    def show_changes(actions):  # type: ignore[no-untyped-def]
        seen["actions"] = actions
        repl = sum(a.replaces for a in actions)
        err.print(f"change set: {len(actions)} resource change(s), {repl} replacement(s)", highlight=False)
        for line in deploy_plan.format_actions(actions):
            err.print(line, highlight=False, markup=False)
        if deploy_plan.guarded(actions):
            err.print(f"needs --yes: this update {deploy_plan.describe_guarded(actions)}", highlight=False,
                      markup=False)

    def confirm(actions):  # type: ignore[no-untyped-def]
        if not deploy_plan.guarded(actions) or assume_yes:
            return
        what = deploy_plan.describe_guarded(actions)
        if sys.stdin is not None and sys.stdin.isatty():
            if click.confirm(f"This update {what}. Execute the change set?", default=False, err=True):
                return
            raise UsageError(f"not executed: the update {what}; the change set was deleted")
        raise UsageError(f"refused: this update {what}; pass --yes to allow it (--dry-run shows the plan only)")

    transform = None
    if emulate == "moto":

        def transform(name, templates):  # type: ignore[no-untyped-def]
            # Said only once the bucket checks passed, so errors before it stay one line.
            if not seen.get("noted"):
                err.print(rendition.RENDITION_NOTE, highlight=False)
                seen["noted"] = True
            return rendition.moto_compatible(name, templates)

    elif rendition.endpoint_is_moto():

        def transform(name, templates):  # type: ignore[no-untyped-def]
            # The real templates, unchanged; only a note on why moto is likely to fail them.
            err.print("note: the endpoint answers as a moto server, which cannot create FSx, EKS, SageMaker::Cluster "
                      "or custom resources; deploying the real templates anyway (add --emulate moto for the "
                      "rendition moto can create)", highlight=False)
            return templates

    dep = hpq.aws.deploy.deploy_stack(session, variant, bucket, stack_name, size, user_params, transform=transform,
                                  on_changes=show_changes, on_progress=_upload_progress(err),
                                  on_note=lambda msg: err.print(msg, highlight=False, markup=False),
                                  on_plan=show_plan, dry_run=dry_run, confirm=confirm, quotas=not no_quota_check)
    rel = dep.release
    up = rel.upload
    plan_json = {"parameters": [r.as_dict() for r in dep.plan.rows] if dep.plan else [],
                 "changes": [a.as_dict() for a in dep.submit.changes]}
    result = {"stack": dep.stack_name, "stack_id": dep.submit.stack_id, "action": dep.submit.kind,
              "version": rel.version, "template_url": rel.template_url(variant), "plan": plan_json,
              "cost": seen["cost"].as_dict() if "cost" in seen else None}
    if dep.submit.kind == "dry-run":
        if dep.existing is None:
            err.print(f"resources: would create {rel.totals.get(variant, 0)} resources in "
                      f"{len(rel.templates[variant])} templates (`hpq synth {variant}` writes them)", highlight=False)
        err.print("dry run: nothing created or changed" + (" (the change set was deleted, and the objects this run "
                  "uploaded for it were removed)" if dep.existing is not None else ""), highlight=False)
        if output == "json":
            printing.echo_json(result)
        return
    err.print(f"release {rel.version}: {release_counts(up)}, s3://{bucket}/{names.s3_version_prefix(rel.version)}/",
              highlight=False)
    cfn = client(session, "cloudformation")
    reg = region_of(session)
    if dep.submit.kind == "no-changes":
        err.print(f"no changes: stack {dep.stack_name} is up to date", highlight=False)
    elif no_wait:
        err.print(f"{dep.submit.kind} started; follow with: hpq status {dep.stack_name} --follow --region {reg}",
                  highlight=False)
        if output == "json":
            printing.echo_json(result)
        return
    if dep.submit.kind == "no-changes":
        info = describe(cfn, dep.submit.stack_id)
    else:
        info = printing.follow_and_explain(cfn, dep.submit.stack_id, dep.stack_name, dep.submit.kind,
                                           dep.submit.started, rel.totals.get(variant), poll_seconds)
    nxt = hpq.aws.deploy.next_commands(variant, dep.stack_name, info.outputs, reg, info.parameters)
    if output == "json":
        printing.echo_json({**result, "status": info.status, "outputs": info.outputs, "next": nxt})
        return
    click.echo(f"stack {dep.stack_name}: {info.status}")
    printing.print_outputs(info.outputs)
    click.echo("next:")
    for cmd in nxt:
        click.echo(f"  {cmd}")


@click.command("publish")
@click.argument("bucket", type=inputs.BUCKET)
@aws_options(services=inputs.SERVICES_PUBLISH)
@click.option("--size", default="small", show_default=True, type=inputs.SIZE, help=f"Size preset baked into the templates: {', '.join(vocab.SIZES)}.")
@output_option
def publish(bucket: str, region: str | None, profile: str | None, size: str, output: str) -> None:
    """Upload all four variants to BUCKET and print console Launch Stack links.

    The links open CloudFormation's quick-create page with the template and the release
    locations filled in; the markdown table is ready to paste into a README. The bucket
    must allow CloudFormation to read the templates (same account, or a bucket policy).

    \b
    Examples:
      hpq publish my-artifacts --region us-east-1
      hpq publish my-artifacts --output json | jq -r '.links["slurm-gpu"]'
    """
    from rich.console import Console

    session = make_session(region, profile)  # BUCKET and --size are checked by their parameter types
    err = Console(stderr=True, soft_wrap=True)
    rel = hpq.aws.deploy.publish(session, bucket, size, on_progress=_upload_progress(err))
    for note in calendar_notes("eks-gpu"):
        err.print(f"warning: {note}", markup=False)
    links = {v: hpq.aws.deploy.quick_create_url(rel, v) for v in rel.variants}
    if output == "json":
        printing.echo_json({"version": rel.version, "bucket": bucket, "region": rel.region, "links": links,
                            "templates": {v: rel.template_url(v) for v in rel.variants}})
        return
    up = rel.upload
    click.echo(f"published {rel.version} to s3://{bucket}/{names.s3_version_prefix(rel.version)}/ "
               f"({release_counts(up)})")
    for variant, url in links.items():
        click.echo(f"\n{variant}:\n  {url}")
    click.echo("\nMarkdown:\n")
    click.echo(hpq.aws.deploy.markdown_table(rel))
