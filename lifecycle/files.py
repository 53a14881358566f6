"""Every file the lifecycle writes goes through ``write_file``: atomic, symlink-safe, idempotent.

Re-running the lifecycle must change nothing, so every writer compares before it
writes (mtimes stay put) and every shared file (fstab, /etc/environment) gets one
marked block that is replaced, never appended twice.

A write is a temporary file in the target's own folder, flushed and fsync'ed, with its
mode and owner set, then renamed over the target (and the folder fsync'ed): a crash, a full
disk or a read-only folder leaves the previous file whole, never a truncated one. A target
that is a symlink is followed only while it stays in the target's folder; one that leaves it
(``/etc/environment -> /home/x/y``) is refused with WriteRefused naming the link, because
writing there would change a file the lifecycle does not own.

Managed blocks carry only lines: a body line holding a line break of any kind (``\\n``, ``\\r``,
VT, FF, NEL, U+2028...), another control character, or the block markers is refused (LineRefused),
so no value can splice a second line into fstab or /etc/environment.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any, List, Optional

BEGIN = "# BEGIN hpq managed: %s (do not edit; replaced on every lifecycle run)"
END = "# END hpq managed: %s"
_MARKERS = ("# BEGIN hpq managed", "# END hpq managed")
_BLOCK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Inputs the lifecycle reads (resource_config.json, role files, node info) are small; anything past this is
# not what HyperPod or hpq wrote.
MAX_INPUT_BYTES = 16 * 1024 * 1024


class WriteRefused(Exception):
    """A write the lifecycle will not do (a symlink leaving the folder) or could not do (an OSError)."""


class LineRefused(ValueError):
    """A value that cannot be one line of a line-based file."""


class InputError(ValueError):
    """An input file that is unreadable, too large, not UTF-8 or not JSON."""


def line_problem(line: str) -> Optional[str]:
    """Why ``line`` cannot be written as one line of a text file, or None when it can.

    Refused: every control character but TAB (C0, DEL, C1 including NEL), and the characters Python's
    ``str.splitlines`` and other readers treat as line breaks (U+2028, U+2029).
    """
    for ch in line:
        code = ord(ch)
        if ch == "\t":
            continue
        if code < 0x20 or 0x7F <= code <= 0x9F or ch in "\u2028\u2029":
            return "it holds the control character %r" % ch
    return None


def check_line(line: str, what: str) -> str:
    problem = line_problem(line)
    if problem:
        raise LineRefused("%s %r: %s; refusing to write it into a line-based file" % (what, line, problem))
    return line


def read_text(path: str) -> Optional[str]:
    """The file's text, None when it does not exist; InputError when it is not UTF-8."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise InputError("%s is not UTF-8 (%s): not rewriting it" % (path, exc)) from None


def read_json(path: str, limit: int = MAX_INPUT_BYTES) -> Any:
    """The JSON document in ``path`` (UTF-8, at most ``limit`` bytes); InputError with the reason otherwise."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    if len(data) > limit:
        raise InputError("%s is larger than %d bytes: not a file HyperPod or hpq writes" % (path, limit))
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError("%s is not UTF-8: %s" % (path, exc)) from None
    except RecursionError:
        raise InputError("%s nests JSON too deeply" % path) from None
    except ValueError as exc:
        raise InputError("%s is not valid JSON: %s" % (path, exc)) from None


def write_target(path: str) -> str:
    """The file a write to ``path`` replaces: ``path``, or the end of its symlink chain when that stays in
    ``path``'s folder. WriteRefused when the chain leaves the folder."""
    if not os.path.islink(path):
        return path
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    real = os.path.realpath(path)
    if os.path.dirname(real) != folder or os.path.isdir(real):
        raise WriteRefused("%s is a symlink to %s, outside its folder %s: not writing through it (remove the link "
                           "if this file should be the lifecycle's)" % (path, os.readlink(path), folder))
    return real


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename itself is still atomic
    finally:
        os.close(fd)


def _replace(target: str, data: bytes, mode: int, uid: int, gid: int) -> None:
    parent = os.path.dirname(target) or "."
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".hpq-", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
            if uid != -1 or gid != -1:
                os.fchown(fh.fileno(), uid, gid)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(parent)


def write_file(path: str, content, mode: int = 0o644, uid: int = -1, gid: int = -1) -> bool:
    """Write ``content`` (str or bytes) atomically if it differs; fix mode/owner. True when changed.

    WriteRefused for a symlink leaving the folder, and for any OSError (read-only folder, full disk), with
    the path in the message; the previous file is then untouched.
    """
    data = content.encode() if isinstance(content, str) else content
    target = write_target(path)
    try:
        try:
            with open(target, "rb") as fh:
                same = fh.read() == data
        except FileNotFoundError:
            same = False
        if not same:
            _replace(target, data, mode, uid, gid)
            return True
        changed = False
        st = os.stat(target)
        if st.st_mode & 0o7777 != mode:
            os.chmod(target, mode)
            changed = True
        if (uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid):
            os.chown(target, uid, gid)
            changed = True
        return changed
    except OSError as exc:
        raise WriteRefused("cannot write %s: %s (the previous file, if any, is unchanged)"
                           % (path, exc.strerror or exc)) from None


def _lines(text: str) -> List[str]:
    """``text`` split at ``\\n`` only, so other lines come back byte for byte (``\\r`` kept, no splitlines)."""
    if not text:
        return []
    return (text[:-1] if text.endswith("\n") else text).split("\n")


def replace_block(text: str, name: str, body_lines: List[str], at_top: bool = False) -> str:
    """Return ``text`` with the managed block ``name`` set to ``body_lines`` (removed when empty).

    A new block goes at the end, or with ``at_top`` first (ssh configs: global options before any Host).
    A body line that is not exactly one line (line_problem) or looks like a block marker: LineRefused.
    """
    if not _BLOCK_NAME.fullmatch(name):
        raise LineRefused("block name %r is not one word (letters, digits, '.', '_', '-')" % name)
    for line in body_lines:
        check_line(line, "line")
        if line.strip().startswith(_MARKERS):
            raise LineRefused("line %r looks like an hpq block marker; refusing to write it" % line)
    begin, end = BEGIN % name, END % name
    out: List[str] = []
    inside = False
    placed = False
    block = [begin] + list(body_lines) + [end] if body_lines else []
    for line in _lines(text):
        if line.strip() == begin:
            inside = True
            if not placed:
                out.extend(block)
                placed = True
            continue
        if inside:
            if line.strip() == end:
                inside = False
            continue
        out.append(line)
    if not placed and block and at_top:
        out = block + out
    elif not placed and block:
        if out and out[-1].strip():
            out.append("")
        out.extend(block)
    if not block:
        while out and not out[-1].strip():
            out.pop()
    return "\n".join(out) + "\n" if out else ""


def block_lines(text: str, name: str) -> Optional[List[str]]:
    """The body of managed block ``name`` in ``text``, or None when there is none (what replace_block wrote)."""
    begin, end = BEGIN % name, END % name
    lines = _lines(text)
    for i, line in enumerate(lines):
        if line.strip() == begin:
            body = []
            for inner in lines[i + 1:]:
                if inner.strip() == end:
                    return body
                body.append(inner)
            return None
    return None


def set_block(path: str, name: str, body_lines: List[str], mode: int = 0o644, at_top: bool = False) -> bool:
    """Replace the managed block ``name`` in file ``path`` (created when missing)."""
    target = write_target(path)
    current = read_text(target)
    new = replace_block(current or "", name, body_lines, at_top)
    if current is not None:
        mode = os.stat(target).st_mode & 0o7777
    return write_file(target, new, mode)
