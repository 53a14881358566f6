"""The options every AWS command shares: ``--region``/``--profile`` (checked offline before the command
runs, botocore errors as one line) and ``--output json|table``.

Command-line only: the AWS library (hpq.aws) knows nothing of click; these decorators call its
checks (hpq.aws.settings) and its error translation (hpq.aws.session.aws_errors).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource, augment_usage_errors

from hpq.aws.session import aws_errors
from hpq.aws.settings import check_aws_inputs
from hpq.cli.inputs.aws import REGION
from hpq.cli.inputs.text import Text

F = TypeVar("F", bound=Callable[..., Any])


def aws_options(func: F | None = None, *, services: tuple[str, ...] = ("cloudformation",)) -> Any:
    """Add ``--region`` and ``--profile`` (received as ``region``/``profile`` keyword args).

    Before the command runs, everything about reaching AWS that can be checked offline is checked
    (hpq.aws.settings.check_aws_inputs): AWS_ENDPOINT_URL*, the profile, and that the region is one
    botocore knows for each of ``services``. Also translates any botocore error the command lets
    escape (e.g. missing credentials on the first call) into a one-line HpqError, so no command can
    end in a traceback for an AWS problem. Use as ``@aws_options`` or ``@aws_options(services=(...))``.
    """
    if func is None:
        return lambda f: aws_options(f, services=services)
    inner = func

    @functools.wraps(inner)
    def translated(*args: Any, **kwargs: Any) -> Any:
        check_aws_inputs(kwargs.get("region"), kwargs.get("profile"), services)
        name = getattr(inner, "__name__", "command").replace("_", "-")
        with aws_errors(f"hpq {name}"):
            return inner(*args, **kwargs)

    func = translated  # type: ignore[assignment]
    func = click.option(
        "--profile", envvar=None, default=None, metavar="NAME", type=Text("profile"),
        help="AWS profile (default: AWS_PROFILE or the default profile).",
    )(func)
    func = click.option(
        "--region", default=None, metavar="REGION", type=REGION,
        help="AWS region, e.g. us-west-2 (default: AWS_REGION / AWS_DEFAULT_REGION / profile).",
    )(func)
    return func


def output_option(func: F) -> F:
    """Add ``--output json|table`` (received as ``output``)."""
    return click.option(
        "--output", "output", type=click.Choice(["table", "json"]), default="table", show_default=True,
        help="Output format.",
    )(func)


# One spelling per concept (issue 25 item 5; the table users read is docs/cli.md, checked against this one by
# tests/cli/test_spellings.py, which walks every command and fails on a second spelling).
# concept -> (canonical option strings, or the positional argument's name, what it means)
SPELLINGS: dict[str, tuple[tuple[str, ...], str]] = {
    "output format": (("--output",), "table or json (nccl-env: sh, json or k8s) on stdout"),
    "output file or folder": (("-o", "--out"), "where a command writes files (synth: a folder; report, "
                                               "prices refresh: a file)"),
    "AWS profile": (("--profile",), "the AWS CLI profile credentials and region come from"),
    "NCCL profile": (("--nccl-profile",), "nccl-env's variable set: default or legacy"),
    "AWS region": (("--region",), "an AWS region, e.g. us-west-2"),
    "instance type": (("-t", "--instance-type"), "an ml.* instance type (INSTANCE_TYPE where it is positional)"),
    "node count": (("-n", "--nodes"), "how many (worker) nodes (NODES where it is positional)"),
    "assume yes": (("-y", "--yes"), "do not ask before acting"),
    "stack": (("stack",), "STACK: a CloudFormation stack name or ARN (status, destroy, stack-errors, observe)"),
    "cluster": (("cluster",), "CLUSTER: a HyperPod (or EKS) cluster name or ARN (test, doctor, connect, remote)"),
}


class DeprecatedSpelling(click.Option):
    """An old spelling kept for one release: hidden from help, it fills ``canonical``'s value and says so on
    stderr in one line. Giving both spellings is refused (which one was meant is a guess)."""

    def __init__(self, decls: list[str], canonical: str, new_flag: str, **kwargs: Any) -> None:
        super().__init__([*decls, f"deprecated_{canonical}"], hidden=True, expose_value=False, **kwargs)
        self.canonical = canonical
        self.new_flag = new_flag

    def handle_parse_result(self, ctx: click.Context, opts: Any, args: list[str]) -> tuple[Any, list[str]]:
        if self.name not in opts or ctx.resilient_parsing:
            return None, args
        old = "/".join(self.opts)
        if self.canonical in opts or ctx.get_parameter_source(self.canonical) == ParameterSource.COMMANDLINE:
            raise click.UsageError(f"{old} is the old spelling of {self.new_flag}; give {self.new_flag} only", ctx)
        with augment_usage_errors(ctx, param=self):
            value = self.type_cast_value(ctx, opts[self.name])
        click.echo(f"hpq: note: {old} is deprecated and goes in the next release; use {self.new_flag}", err=True)
        ctx.params[self.canonical] = value
        ctx.set_parameter_source(self.canonical, ParameterSource.COMMANDLINE)
        return value, args


def deprecated_spelling(*decls: str, canonical: str, new_flag: str, **kwargs: Any) -> Callable[[F], F]:
    """``@deprecated_spelling("--format", canonical="output", new_flag="--output", type=...)``: see
    DeprecatedSpelling. Put it ABOVE the canonical option so help lists the canonical one only."""
    return click.option(*decls, cls=DeprecatedSpelling, canonical=canonical, new_flag=new_flag, **kwargs)
