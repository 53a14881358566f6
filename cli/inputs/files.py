"""Paths: files to read (never a FIFO or a directory), folders to write into, files to update."""

from __future__ import annotations

import os
import stat
from typing import Any

import click

from hpq.text import file_kind, show, unprintable, unusable


class InputFile(click.ParamType):
    """A regular file to read (or '-' for stdin): never a directory, FIFO, socket or device, which
    would fail late or block forever; ``text`` also requires UTF-8 content."""

    name = "file"

    def __init__(self, allow_dash: bool = False, text: bool = False, max_bytes: int | None = None,
                 what: str = "file") -> None:
        self.allow_dash, self.text, self.max_bytes, self.what = allow_dash, text, max_bytes, what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        if value == "-" and self.allow_dash:
            return value
        bad = unprintable(value)
        if bad or not value:
            self.fail(f"{self.what} path {show(value)} {bad or 'is empty'}", param, ctx)
        path = os.path.expanduser(value)
        try:
            st = os.stat(path)  # stat never blocks, even on a FIFO
        except OSError as exc:
            self.fail(f"cannot read {show(value)}: {exc.strerror}", param, ctx)
        if not stat.S_ISREG(st.st_mode):
            self.fail(f"{show(value)} is {file_kind(st.st_mode)}, not a regular file", param, ctx)
        if self.max_bytes is not None and st.st_size > self.max_bytes:
            self.fail(f"{show(value)} is {st.st_size} bytes; at most {self.max_bytes} are accepted", param, ctx)
        try:
            with open(path, "rb") as fh:
                data = fh.read() if self.text else fh.read(0)
        except OSError as exc:
            self.fail(f"cannot read {show(value)}: {exc.strerror}", param, ctx)
        if self.text:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.fail(f"{show(value)} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); "
                          f"give a source file", param, ctx)
        return value


class OutputDir(click.ParamType):
    """A folder to write into: a non-empty path that is not an existing file."""

    name = "dir"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        bad = unusable(value)
        if bad:
            self.fail(f"output folder {show(value)} {bad} (use -o . for the current folder)", param, ctx)
        path = os.path.expanduser(value)
        if os.path.lexists(path) and not os.path.isdir(path):
            self.fail(f"{show(value)} exists and is not a folder", param, ctx)
        return value


class WritableFile(click.ParamType):
    """A file hpq may create or update (e.g. known hosts): not empty, and not a folder or a FIFO."""

    name = "file"

    def __init__(self, what: str = "file") -> None:
        self.what = what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        bad = unusable(value)
        if bad:
            self.fail(f"{self.what} path {show(value)} {bad}", param, ctx)
        path = os.path.expanduser(value)
        if os.path.lexists(path):
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:
                self.fail(f"cannot use {show(value)}: {exc.strerror}", param, ctx)
            if not stat.S_ISREG(mode):
                self.fail(f"{show(value)} is {file_kind(mode)}, not a regular file", param, ctx)
        return value


class ExistingDir(click.ParamType):
    name = "dir"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        bad = unusable(value)
        if bad:
            self.fail(f"folder {show(value)} {bad}", param, ctx)
        if not os.path.isdir(os.path.expanduser(value)):
            what = "does not exist" if not os.path.lexists(value) else "is not a folder"
            self.fail(f"{show(value)} {what}", param, ctx)
        return value
