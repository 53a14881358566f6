"""``hpq status``, ``hpq destroy``, ``hpq stack-errors``: thin commands over hpq.aws.stacks and hpq.aws.events."""

from __future__ import annotations

import sys
from typing import Any

import click

from hpq.aws import events, inventory, stacks
from hpq.aws.session import client, make_session, region_of
from hpq.cli import inputs, printing
from hpq.cli.common_options import aws_options, output_option
from hpq.errors import UsageError
from hpq.validation import saved


def _operation(status: str) -> str:
    if status.startswith("DELETE"):
        return "delete"
    return "update" if status.startswith("UPDATE") else "create"


def stack_overview(cfn: Any, stack: str) -> dict[str, Any]:
    """The stack, its outputs and every nested stack's status (for status and its JSON)."""
    info = stacks.describe(cfn, stack)
    tree = stacks.stack_tree(cfn, info.stack_id, label=info.name)
    statuses = {}
    for node in tree:
        for res in node.resources:
            if res.get("ResourceType") == stacks.NESTED_TYPE:
                statuses[res.get("PhysicalResourceId")] = (res.get("ResourceStatus", ""),
                                                           res.get("ResourceStatusReason", "") or "")
    nested = []
    for node in tree[1:]:
        state, reason = statuses.get(node.stack_id, ("", ""))
        nested.append({"path": node.path, "id": node.stack_id, "status": state, "reason": reason})
    return {**info.as_dict(), "nested": nested}


def _cluster_name(overview: dict[str, Any]) -> str:
    return stacks.cluster_name_of(overview["parameters"], overview["outputs"], overview["name"])


def print_cluster(cluster: dict[str, Any]) -> None:
    """The HyperPod cluster beside its stack: groups, every node, the controller or EKS cluster, FSx, results."""
    line = f"HyperPod cluster {cluster['name'] or '(none named)'}: {cluster['status']}"
    if cluster.get("orchestrator"):
        line += f" ({cluster['orchestrator']})"
    click.echo(line + (f": {cluster['failure']}" if cluster.get("failure") else ""))
    if cluster.get("groups"):
        printing.table("Instance groups", ["Group", "Type", "Count", "Target"],
                         [[g["name"], g["instance_type"], g["count"], g["target"]] for g in cluster["groups"]])
    if cluster.get("nodes"):
        printing.table("Nodes", ["Instance", "Group", "Type", "Status", "Launched"],
                         [[n["instance_id"], n["group"], n["instance_type"], n["status"]
                           + (f" ({n['message']})" if n.get("message") and n["status"] != "Running" else ""),
                           n["launched"] or ""] for n in cluster["nodes"]])
    ctl = cluster.get("slurm_controller")
    if ctl:
        click.echo(f"Slurm controller: group {ctl['group']}, node(s) {', '.join(ctl['nodes']) or 'none yet'}")
    eks = cluster.get("eks")
    if eks:
        click.echo(f"EKS cluster {eks.get('name') or '?'}: {eks.get('status')}"
                   + (f" (Kubernetes {eks['version']})" if eks.get("version") else ""))
    fsx = cluster.get("fsx")
    if fsx:
        extra = (f", {fsx['capacity_gib']} GiB {fsx.get('deployment_type') or ''} at {fsx['throughput_per_tib']} "
                 "MB/s/TiB" if fsx.get("capacity_gib") else "")
        if fsx.get("dns_name") and fsx.get("mount_name"):
            extra += f", mount {fsx['dns_name']}@tcp:/{fsx['mount_name']}"
        click.echo(f"FSx for Lustre {fsx['id']}: {fsx['status'] or 'unknown'}{extra}")
    results = cluster.get("validation") or []
    if results:
        printing.table("Validation results (latest per test, saved on this machine)", ["Test", "Outcome", "When",
                       "Result"], [[r["test"], r["outcome"], r["when"] or "", r["headline"]] for r in results])
    else:
        click.echo(f"validation results: {saved.NONE_SAVED} (`hpq test validate {cluster['name'] or 'CLUSTER'}` "
                   "runs one; the node programs also keep theirs on the cluster, /fsx/hpq-results/)")


