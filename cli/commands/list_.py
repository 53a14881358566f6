"""``hpq list``: the HyperPod clusters hpq deployed, in a region or in every HyperPod region."""

from __future__ import annotations

import datetime as dt

import click

from hpq.aws import inventory, pricing
from hpq.aws.session import make_session
from hpq.cfn import regions
from hpq.cli import printing
from hpq.cli.common_options import aws_options, output_option
from hpq.errors import HpqError, UsageError


def _groups(row: inventory.ClusterRow) -> str:
    return ", ".join(f"{g.name} {g.count}x{g.instance_type}" + (f" (->{g.target})" if g.target != g.count else "")
                     for g in row.groups)


def _cost(row: inventory.ClusterRow) -> str:
    if row.hourly is None:
        return "no price" if row.unpriced else ""
    return ("at least " if row.unpriced else "") + f"${row.hourly.quantize(pricing.Decimal('0.01')):,}/h"


@click.command("list")
@aws_options(services=("sagemaker", "cloudformation"))
@click.option("--all-regions", is_flag=True,
              help="Look in every HyperPod region (those cfn/regions.py derives from cfn-lint's data), not just one.")
@click.option("--all", "include_all", is_flag=True,
              help="Also list HyperPod clusters hpq did not deploy (without hpq's tags); hpq's own are listed "
                   "without it.")
@click.option("--prices", "price_source", type=click.Choice(["auto", "api", "file"]), default="auto",
              show_default=True, help="Where the hourly cost's prices come from (see docs/cost.md).")
@output_option
def list_clusters(region: str | None, profile: str | None, all_regions: bool, include_all: bool, price_source: str,
                  output: str) -> None:
    """List the HyperPod clusters hpq deployed: name, variant, state, groups, age, hourly cost.

    A cluster is hpq's when it carries hpq's tag (hpq:managed-by = hyperpod-quickstart, set on
    the cluster and on every stack hpq deploy creates); clusters deployed otherwise are listed
    only with --all. A stack of hpq's whose cluster does not exist (yet, or any more) is listed
    with state "no cluster". The hourly cost counts the HyperPod instances at their current
    counts at on-demand list prices (docs/cost.md says where prices come from).

    \b
    Examples:
      hpq list --region us-west-2
      hpq list --all-regions --output json | jq '.[] | {name, state}'
      hpq list --all                       # also clusters deployed otherwise
    """
    if all_regions and region:
        raise UsageError("--region and --all-regions: give one of them")
    session = make_session(region, profile)
    if all_regions:
        where = list(regions.hyperpod_regions())
    else:
        if not session.region_name:
            raise UsageError("no AWS region: pass --region, --all-regions, or set AWS_REGION")
        where = [session.region_name]
    prices = pricing.prices(session, price_source)
    rows: list[inventory.ClusterRow] = []
    failed: list[str] = []
    for reg in where:
        try:
            rows += inventory.list_region(session, reg, include_all, prices)
        except HpqError as exc:
            if not all_regions:
                raise
            failed.append(reg)  # an opt-in region not enabled, or denied: say so, keep looking elsewhere
            click.echo(f"hpq: warning: {reg}: {' '.join(str(exc).split())}", err=True)
    now = dt.datetime.now(dt.timezone.utc)
    if output == "json":
        printing.echo_json([r.as_dict(now) for r in rows])
    elif not rows:
        scope = "any HyperPod region" if all_regions else where[0]
        click.echo(f"no {'' if include_all else 'hpq '}HyperPod clusters in {scope}"
                   + ("" if include_all else " (--all lists every cluster)"))
    else:
        printing.table(None, ["Name", "Region", "Variant", "State", "Groups", "Age", "Cost", "Stack"],
                         [[r.name, r.region, r.variant or "-", r.state, _groups(r),
                           inventory.age(r.age_seconds(now)), _cost(r),
                           f"{r.stack} ({r.stack_status})" if r.stack else ""] for r in rows])
        if any(r.unpriced for r in rows):
            click.echo("no price for: " + ", ".join(sorted({u for r in rows for u in r.unpriced}))
                       + " (`hpq prices refresh` updates the price file)", err=True)
    if failed and len(failed) == len(where):
        raise HpqError(f"no region answered ({', '.join(failed)})")
