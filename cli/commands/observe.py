"""``hpq observe STACK``: where the cluster's metrics go and how to look at them (thin over hpq.observability)."""

from __future__ import annotations

import click

from hpq.aws import stacks
from hpq.aws.session import client, make_session
from hpq.cli import inputs, printing
from hpq.cli.common_options import aws_options, output_option
from hpq.errors import UsageError
from hpq.observability import endpoints


@click.command("observe")
@click.argument("stack", type=inputs.STACK)
@aws_options
@output_option
def observe(stack: str, region: str | None, profile: str | None, output: str) -> None:
    """Show STACK's Managed Prometheus workspace, its remote-write and query endpoints, the Grafana data source and
    the commands that import hpq's dashboards into any Grafana (from the root stack's outputs).

    \b
    Examples:
      hpq observe hpq-slurm-gpu
      hpq observe hpq-slurm-gpu --output json | jq -r '.dashboards[].import_command'
    """
    session = make_session(region, profile)
    info = stacks.describe(client(session, "cloudformation"), stack)
    try:
        view = endpoints.describe(info.name, session.region_name, info.outputs)
    except endpoints.ObservabilityOff as exc:
        raise UsageError(str(exc)) from None
    if output == "json":
        printing.echo_json(view)
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
