"""``hpq check-quotas``: thin command over hpq.aws.quotas."""

from __future__ import annotations

import sys

import click

from hpq.aws import quotas
from hpq.aws.session import aws_errors, make_session
from hpq.cli import inputs, printing
from hpq.cli.common_options import aws_options, output_option
from hpq.errors import UsageError
from hpq.lifecycle import catalog
from hpq.vocab import DEFAULT_EBS_GB, DEFAULT_FSX_GIB, ORCHESTRATORS, SLURM


@click.command("check-quotas")
@click.argument("instance_type", type=inputs.INSTANCE_TYPE)
@click.argument("nodes", type=inputs.INSTANCE_COUNT)
@aws_options(services=inputs.SERVICES_QUOTAS)
@click.option("--orchestrator", type=click.Choice(ORCHESTRATORS), default=SLURM, show_default=True,
              help="Slurm adds a controller node; EKS adds an EKS cluster.")
@click.option("--controller-type", default=catalog.DEFAULT_CONTROLLER_TYPE, show_default=True, type=inputs.CPU_TYPE,
              help="Slurm controller instance type.")
@click.option("--fsx-gib", default=DEFAULT_FSX_GIB, show_default=True, type=inputs.FSX_GIB,
              help="FSx for Lustre capacity the deploy creates (0: none).")
@click.option("--ebs-gib", default=DEFAULT_EBS_GB, show_default=True, type=inputs.EBS_GIB, help="EBS volume per node.")
@output_option
def check_quotas(instance_type: str, nodes: int, region: str | None, profile: str | None, orchestrator: str,
                 controller_type: str, fsx_gib: int, ebs_gib: int, output: str) -> None:
    """Check the service quotas a deploy of NODES INSTANCE_TYPE nodes needs.

    Reads each quota through the Service Quotas API (applied value, else the AWS default)
    and compares it with what the deploy needs plus what the account already uses.
    Exit 0 when every quota passes; 1 when any fails or cannot be read (shown as unknown).

    \b
    Examples:
      hpq check-quotas ml.g5.16xlarge 2 --region us-west-2
      hpq check-quotas p5.48xlarge 16 --orchestrator eks --output json
    """
    if nodes < 1:
        raise UsageError("COUNT must be at least 1")
    try:
        itype = catalog.lookup(instance_type).name
        ctype = catalog.lookup(controller_type).name
    except catalog.UnknownInstanceType as exc:
        raise UsageError(str(exc)) from None
    session = make_session(region, profile)
    with aws_errors("servicequotas:GetServiceQuota"):
        report = quotas.check_quotas(session, itype, nodes, orchestrator, ctype, fsx_gib, ebs_gib)
    if output == "json":
        printing.echo_json(report.as_dict())
    else:
        rows = []
        for r in report.results:
            rows.append([r.spec.title, f"{r.spec.service}/{r.code or '?'}", _num(r.needed), _num(r.applied),
                         r.status.upper(), r.note])
        printing.table(f"Quotas for {nodes} x {itype} ({orchestrator}) in {report.region}",
                       ["Quota", "Code", "Needed", "Applied", "Result", "Note"], rows)
        fails = sum(r.status == quotas.FAIL for r in report.results)
        unknown = sum(r.status == quotas.UNKNOWN for r in report.results)
        click.echo(f"{len(report.results) - fails - unknown} pass, {fails} fail, {unknown} unknown")
    if not report.ok:
        sys.exit(1)


def _num(v: float | None) -> str:
    if v is None:
        return "?"
    return str(int(v)) if float(v).is_integer() else f"{v:g}"
