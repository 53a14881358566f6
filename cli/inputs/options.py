"""Checks that span one option's values: repeated keys, an empty remote command, a single-value
option given twice.
"""

from __future__ import annotations

import click

from hpq.errors import UsageError
from hpq.text import show, unprintable


def unique_keys(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Callback for a repeatable KEY=VALUE option: the same KEY twice is a mistake, not 'last wins'."""
    seen: dict[str, str] = {}
    for pair in values or ():
        key = pair.partition("=")[0]
        if key in seen:
            raise click.BadParameter(f"{key} is given twice ({show(seen[key])} and {show(pair)}); give it once",
                                     ctx=ctx, param=param)
        seen[key] = pair
    return values


def non_empty_command(ctx: click.Context, param: click.Parameter, words: tuple[str, ...]) -> tuple[str, ...]:
    """Callback for a remote COMMAND: at least one non-blank word, all printable UTF-8."""
    for word in words:
        bad = unprintable(word.replace("\n", " ").replace("\t", " "))
        if bad:
            raise click.BadParameter(f"{show(word)} {bad}", ctx=ctx, param=param)
    if not any(w.strip() for w in words):
        raise click.BadParameter("the command is empty", ctx=ctx, param=param)
    return words


def refuse_repeated_options(command: click.Command) -> click.Command:
    """Make ``command`` (and a group's subcommands) refuse a single-value option given twice.

    click keeps the last of ``--region a --region b`` silently; which one the user meant is a guess.
    Repeatable options (``--param``) and flags are left alone.
    """
    if getattr(command, "_hpq_strict", False):
        return command
    command._hpq_strict = True  # type: ignore[attr-defined]
    if isinstance(command, click.Group):  # a group's own parsing may rewrite its args (hpq rehearse): leave it
        for sub in command.commands.values():
            refuse_repeated_options(sub)
        return command
    original = command.parse_args

    def parse_args(ctx: click.Context, args: list[str]) -> list[str]:
        _, _, order = command.make_parser(ctx).parse_args(args=list(args))
        seen: set[str | None] = set()
        for param in order:
            if isinstance(param, click.Option) and not (param.multiple or param.count or param.is_flag):
                if param.name in seen:
                    raise click.UsageError(f"{param.opts[-1]} is given more than once; give it once", ctx)
                seen.add(param.name)
        return original(ctx, args)

    command.parse_args = parse_args  # type: ignore[method-assign]
    return command


def given(ctx: click.Context, name: str) -> bool:
    """Whether the user gave option ``name`` (command line or its environment variable), not its default."""
    from click.core import ParameterSource

    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def option_flag(ctx: click.Context, name: str) -> str:
    """How the user spells option ``name`` (its long form)."""
    for param in ctx.command.params:
        if param.name == name and isinstance(param, click.Option):
            return max(param.opts, key=len)
    return "--" + name.replace("_", "-")


def not_applicable(flags: list[str], where: str, why: str = "") -> str:
    """The one wording for options that do not apply: '--x does not apply to fsx: why'."""
    verb = "does" if len(flags) == 1 else "do"
    return f"{', '.join(flags)} {verb} not apply {where}" + (f": {why}" if why else "")


def refuse_inapplicable(ctx: click.Context, applies: dict[str, bool], where: str, why: str = "") -> None:
    """Refuse every option in ``applies`` that the user gave where it does not apply (exit 2, one line).

    Every command refuses an option that would be ignored the same way, whether or not the value
    equals the default: an option given is an option meant.
    """
    unused = [option_flag(ctx, name) for name, ok in applies.items() if not ok and given(ctx, name)]
    if unused:
        raise UsageError(not_applicable(unused, where, why))
