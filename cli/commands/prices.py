"""``hpq prices refresh|show``: the price file behind the cost estimates (hpq.aws.pricing, docs/cost.md)."""

from __future__ import annotations

import datetime as dt
import json
from importlib import resources
from pathlib import Path

import click

from hpq.atomic import write_file
from hpq.aws import pricing
from hpq.aws.session import aws_errors, make_session
from hpq.cfn.regions import hyperpod_regions, known_regions
from hpq.cfn.storage import FSX_THROUGHPUTS
from hpq.cli import printing
from hpq.cli.common_options import output_option
from hpq.errors import OperationFailed, UsageError
from hpq.lifecycle import catalog
from hpq.standins import rendition


@click.group("prices")
def prices() -> None:
    """The price file hpq's cost estimates fall back on when the AWS Price List API is out of reach.

    \b
    Examples:
      hpq prices show
    """


@prices.command("refresh")
@click.option("--profile", default=None, metavar="NAME", help="AWS profile (needs pricing:GetProducts).")
@click.option("--region", "regions", multiple=True, metavar="REGION",
              help="Only this region (repeatable; default: every HyperPod region).")
@click.option("--out", "-o", "out", default=None, metavar="FILE",
              help="Write here (default: the price file in the installed package; in a checkout, aws/prices.json).")
def refresh(profile: str | None, regions: tuple[str, ...], out: str | None) -> None:
    """Rebuild the price file from the AWS Price List API (pricing:GetProducts, us-east-1 endpoint).

    Asks for every HyperPod instance type in hpq's catalog, every FSx for Lustre throughput tier
    hpq offers, and the NAT gateway, public IPv4, interface endpoint, HyperPod volume and EKS
    rates, in every HyperPod region (or the --region ones). Each record is AWS's own, marked
    confirmed, with today's date. Items the API has no product for are listed at the end.

    A file written elsewhere with --out is used when HPQ_PRICE_FILE names it.

    \b
    Examples:
      hpq prices refresh --region us-east-1 --region us-west-2
      hpq prices refresh --out my-prices.json
    """
    where = list(regions) or list(hyperpod_regions())
    unknown = [r for r in where if r not in known_regions()]
    if unknown:
        raise UsageError(f"unknown region(s): {', '.join(unknown)}")
    target = Path(out) if out else Path(str(resources.files("hpq.aws").joinpath(pricing.PRICE_FILE)))
    if rendition.endpoint_is_moto():
        # moto has no Price List API: its answer would be an HTML 500, and nothing could be written from it.
        raise UsageError("AWS_ENDPOINT_URL is an emulator, which has no Price List API: nothing to refresh "
                         f"from; {target} is unchanged")
    session = make_session(None, profile)
    client = pricing.pricing_client(session)
    items = pricing.price_items(catalog.names(), FSX_THROUGHPUTS)
    today = dt.date.today().isoformat()
    with aws_errors("pricing:GetProducts"):
        data, missing = pricing.refresh(client, where, items, today,
                                        on_progress=lambda r: click.echo(f"priced {r}", err=True))
    if not data["offers"]:
        raise OperationFailed("the Price List API returned no product for any item; the price file is unchanged")
    write_file(target, json.dumps(data, indent=1, sort_keys=True) + "\n")
    click.echo(f"wrote {target}: {sum(len(o['products']) for o in data['offers'].values())} prices, {today}")
    if missing:
        click.echo(f"no product for {len(missing)} item(s): " + "; ".join(missing[:20])
                   + (" ..." if len(missing) > 20 else ""), err=True)


@prices.command("show")
@click.option("--file", "path", default=None, metavar="FILE", help="A price file (default: the one estimates use).")
@output_option
def show(path: str | None, output: str) -> None:
    """List every price in the price file with its source, date and whether it was confirmed.

    \b
    Examples:
      hpq prices show
      hpq prices show --output json
    """
    book = pricing.PriceFile(path)
    rows = []
    for service in sorted(book.offers):
        for record, offer in book.records(service):
            product = record["product"]
            attrs = product.get("attributes") or {}
            for term in (record["terms"]["OnDemand"] or {}).values():
                for dim in (term.get("priceDimensions") or {}).values():
                    prov = book.provenance.get(product.get("sku", "")) or {}
                    rows.append({"service": service, "region": attrs.get("regionCode"),
                                 "usagetype": attrs.get("usagetype"), "sku": product.get("sku"),
                                 "usd": (dim.get("pricePerUnit") or {}).get("USD"), "unit": dim.get("unit"),
                                 "description": dim.get("description"), "date": prov.get("retrieved")
                                 or offer.get("publicationDate"), "confirmed": bool(prov.get("confirmed")),
                                 "source": prov.get("source", ""),
                                 "why_unconfirmed": prov.get("why_unconfirmed", "")})
    if output == "json":
        printing.echo_json({"file": book.path, "built": (book.data.get("hpq") or {}), "prices": rows})
        return
    click.echo(book.source)
    printing.table(None, ["Service", "Region", "Usage type", "USD", "Unit", "Date", "Confirmed"],
                     [[r["service"], r["region"], r["usagetype"], r["usd"], r["unit"], r["date"],
                       "yes" if r["confirmed"] else "no"] for r in rows])
