"""The one way hpq writes a file on the laptop: stage beside the target, fsync, rename over it.

Why: a write in place truncates the previous file first, so a full disk, a Ctrl-C or a crash
leaves half a template; and ``open(path, "w")`` follows a symlink into whatever it points at.
Here every file is written to a temporary file in the target's own folder, flushed and fsynced,
and only then renamed over the target (``os.replace``: atomic on one file system). A
:class:`Batch` stages every file of a command first and renames them all only when every one
was written, so a failure while writing leaves every previous file as it was (all or nothing).

Refusals are usage errors (exit 2) that name the path: a symlink on the way to a target or the
target itself being a symlink (a rename would replace the link, a plain write would follow it
out of the folder), a target that is a folder or a device, and a name over the system's limits.
Whether hpq may replace an existing file (it wrote it) is the caller's rule: see
``hpq.cfn.synth``'s manifest.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import tempfile
from pathlib import Path

from hpq.errors import HpqError, OperationFailed, UsageError
from hpq.signals_held import held_back
from hpq.text import file_kind, show

TEMP_SUFFIX = ".hpq-tmp"


def _show(path: Path | str) -> str:
    return show(str(path))


def lstat_or_none(path: Path) -> os.stat_result | None:
    """``lstat`` that answers None for a missing path and a usage error for one the system refuses."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise UsageError(f"{_show(path)} cannot be created: a part of its path is a file, not a folder") from None
    except OSError as exc:
        raise path_error(path, exc) from None


def path_error(path: Path | str, exc: OSError) -> HpqError:
    """An OSError about a path as one hpq error: the user's to fix (2) or the machine's (1)."""
    if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EEXIST,
                     errno.EISDIR, errno.EROFS):
        return UsageError(f"cannot write {_show(path)}: {exc.strerror}")
    return OperationFailed(f"cannot write {_show(path)}: {exc.strerror or exc}")


def check_no_links(path: Path, root: Path) -> None:
    """Refuse a symlink at ``path`` or at any folder between ``root`` and it.

    ``root`` is the folder the user named (it may itself be a link: that was the user's choice);
    below it, a link could lead a write anywhere, so none is followed.
    """
    path, root = Path(path), Path(root)
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise UsageError(f"{_show(path)} is outside {_show(root)}") from None
    current = root
    for part in rel.parts:
        current = current / part
        st = lstat_or_none(current)
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            raise UsageError(f"{_show(current)} is a symbolic link; hpq does not write through links "
                             "(remove it or choose another folder)")


def check_target(path: Path) -> os.stat_result | None:
    """The target's lstat (None when absent); a link, folder or device there is refused."""
    st = lstat_or_none(path)
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{_show(path)} is a symbolic link; hpq does not write through links "
                         "(remove it or choose another folder)")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{_show(path)} is in the way: it exists and is {file_kind(st.st_mode)}, not a file")
    return st


class Batch:
    """Files staged beside their targets, renamed into place together by :meth:`commit`.

    Use as a context manager: leaving it without ``commit`` (an error, Ctrl-C) removes every
    temporary file and every folder it created, so the previous state stays whole.
    """

    def __init__(self) -> None:
        self._staged: list[tuple[str, Path]] = []  # (temp path, target)
        self._made_dirs: list[Path] = []
        self._removals: list[Path] = []
        self.committed = False

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.committed:
            self.abort()

    def mkdirs(self, folder: Path) -> None:
        """Create ``folder`` and missing parents, remembering them so that an abort removes them."""
        missing = []
        current = Path(folder)
        while lstat_or_none(current) is None:
            missing.append(current)
            if current.parent == current:
                break
            current = current.parent
        for made in reversed(missing):
            try:
                os.mkdir(made)
            except OSError as exc:
                raise path_error(made, exc) from None
            self._made_dirs.append(made)

    def stage(self, target: Path, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to a temporary file in ``target``'s folder (flushed, fsynced)."""
        target = Path(target)
        self.mkdirs(target.parent)
        try:
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:200]}.", suffix=TEMP_SUFFIX)
        except OSError as exc:
            raise path_error(target, exc) from None
        self._staged.append((tmp, target))
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), mode & ~_umask())
                os.fsync(fh.fileno())
        except OSError as exc:
            raise path_error(target, exc) from None

    def remove(self, target: Path) -> None:
        """Remove ``target`` at commit time (after every staged file is in place)."""
        self._removals.append(Path(target))

    def commit(self) -> None:
        """Rename every staged file over its target, then remove what was marked for removal."""
        folders = set()
        # Ctrl-C waits until every rename is done (microseconds): never half of the new set in place.
        failed: tuple[Path, OSError] | None = None
        with held_back((signal.SIGINT, signal.SIGTERM)):
            try:
                for tmp, target in self._staged:
                    os.replace(tmp, target)
                    folders.add(target.parent)
            except OSError as exc:
                failed = (target, exc)
            else:
                self.committed = True
                self._finish(folders)
        if failed is not None:
            # A rename in one folder of one file system does not fail for want of space; if it
            # fails at all, say so plainly (the files renamed so far are already complete).
            self.abort()
            raise OperationFailed(f"cannot rename into {_show(failed[0])}: {failed[1].strerror}") from None

    def _finish(self, folders: set[Path]) -> None:
        """Remove what was marked for removal, then sync the folders the renames changed."""
        for target in self._removals:
            try:
                os.unlink(target)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise path_error(target, exc) from None
        for folder in folders:  # the renames themselves survive a power cut once the folder is synced
            try:
                fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)

    def abort(self) -> None:
        for tmp, _ in self._staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        self._staged = []
        for folder in reversed(self._made_dirs):
            try:
                os.rmdir(folder)
            except OSError:
                pass
        self._made_dirs = []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_file(target: Path | str, data: bytes | str, root: Path | str | None = None, mode: int = 0o644) -> None:
    """Write one file atomically; refuse links below ``root`` (default: the target's folder)."""
    target = Path(target)
    root = Path(root) if root is not None else target.parent
    check_no_links(target, root)
    check_target(target)
    with Batch() as batch:
        batch.stage(target, data.encode("utf-8") if isinstance(data, str) else data, mode)
        batch.commit()
