"""The base of every string option: printable UTF-8, one clause saying why not, a quoted value cut short.

``Text`` refuses what cannot be a name at all; ``Pattern`` adds a documented pattern and length,
``NameOrArn`` a name or an ARN; ``ShellWords`` and ``KeyValue`` are the two free-form shapes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable
from typing import Any

import click

from hpq.text import show, unprintable


class Text(click.ParamType):
    """A non-empty string of printable UTF-8; subclasses add a pattern."""

    name = "text"

    def __init__(self, what: str = "value", allow_empty: bool = False) -> None:
        self.what = what
        self.allow_empty = allow_empty

    def check(self, value: str) -> str | None:
        """Why ``value`` is refused (one clause), or None when it is fine."""
        return None

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        bad = unprintable(value)
        if bad is None and not value.strip() and not (self.allow_empty and value == ""):
            bad = "is empty"
        if bad is None and value:
            bad = self.check(value)
        if bad:
            self.fail(f"{self.what} {show(value)} {bad}", param, ctx)
        return value


class Pattern(Text):
    """A name that must match a documented pattern (full match) and length."""

    def __init__(self, what: str, patterns: Iterable[str], rule: str, max_len: int | None = None,
                 min_len: int = 1) -> None:
        super().__init__(what)
        self.patterns = [re.compile(p) for p in patterns]
        self.rule = rule
        self.max_len = max_len
        self.min_len = min_len

    def check(self, value: str) -> str | None:
        if self.max_len is not None and not self.min_len <= len(value) <= self.max_len:
            return f"must be {self.min_len}-{self.max_len} characters ({self.rule})"
        if not any(p.fullmatch(value) for p in self.patterns):
            return f"is invalid: {self.rule}"
        return None


class NameOrArn(Pattern):
    """A name (its own pattern and length) or, starting with ``arn:``, an ARN of a fixed pattern.

    The length is checked on its own: the repetition counts in AWS's patterns do not bound it
    ("a-b" is one repetition of ``(-*[a-zA-Z0-9])``).
    """

    def __init__(self, what: str, name_re: str, name_max: int, arn_re: str, rule: str,
                 complete: Callable[[click.Context, str], list[Any]] | None = None) -> None:
        super().__init__(what, [name_re], rule, name_max)
        self.arn = re.compile(arn_re)
        self.complete = complete

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        return self.complete(ctx, incomplete) if self.complete else []

    def check(self, value: str) -> str | None:
        if value.startswith("arn:"):
            return None if self.arn.fullmatch(value) else f"is not a valid ARN ({self.rule})"
        return super().check(value)


class ShellWords(Text):
    """A string split like a shell would (quotes kept together); unbalanced quotes are refused."""

    name = "words"

    def __init__(self, what: str = "value", allow_empty: bool = True) -> None:
        super().__init__(what, allow_empty=allow_empty)

    def check(self, value: str) -> str | None:
        try:
            shlex.split(value)
        except ValueError as exc:
            return f"cannot be split into words ({exc})"
        return None


class KeyValue(Text):
    """``KEY=VALUE``; the key is a CloudFormation parameter name (letters and digits)."""

    name = "key=value"

    def __init__(self) -> None:
        super().__init__("parameter", allow_empty=False)

    def check(self, value: str) -> str | None:
        key, sep, _ = value.partition("=")
        if not sep:
            return "is not KEY=VALUE"
        if not re.fullmatch(r"[A-Za-z0-9]{1,255}", key):
            return "has an invalid KEY: parameter names are letters and digits"
        return None


KEY_VALUE = KeyValue()
