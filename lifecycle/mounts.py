"""The kernel's mount table (/proc/mounts), read the way the kernel writes it.

One line per mount: ``source target fstype options 0 0``, with space, tab, newline and backslash in a
field written as octal escapes (``\\040``...; proc(5), "/proc/pid/mounts"). Several lines may name the
same target: the last one is the mount on top. After a reboot with ``x-systemd.automount`` the first
``/fsx`` line is systemd's ``systemd-1 /fsx autofs ...`` trap; the real filesystem shows up after it once
something touches the directory.

A Lustre client mount shows the MGS as an IP NID, never as the DNS name it was mounted with:
``mount.lustre`` converts host names before calling mount(2) (lustre-release lustre/utils/mount_lustre.c,
convert_hostnames: "the kernel can't do lookups"), so ``fs-0123.fsx.us-west-2.amazonaws.com@tcp:/abcdefgh``
appears as ``10.1.2.3@tcp:/abcdefgh``; failover NIDs join with ``:`` and ``,`` (``a@tcp,b@tcp:c@tcp:/fs``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence

from . import files

AUTOFS = "autofs"
LUSTRE = "lustre"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    fstype: str
    options: str


def unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse(text: str) -> List[Mount]:
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out.append(Mount(unescape(parts[0]), unescape(parts[1]), parts[2], parts[3] if len(parts) > 3 else ""))
    return out


def read(path: str) -> List[Mount]:
    return parse(files.read_text(path) or "")


def at(table: Sequence[Mount], targets: Sequence[str], include_autofs: bool = False) -> Optional[Mount]:
    """The mount on top at any of ``targets`` (autofs traps skipped unless asked for), or None."""
    found = None
    for m in table:
        if m.target in targets and (include_autofs or m.fstype != AUTOFS):
            found = m
    return found


def lustre_fsname(source: str) -> Optional[str]:
    """``abcdefgh`` from ``10.1.2.3@tcp:/abcdefgh`` (or ``.../abcdefgh/subdir``); None if not Lustre-shaped."""
    if ":/" not in source:
        return None
    return source.rsplit(":/", 1)[1].split("/", 1)[0] or None


def lustre_nids(source: str) -> List[str]:
    """Every NID before ``:/`` (``10.1.2.3@tcp``), failover groups flattened."""
    if ":/" not in source:
        return []
    head = source.rsplit(":/", 1)[0]
    return [n for group in head.split(":") for n in group.split(",") if n]


def is_lustre_mount_of(m: Optional[Mount], mount_name: str) -> bool:
    """A live Lustre mount of the filesystem whose MountName is ``mount_name``, however its MGS is written."""
    return bool(m and m.fstype == LUSTRE and lustre_fsname(m.source) == mount_name)