@click.command("status")
@click.argument("stack", type=inputs.STACK)
@aws_options(services=("cloudformation", "sagemaker"))
@click.option("--follow", is_flag=True, help="If an operation is in progress, follow it to the end.")
@click.option("--poll-seconds", default=5.0, show_default=True, hidden=True, type=inputs.POLL_SECONDS)
@click.option("--no-cluster", is_flag=True, help="Only the stack: skip the HyperPod cluster, EKS and FSx calls.")
@output_option
def status(stack: str, region: str | None, profile: str | None, follow: bool, poll_seconds: float, no_cluster: bool,
           output: str) -> None:
    """Show STACK's state, nested stacks and outputs, and its HyperPod cluster beside it.

    The cluster part: every instance group (type, current and target count), every node
    (instance id, group, type, status: Running, Pending, Failure, ...), the Slurm controller
    or the EKS cluster, the FSx file system, and the latest result of each test that
    `hpq test` and `hpq doctor` saved on this machine (outcome, when, headline).
    STACK may also be a cluster name as `hpq list` shows it: the one hpq stack naming that cluster is shown.
    --follow waits for a running operation first. Exit 1 when the stack or the cluster failed.

    \b
    Examples:
      hpq status hpq-slurm-gpu
      hpq status hpq-slurm-gpu --follow          # resume following after Ctrl-C
      hpq status hpq-eks-gpu --output json | jq .cluster.nodes
    """
    inputs.refuse_inapplicable(click.get_current_context(), {"poll_seconds": follow}, "without --follow")
    session = make_session(region, profile)
    cfn = client(session, "cloudformation")
    info = stack_or_cluster(cfn, stack)
    if follow and not stacks.is_terminal(info.status):
        printing.follow_and_explain(cfn, info.stack_id, info.name, _operation(info.status),
                                    poll_seconds=poll_seconds)
    overview = stack_overview(cfn, info.stack_id)
    cluster = None
    if not no_cluster and overview["status"] != "DELETE_COMPLETE":
        name, region = _cluster_name(overview), region_of(session)
        cluster = (inventory.cluster_detail(session, name, region, overview["outputs"]) if name else
                   {"name": None, "status": "no cluster named (no valid ClusterName parameter or output)",
                    "groups": [], "nodes": []})
        cluster["validation"] = saved.latest(region, name) if name else []
        overview["cluster"] = cluster
    if output == "json":
        printing.echo_json(overview)
    else:
        click.echo(f"{overview['name']}: {overview['status']}" + (f" ({overview['reason']})" if overview["reason"] else ""))
        if overview["nested"]:
            printing.table("Nested stacks", ["Stack", "Status", "Reason"],
                           [[n["path"], n["status"], n["reason"]] for n in overview["nested"]])
        printing.print_outputs(overview["outputs"])
        if cluster is not None:
            print_cluster(cluster)
    if stacks.is_failed(overview["status"]):
        click.echo(f"the stack is {overview['status']}: see `hpq stack-errors {overview['name']}`", err=True)
        sys.exit(1)
    if cluster is not None and cluster.get("status") == "Failed":
        click.echo(f"the HyperPod cluster {cluster['name']} is Failed" + (f": {cluster['failure']}"
                   if cluster.get("failure") else ""), err=True)
        sys.exit(1)


def stack_or_cluster(cfn: Any, name: str) -> stacks.StackInfo:
    """The stack ``name``, or the one hpq stack whose cluster is ``name``: `hpq list` shows clusters, so a name
    copied from it works here too (said on stderr). Two stacks naming that cluster: which one is asked for."""
    try:
        return stacks.describe(cfn, name)
    except stacks.NotFound as exc:
        holders = inventory.by_cluster(inventory.hpq_stacks(cfn)).get(name) or []
        if len(holders) > 1:
            raise UsageError(f"{name} is no stack; it is the cluster of stacks "
                             f"{', '.join(h.stack for h in holders)}: give one of them") from None
        if not holders:
            raise exc from None
        click.echo(f"hpq: note: {name} is the cluster of stack {holders[0].stack}; showing that stack", err=True)
        return stacks.describe(cfn, holders[0].stack)


@click.command("destroy")
@click.argument("stack", type=inputs.STACK)
@aws_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--empty-buckets", is_flag=True,
              help="Delete every object version in the stack's S3 buckets first (a versioned bucket blocks deletion).")
@click.option("--no-wait", is_flag=True, help="Start the deletion and return.")
@click.option("--poll-seconds", default=5.0, show_default=True, hidden=True, type=inputs.POLL_SECONDS)
@output_option
def destroy(stack: str, region: str | None, profile: str | None, yes: bool, empty_buckets: bool, no_wait: bool,
            poll_seconds: float, output: str) -> None:
    """Delete STACK and all its nested stacks, following the deletion; explains a DELETE_FAILED.

    \b
    Examples:
      hpq destroy hpq-slurm-gpu
      hpq destroy hpq-slurm-gpu --yes --empty-buckets
    """
    if not yes and (sys.stdin is None or not sys.stdin.isatty()):  # known before any AWS call
        raise UsageError(f"refusing to delete {stack} without confirmation: pass --yes")
    session = make_session(region, profile)
    info = stacks.describe(client(session, "cloudformation"), stack)
    if not yes:
        click.confirm(f"Delete stack {info.name} ({info.status}) and everything in it?", abort=True, err=True)
    deletion = stacks.start_destroy(session, stack, empty_buckets)
    result = {"stack": deletion.info.name, "stack_id": deletion.info.stack_id, "emptied": deletion.emptied,
              "status": "DELETE_IN_PROGRESS"}
    if not no_wait:
        result["status"] = printing.follow_and_explain(client(session, "cloudformation"), deletion.info.stack_id,
                                                       deletion.info.name, "delete", deletion.started,
                                                       poll_seconds=poll_seconds).status
    if output == "json":
        printing.echo_json(result)
    else:
        for bucket, n in result["emptied"].items():
            click.echo(f"emptied s3://{bucket} ({n} versions and delete markers)")
        click.echo(f"{result['stack']}: {result['status']}")


@click.command("stack-errors")
@click.argument("stack", type=inputs.STACK)
@aws_options
@click.option("--all", "all_history", is_flag=True, help="Look at the whole history, not just the latest operation.")
@output_option
def stack_errors(stack: str, region: str | None, profile: str | None, all_history: bool, output: str) -> None:
    """Root-cause STACK's failures through every nested stack.

    Drops the "Resource creation cancelled" cascade and the parents' "Embedded stack ...
    was not successfully created" echoes; shows the first real failure per stack, oldest
    first, with its resource, reason and a hint.

    \b
    Examples:
      hpq stack-errors hpq-slurm-gpu
      hpq stack-errors hpq-eks-gpu --output json
    """
    cfn = client(make_session(region, profile), "cloudformation")
    info = stacks.describe(cfn, stack)
    rc = events.root_cause(cfn, info.stack_id, all_history, label=info.name)
    if output == "json":
        printing.echo_json({**rc.as_dict(), "status": info.status})
        return
    click.echo(f"{info.name}: {info.status}")
    printing.print_root_cause(rc, err=False)
