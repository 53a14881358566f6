"""Read a file the user named (an option, an argument, an environment variable) without trusting it.

One reader for every such file so each gets the same guards: opened non-blocking (a FIFO never hangs),
only a regular file accepted (a folder, device or /dev/zero is refused before a byte is read), at most
``max_bytes`` read (a huge file cannot exhaust memory), UTF-8 checked, JSON nesting bounded. Every failure
is a ``UsageError`` (one line, exit 2) that names the file.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from typing import Any

from hpq.errors import UsageError
from hpq.text import file_kind


def shown(path: str) -> str:
    """The path as an error line shows it: quoted, cut when very long."""
    text = str(path)
    return repr(text) if len(text) <= 100 else repr(text[:95]) + "..."


def read_bytes(path: str, max_bytes: int, what: str = "file", error: type[UsageError] = UsageError) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them (more is refused)."""
    name = f"{what} {shown(path)}"
    try:
        fd = os.open(os.path.expanduser(str(path)), os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"cannot read {name}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(f"{name} is {file_kind(mode)}, not a regular file")
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"cannot read {name}: {exc.strerror}") from None
    if len(data) > max_bytes:
        raise error(f"{name} is over {max_bytes} bytes")
    return data


def read_text(path: str, max_bytes: int, what: str = "file", error: type[UsageError] = UsageError) -> str:
    """The UTF-8 text of ``path`` (see read_bytes)."""
    data = read_bytes(path, max_bytes, what, error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {shown(path)} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x})") from None


def parse_json(text: str, name: str, error: type[UsageError] = UsageError,
               parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``text`` as JSON; malformed or too deeply nested JSON is a one-line ``error`` naming ``name``."""
    try:
        return json.loads(text, parse_constant=parse_constant)
    except RecursionError:
        raise error(f"{name} nests too deeply to be read") from None
    except ValueError as exc:
        raise error(f"{name} is not JSON: {str(exc).splitlines()[0][:120]}") from None


def read_json(path: str, max_bytes: int, what: str = "file", error: type[UsageError] = UsageError,
              parse_constant: Callable[[str], Any] | None = None) -> Any:
    """The JSON value in ``path`` (see read_bytes and parse_json)."""
    return parse_json(read_text(path, max_bytes, what, error), f"{what} {shown(path)}", error, parse_constant)
