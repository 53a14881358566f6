"""``hpq observe STACK``: where the cluster's metrics go and how to look at them (thin over hpq.observability)."""

from __future__ import annotations

import click

from hpq.aws import amp, hyperpod, stacks
from hpq.aws.session import client, make_session
from hpq.cli import inputs, printing
from hpq.cli.common_options import aws_options, output_option
from hpq.errors import OperationFailed, UsageError
from hpq.observability import endpoints, series_check


@click.command("observe")
@click.argument("stack", type=inputs.STACK)
@click.option("--check", is_flag=True,
              help="Query the workspace (SigV4) for every series each node should send; exit 1 unless all are there.")
@aws_options
@output_option
def observe(stack: str, check: bool, region: str | None, profile: str | None, output: str) -> None:
    """Show STACK's Managed Prometheus workspace, its remote-write and query endpoints, the Grafana data source and
    the commands that import hpq's dashboards into any Grafana (from the root stack's outputs).

    \b
    Examples:
      hpq observe hpq-slurm-gpu
      hpq observe hpq-slurm-gpu --output json | jq -r '.dashboards[].import_command'
      hpq observe hpq-slurm-gpu --check        # per node: expected, present, missing series and why
    """
    session = make_session(region, profile)
    info = stacks.describe(client(session, "cloudformation"), stack)
    try:
        view = endpoints.describe(info.name, session.region_name, info.outputs)
    except endpoints.ObservabilityOff as exc:
        raise UsageError(str(exc)) from None
    if check:
        view["observe"] = _check(session, info, view)
    if output == "json":
        printing.echo_json(view)
        if check:
            exit_for(view["observe"])
        return
    printing.table(f"{view['stack']}: Amazon Managed Service for Prometheus", ["", ""], [
        ["Workspace", view["workspace_id"]], ["ARN", view["workspace_arn"]], ["Region", view["region"]],
        ["Remote write", view["remote_write_url"]], ["Query", view["query_url"]],
        ["Alert rules", view["alert_rules_namespace"]], ["Managed Grafana", view["grafana_url"]],
    ])
    ds = view["grafana_datasource"]
    click.echo(f"\nGrafana data source: type prometheus, URL {ds['url']}, SigV4 auth in {ds['jsonData']['sigV4Region']}"
               " (credentials that may aps:QueryMetrics on the workspace).")
    click.echo("Import hpq's dashboards (GRAFANA_URL and a service account GRAFANA_TOKEN set):")
    for d in view["dashboards"]:
        click.echo(f"  # {d['title']}\n  {d['import_command']}")
    if check:
        _print_check(view["observe"])
        exit_for(view["observe"])


def _check(session, info, view) -> dict:
    """The series check (hpq.observability.series_check) over the cluster's nodes, querying the workspace."""
    cluster = info.parameters.get("ClusterName") or info.name
    sm = client(session, "sagemaker")
    nodes = []
    for n in hyperpod.list_nodes(sm, hyperpod.describe_cluster(sm, cluster)):
        nodes.append(series_check.node_for(
            series_check.instance_label(str(n.get("PrivateDnsHostname", ""))), str(n.get("InstanceId", "")),
            str(n.get("InstanceType", "")), str(n.get("InstanceGroupName", ""))))

    def query(promql: str) -> list:
        try:
            return amp.instant_query(session, view["query_url"], view["region"], promql)
        except amp.QueryError as exc:
            raise series_check.QueryFailed(str(exc)) from None

    return series_check.check(cluster, nodes, query)


def _print_check(result: dict) -> None:
    click.echo(f"\nSeries check for cluster {result['cluster']}: {result['verdict']}: {result['reason']}")
    for n in result["nodes"]:
        click.echo(f"  {n['instance']} ({n['group']}, {n['instance_type']}): "
                   f"{len(n['present'])}/{len(n['expected'])} present")
        for metric, cause in sorted(n["missing"].items()):
            click.echo(f"    missing {metric}: {cause}")
        for note in n["not_collected"]:
            click.echo(f"    not collected: {note}")
        if n.get("optional") and all(n["optional"].values()):
            click.echo("    also shown: " + ", ".join(sorted(n["optional"])))
    for metric, state in sorted(result["cluster_series"].items()):
        click.echo(f"  cluster: {metric}: " + ("present" if state["present"] else f"missing: {state['cause']}"))


def exit_for(result: dict) -> None:
    if result["verdict"] != "PASS":
        raise OperationFailed(f"series check {result['verdict']}: {result['reason']}")
