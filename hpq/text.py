"""How hpq quotes what it was given in an error line, and says why a value or a path cannot be used.

On the ground floor because every layer writes such lines (the AWS library, the atomic writer, the
template output and the command-line checks) and none of them should reach into another to do so.
Standard library only.
"""

from __future__ import annotations

import stat


def show(value: object, limit: int = 100) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error line quotes what was given, not a megabyte of it."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'" + f" ({len(str(value))} characters)"


def unprintable(value: str) -> str | None:
    """Why ``value`` cannot be a name at all (not UTF-8, control characters), or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return "contains control characters"
    return None


def unusable(value: str) -> str | None:
    """Why ``value`` cannot be used at all (not printable UTF-8, or blank), or None."""
    return unprintable(value) or (None if value.strip() else "is empty")


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, in words for an error line (from its ``st_mode``)."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a regular file"
