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
