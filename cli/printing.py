"""Printing shared by the commands: tables or JSON, a stack's outputs and root cause, and the
follow-then-explain step of deploy/destroy/status.

The AWS library (hpq.aws) returns data and raises HpqError; what reaches the terminal is decided here.
"""

from __future__ import annotations

import json
from typing import Any

import click

from hpq.aws import events, stacks
from hpq.cli.follow import Follower
from hpq.errors import OperationFailed
from hpq.scripts.outcome import json_safe


def echo_json(data: Any) -> None:
    """Strict JSON (no NaN/Infinity tokens: non-finite numbers become null), whatever the data holds."""
    click.echo(json.dumps(json_safe(data), indent=2, sort_keys=True, default=str, allow_nan=False))


def counter(what: str, stream: Any = None) -> Any:
    """``report(done, total)`` for a count that grows (``hpq: cfn-lint 7/40 files``).

    On a terminal one line rewritten in place (``\\r``); anywhere else (a CI log, a pipe) whole lines, one per
    tenth of the way and the last, so a log shows progress line by line instead of every count run together."""
    out = stream if stream is not None else click.get_text_stream("stderr")
    tty = bool(getattr(out, "isatty", lambda: False)())
    shown = [-1]

    def report(done: int, total: int) -> None:
        text = f"hpq: {what} {done}/{total} files"
        if tty:
            click.echo("\r" + text, file=out, nl=done == total)
            return
        step = total // 10 if total >= 10 else 1
        if done == total or done // step > shown[0]:
            shown[0] = done // step
            click.echo(text, file=out)

    return report


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    """A rich table on stdout (plain text when piped). Piped, it is as wide as its widest row needs, so no name is
    broken across lines (a stack or cluster name must copy whole into the next command); on a terminal it fits."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_lines=False, header_style="bold")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*["" if c is None else str(c) for c in row])
    console = Console(soft_wrap=False)
    width = max(100, console.width)
    if not console.is_terminal:
        width = max(width, console.measure(t, options=console.options.update(width=100_000)).maximum)
    Console(soft_wrap=False, width=width).print(t)


def print_outputs(outputs: dict[str, str]) -> None:
    if outputs:
        table("Outputs", ["Output", "Value"], [[k, v] for k, v in sorted(outputs.items())])


def print_root_cause(rc: events.RootCause, err: bool = True) -> None:
    if not rc.failures:
        click.echo(f"no failure events found for {rc.stack} (since {rc.since or 'the beginning'})", err=err)
        return
    root = rc.failures[0]
    click.secho(f"root cause: {root.line()}", fg="red", err=err)
    if len(rc.failures) > 1:
        click.echo("first failure in each stack (oldest first):", err=err)
        for f in rc.failures:
            click.echo(f"  {f.line()}", err=err)


def follow_and_explain(cfn: Any, stack_id: str, name: str, operation: str, started: float | None = None,
                       expected_total: int | None = None, poll_seconds: float = 5.0) -> stacks.StackInfo:
    """Follow to the end; on failure print the root cause and raise OperationFailed (exit 1)."""
    Follower(cfn, stack_id, operation, poll_seconds, started, expected_total, name=name).run()
    info = stacks.describe(cfn, stack_id)
    if stacks.is_failed(info.status):
        rc = events.root_cause(cfn, stack_id, label=name)
        print_root_cause(rc)
        detail = f": {rc.root.logical_id}: {rc.root.reason}" if rc.root else ""
        raise OperationFailed(f"stack {name} ended {info.status}{detail}")
    return info
