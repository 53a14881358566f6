"""Idempotent file writes: write only when content or mode differs, managed blocks replaced in place.

Re-running the lifecycle must change nothing, so every writer compares before it
writes (mtimes stay put) and every shared file (fstab, /etc/environment) gets one
marked block that is replaced, never appended twice.
"""

from __future__ import annotations

import os
import tempfile
from typing import List, Optional

BEGIN = "# BEGIN hpq managed: %s (do not edit; replaced on every lifecycle run)"
END = "# END hpq managed: %s"


def read_text(path: str) -> Optional[str]:
    try:
        with open(path) as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def write_file(path: str, content, mode: int = 0o644, uid: int = -1, gid: int = -1) -> bool:
    """Write ``content`` (str or bytes) atomically if it differs; fix mode/owner. True when changed."""
    data = content.encode() if isinstance(content, str) else content
    changed = False
    try:
        with open(path, "rb") as fh:
            same = fh.read() == data
    except FileNotFoundError:
        same = False
    if not same:
        parent = os.path.dirname(path) or "."
        os.makedirs(parent, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".hpq-", dir=parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        changed = True
    st = os.stat(path)
    if st.st_mode & 0o7777 != mode:
        os.chmod(path, mode)
        changed = True
    if (uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid):
        os.chown(path, uid, gid)
        changed = True
    return changed


def replace_block(text: str, name: str, body_lines: List[str], at_top: bool = False) -> str:
    """Return ``text`` with the managed block ``name`` set to ``body_lines`` (removed when empty).

    A new block goes at the end, or with ``at_top`` first (ssh configs: global options before any Host).
    """
    begin, end = BEGIN % name, END % name
    out: List[str] = []
    inside = False
    placed = False
    block = [begin] + list(body_lines) + [end] if body_lines else []
    for line in text.splitlines():
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


def set_block(path: str, name: str, body_lines: List[str], mode: int = 0o644, at_top: bool = False) -> bool:
    """Replace the managed block ``name`` in file ``path`` (created when missing)."""
    current = read_text(path)
    new = replace_block(current or "", name, body_lines, at_top)
    if current is not None:
        mode = os.stat(path).st_mode & 0o7777
    return write_file(path, new, mode)
