"""``hpq list``: the HyperPod clusters hpq deployed, in a region or in every HyperPod region."""

from __future__ import annotations

import datetime as dt
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import click

from hpq.aws import inventory, pricing
from hpq.aws.session import make_session
from hpq.cfn import regions
from hpq.cli import printing
from hpq.cli.common_options import aws_options, output_option
from hpq.errors import HpqError, UsageError

MAX_PARALLEL_REGIONS = 8  # bounded: each region holds two clients and their connections


def _groups(row: inventory.ClusterRow) -> str:
    return ", ".join(f"{g.name} {g.count}x{g.instance_type}" + (f" (->{g.target})" if g.target != g.count else "")
                     for g in row.groups)


def _cost(row: inventory.ClusterRow) -> str:
    if row.hourly is None:
        return "no price" if row.unpriced else ""
    return ("at least " if row.unpriced else "") + f"${row.hourly.quantize(pricing.Decimal('0.01')):,}/h"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _gather(session: Any, where: list[str], include_all: bool) -> tuple[list[inventory.ClusterRow],
                                                                         list[tuple[str, HpqError]]]:
    """Every region's rows, the regions asked at most MAX_PARALLEL_REGIONS at a time (an unreachable endpoint
    costs each region its connect timeouts and retries: one after another, 19 regions took two minutes).
    With more than one region, a progress line on stderr while they answer (redrawn on a terminal)."""
    lock = threading.Lock()  # a boto3 Session is not thread-safe: its clients are created one at a time
    rows: list[inventory.ClusterRow] = []
    failed: list[tuple[str, HpqError]] = []
    many = len(where) > 1
    tty = many and sys.stderr.isatty()
    if many:
        click.echo(f"hpq: asking {len(where)} HyperPod regions, {min(len(where), MAX_PARALLEL_REGIONS)} at a time"
                   + ("" if tty else " ..."), err=True, nl=not tty)
    with ThreadPoolExecutor(max_workers=min(len(where), MAX_PARALLEL_REGIONS)) as pool:
        futures = {pool.submit(inventory.list_region, session, reg, include_all, None, lock): reg for reg in where}
        for done, fut in enumerate(as_completed(futures), 1):
            try:
                rows += fut.result()
            except HpqError as exc:
                failed.append((futures[fut], exc))
            if tty:
                click.echo(f"\rhpq: asking {len(where)} HyperPod regions: {done}/{len(where)} answered or failed",
                           err=True, nl=done == len(where))
    order = {reg: i for i, reg in enumerate(where)}
    failed.sort(key=lambda f: order[f[0]])
    return sorted(rows, key=lambda r: (r.region, r.name, r.stack)), failed


def _stack(row: inventory.ClusterRow) -> str:
    if not row.stack:
        return ""
    shared = f"; cluster also named by {', '.join(row.shared_with)}" if row.shared_with else ""
    return f"{row.stack} ({row.stack_status}{shared})"


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
    only with --all. One row per hpq stack, named by the stack's ClusterName parameter; a stack
    whose cluster does not exist (yet, or any more) is listed with state "no cluster", and two
    stacks naming one cluster are both listed, each saying so. --all-regions asks the regions
    8 at a time; if none answers, only the error is printed (exit 1). The hourly cost counts the HyperPod instances at their current
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
    rows, failed = _gather(session, where, include_all)
    if failed and len(failed) == len(where):  # nothing answered: only the error, nothing on stdout that contradicts it
        reg, exc = failed[0]
        more = f" (and {len(failed) - 1} more, the same way or otherwise)" if len(failed) > 1 else ""
        if not all_regions:
            raise exc
        error = HpqError(f"no region answered: {reg}: {_one_line(exc)}{more}")
        error.exit_code = exc.exit_code  # the exit code the first region's error has on its own
        raise error
    for reg, exc in failed:  # an opt-in region not enabled, or denied: say so; the others answered
        click.echo(f"hpq: warning: {reg}: {_one_line(exc)}", err=True)
    for row in rows:
        inventory.price_row(row, prices)
    now = dt.datetime.now(dt.timezone.utc)
    for reg, name, named_by in sorted({(r.region, r.name, tuple(sorted([r.stack, *r.shared_with])))
                                       for r in rows if r.shared_with}):
        click.echo(f"hpq: note: {reg}: stacks {', '.join(named_by)} all name cluster {name or '(none)'}: one row "
                   "each (one cluster: count its cost once)", err=True)
    if output == "json":
        printing.echo_json([r.as_dict(now) for r in rows])
    elif not rows:
        scope = "any HyperPod region" if all_regions else where[0]
        click.echo(f"no {'' if include_all else 'hpq '}HyperPod clusters in {scope}"
                   + ("" if include_all else " (--all lists every cluster)"))
    else:
        printing.table(None, ["Name", "Region", "Variant", "State", "Groups", "Age", "Cost", "Stack"],
                         [[r.name or "-", r.region, r.variant or "-", r.state, _groups(r),
                           inventory.age(r.age_seconds(now)), _cost(r),
                           _stack(r)] for r in rows])
        if any(r.unpriced for r in rows):
            click.echo("no price for: " + ", ".join(sorted({u for r in rows for u in r.unpriced}))
                       + " (`hpq prices refresh` updates the price file)", err=True)
