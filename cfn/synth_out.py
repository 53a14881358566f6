"""Where ``hpq synth`` puts its templates: OUT/<variant>/<file>.json, all or nothing, only over its own files.

Why a manifest with hashes: the help promises that only files hpq wrote are replaced. A list of
names alone cannot tell hpq's root.json from the user's own (or an edited copy), and a manifest
anyone could have written would let a stranger's file name what hpq may overwrite. So
``.hpq-synth-files`` starts with a fixed header and lists ``<sha256>  <name>`` for each file hpq
wrote; a file is replaced or removed only when its bytes still hash to what is listed.
Anything else (a file not listed, even one with the same bytes; an edited one; a manifest
without the header; a link) is refused with exit 2 naming the path, before anything is rendered
or written.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from hpq import atomic
from hpq.errors import UsageError
from hpq.text import show

# Not *.json, so `hpq lint` never takes it for a template.
MANIFEST_FILE = ".hpq-synth-files"
MANIFEST_HEADER = "# hpq synth: files hpq wrote in this folder (sha256 and name); only these are replaced or removed"
MANIFEST_MAX_BYTES = 1 << 20
_LINE = re.compile(r"([0-9a-f]{64})  ([A-Za-z0-9_][A-Za-z0-9._-]{0,200})")
_HINT = "move it away or choose another -o (hpq replaces only files it wrote)"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _show(path: Path) -> str:
    return show(str(path))


def _read(path: Path, limit: int) -> bytes:
    """A regular file's bytes, not following a link (checked before), at most ``limit`` + 1."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise atomic.path_error(path, exc) from None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit + 1)


def read_manifest(folder: Path) -> dict[str, str]:
    """name -> sha256 of what hpq wrote in ``folder`` ({} when there is no manifest)."""
    path = folder / MANIFEST_FILE
    st = atomic.check_target(path)
    if st is None:
        return {}
    foreign = UsageError(f"{_show(path)} was not written by this hpq; {_HINT}")
    if st.st_size > MANIFEST_MAX_BYTES:
        raise foreign
    try:
        lines = _read(path, MANIFEST_MAX_BYTES).decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise foreign from None
    if not lines or lines[0] != MANIFEST_HEADER or lines[-1] != "":
        raise foreign
    listed: dict[str, str] = {}
    for line in lines[1:-1]:
        m = _LINE.fullmatch(line)
        if not m or m.group(2) in listed or m.group(2) == MANIFEST_FILE:
            raise foreign
        listed[m.group(2)] = m.group(1)
    return listed


def manifest_text(files: dict[str, bytes]) -> bytes:
    body = "".join(f"{_sha(data)}  {name}\n" for name, data in sorted(files.items()))
    return f"{MANIFEST_HEADER}\n{body}".encode()


def precheck(out_dir: Path, trees: dict[str, list[str]]) -> None:
    """Refuse before any work what no content can make writable: links, things in the way, foreign manifests."""
    out_dir = Path(out_dir)
    for sub, names in trees.items():
        folder = out_dir / sub
        atomic.check_no_links(folder / MANIFEST_FILE, out_dir)
        fst = atomic.lstat_or_none(folder)
        if fst is None:
            continue
        if not stat.S_ISDIR(fst.st_mode):
            raise UsageError(f"{_show(folder)} is in the way: it exists and is not a folder")
        listed = read_manifest(folder)
        for name in names:
            _check_owned(folder / name, listed, False)


def _check_owned(path: Path, listed: dict[str, str], trust_existing: bool) -> os.stat_result | None:
    """The target's lstat; refused unless absent, or a file hpq wrote and nobody changed since."""
    cur = atomic.check_target(path)
    if cur is None or trust_existing:
        return cur
    if path.name not in listed:
        raise UsageError(f"{_show(path)} was not written by hpq; {_HINT}")
    if _sha(_read(path, cur.st_size)) != listed[path.name]:
        raise UsageError(f"{_show(path)} was changed since hpq wrote it; {_HINT}")
    return cur


def write_trees(out_dir: Path, trees: dict[str, dict[str, bytes]], trust_existing: bool = False) -> list[Path]:
    """Write OUT/<sub>/<name> for every tree; return every target path (written or already equal).

    All or nothing: every target is checked, then every changed file is staged beside its target,
    and only when all are staged are they renamed into place. A refusal or a failure while staging
    (full disk, Ctrl-C) leaves every previous file and folder as it was. ``trust_existing`` lets
    files without a manifest entry be replaced (the test goldens, which git tracks instead).
    """
    out_dir = Path(out_dir)
    st = atomic.lstat_or_none(out_dir)
    if st is not None and not stat.S_ISDIR(os.stat(out_dir).st_mode):
        raise UsageError(f"{_show(out_dir)} exists and is not a folder")
    targets: list[Path] = []
    with atomic.Batch() as batch:
        staged: list[tuple[Path, bytes]] = []
        for sub, files in trees.items():
            folder = out_dir / sub
            atomic.check_no_links(folder / MANIFEST_FILE, out_dir)
            fst = atomic.lstat_or_none(folder)
            if fst is not None and not stat.S_ISDIR(fst.st_mode):
                raise UsageError(f"{_show(folder)} is in the way: it exists and is not a folder")
            listed = read_manifest(folder) if fst is not None else {}
            for name, data in files.items():
                path = folder / name
                targets.append(path)
                cur = _check_owned(path, listed, trust_existing)
                if cur is not None and cur.st_size == len(data) and _read(path, len(data)) == data:
                    continue  # unchanged: not rewritten, its modification time stays
                staged.append((path, data))
            for name, digest in listed.items():  # a file an earlier synth wrote and this one does not
                path = folder / name
                old = atomic.lstat_or_none(path)
                if name not in files and old is not None and stat.S_ISREG(old.st_mode) \
                        and _sha(_read(path, old.st_size)) == digest:
                    batch.remove(path)
            manifest = manifest_text(files)
            if fst is None or read_manifest_bytes(folder) != manifest:
                staged.append((folder / MANIFEST_FILE, manifest))
        for path, data in staged:
            batch.stage(path, data)
        batch.commit()
    return targets


def read_manifest_bytes(folder: Path) -> bytes | None:
    path = folder / MANIFEST_FILE
    return _read(path, MANIFEST_MAX_BYTES) if atomic.lstat_or_none(path) is not None else None
