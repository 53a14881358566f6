"""Every node file the lifecycle writes goes through lifecycle/files.py: atomic, symlink-safe, whole on failure.

Real filesystem behaviour throughout: a read-only folder is a read-only bind mount in a private mount namespace
(``unshare -m``; root ignores mode bits) or, without root, a 0555 folder; a failure in the middle of a write is a
real OSError raised by the rename (ENOSPC) or by fsync. Each check has its broken twin: the same write through a
link that stays in the folder, or to a writable folder, succeeds.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpq.lifecycle import files, fsx
from tests import node_samples
from tests.slurm_cluster import make_context


def test_a_link_leaving_the_folder_is_refused_and_its_target_untouched(tmp_path):
    outside = tmp_path / "home/user/notes.txt"
    outside.parent.mkdir(parents=True)
    outside.write_text("the user's file\n")
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "environment").symlink_to(outside)
    with pytest.raises(files.WriteRefused, match=r"environment is a symlink to .*notes.txt, outside its folder"):
        files.set_block(str(etc / "environment"), "nccl", ["NCCL_DEBUG=WARN"])
    with pytest.raises(files.WriteRefused, match="outside its folder"):
        files.write_file(str(etc / "environment"), "x\n")
    assert outside.read_text() == "the user's file\n"
    assert (etc / "environment").is_symlink()
    # Relative links that climb out are the same case.
    (etc / "fstab").symlink_to("../home/user/notes.txt")
    with pytest.raises(files.WriteRefused):
        files.write_file(str(etc / "fstab"), "x\n")
    assert outside.read_text() == "the user's file\n" and os.listdir(etc) == sorted(os.listdir(etc))


def test_a_link_within_the_folder_is_followed_and_kept(tmp_path):
    """Broken twin of the refusal: a link to a file in the same folder writes that file, the link stays."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "environment.real").write_text("PATH=/usr/bin\n")
    (etc / "environment").symlink_to("environment.real")
    assert files.set_block(str(etc / "environment"), "nccl", ["NCCL_DEBUG=WARN"])
    assert (etc / "environment").is_symlink()
    assert files.block_lines((etc / "environment.real").read_text(), "nccl") == ["NCCL_DEBUG=WARN"]
    assert (etc / "environment.real").read_text().startswith("PATH=/usr/bin\n")


def _write_in_read_only_folder(folder: Path, code: str) -> subprocess.CompletedProcess:
    """Run ``code`` (Python, with ``files`` imported) with ``folder`` read-only."""
    prog = "from hpq.lifecycle import files\n" + code
    if os.geteuid() == 0:
        argv = ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$1" "$1" && exec "$2" -c "$3"', "sh",
                str(folder), sys.executable, prog]
    else:
        folder.chmod(0o555)
        argv = [sys.executable, "-c", prog]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)
    finally:
        folder.chmod(0o755)


def test_a_read_only_folder_fails_cleanly_and_keeps_the_previous_file(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "fstab").write_text("UUID=abc / ext4 defaults 0 1\n")
    res = _write_in_read_only_folder(etc, f"""
try:
    files.set_block({str(etc / 'fstab')!r}, "fsx", ["a@tcp:/b /fsx lustre defaults 0 0"])
except files.WriteRefused as exc:
    print("refused:", exc)
""")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"refused: cannot write {etc}/fstab: ")
    assert "Read-only file system" in res.stdout or "Permission denied" in res.stdout
    assert "(the previous file, if any, is unchanged)" in res.stdout
    assert (etc / "fstab").read_text() == "UUID=abc / ext4 defaults 0 1\n"
    assert os.listdir(etc) == ["fstab"]
    # Broken twin: the same call in the same folder, writable, succeeds.
    files.set_block(str(etc / "fstab"), "fsx", ["a@tcp:/b /fsx lustre defaults 0 0"])
    assert "a@tcp:/b /fsx lustre" in (etc / "fstab").read_text()


@pytest.mark.parametrize("where", ["fsync", "replace"])
def test_a_failure_mid_write_leaves_the_previous_content_whole(tmp_path, monkeypatch, where):
    """A full disk or an I/O error while writing (fsync) or at the rename: the old file stays byte for byte and
    no temporary file is left behind."""
    target = tmp_path / "environment"
    target.write_text("KEEP=1\n")
    real = getattr(os, where)

    def failing(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, where, failing)
    with pytest.raises(files.WriteRefused, match="No space left on device"):
        files.set_block(str(target), "nccl", ["NCCL_DEBUG=WARN"])
    monkeypatch.setattr(os, where, real)
    assert target.read_text() == "KEEP=1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["environment"]


def test_write_sets_mode_and_owner_before_the_file_appears(tmp_path, monkeypatch):
    """The temp file gets its mode first, so a key never exists world-readable, not even for a moment."""
    seen = []
    real = os.replace

    def spy(src, dst):
        seen.append(os.stat(src).st_mode & 0o7777)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    files.write_file(str(tmp_path / "munge.key"), b"k" * 32, 0o400)
    monkeypatch.setattr(os, "replace", real)
    assert seen == [0o400] and (tmp_path / "munge.key").stat().st_mode & 0o7777 == 0o400


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\x0bb", "a\x0cb", "a\x85b", "a\u2028b", "a\x00b",
                                 "# END hpq managed: fsx", "# BEGIN hpq managed: x"])
def test_a_block_line_that_is_not_one_line_is_refused(tmp_path, bad):
    target = tmp_path / "environment"
    target.write_text("KEEP=1\n")
    with pytest.raises(files.LineRefused):
        files.set_block(str(target), "nccl", ["NCCL_DEBUG=WARN", bad])
    assert target.read_text() == "KEEP=1\n"
    files.set_block(str(target), "nccl", ["NCCL_DEBUG=WARN", "a\tb"])  # broken twin: a tab is fine
    assert files.block_lines(target.read_text(), "nccl") == ["NCCL_DEBUG=WARN", "a\tb"]


def test_other_lines_are_kept_byte_for_byte(tmp_path):
    """Lines the lifecycle does not own come back exactly: CRLF, form feeds and NEL inside them included."""
    text = "UUID=abc / ext4 defaults 0 1\r\n# a comment\x0cwith a form feed\nLABEL=x\x85y /data xfs defaults 0 2\n"
    out = files.replace_block(text, "fsx", ["a@tcp:/b /fsx lustre defaults 0 0"])
    assert out.startswith(text)
    assert files.replace_block(out, "fsx", []) == text


def test_the_lifecycle_fails_the_step_when_etc_environment_leaves_its_folder(tmp_path, imds_factory):
    """End to end through the bundle's on_create.sh: nccl-env meets /etc/environment linked to a user's file; the
    step fails with one line naming the link, the user's file is untouched, the run exits 1."""
    from tests.lifecycle.test_lifecycle_eks import IID, eks_node

    entry = node_samples.build_bundle(tmp_path / "bucket/lifecycle")
    root = eks_node(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/environment").symlink_to(victim)
    srv = imds_factory({"": node_samples.imds_answers(IID, "g5.48xlarge")})
    res = node_samples.run_on_create(entry, dict(HPQ_ROOT=str(root), HPQ_IMDS_URL=srv.url, HPQ_SYSTEMCTL_CMD=node_samples.systemctl_standin_for(root)),
                           "--steps", "identify,nccl-env")
    assert res.returncode == 1
    assert f"step nccl-env failed: {root}/etc/environment is a symlink to {victim}, outside its folder" in res.stdout
    assert victim.read_text() == "precious\n" and "Traceback" not in res.stdout + res.stderr


def test_fstab_is_built_from_checked_fields_only(tmp_path):
    ctx = make_context(tmp_path / "node")
    for dns, mount_name in ((node_samples.FSX_DNS + "\nevil /etc lustre", node_samples.FSX_MOUNTNAME), ("fs-1 x", node_samples.FSX_MOUNTNAME),
                            (node_samples.FSX_DNS, "abc defg"), (node_samples.FSX_DNS, "a\nb")):
        with pytest.raises(fsx.FsxError, match="not mounting, no fstab line written"):
            fsx.update_fstab(ctx, dns, mount_name)
    assert not (tmp_path / "node/etc/fstab").exists()
    fsx.update_fstab(ctx, node_samples.FSX_DNS, node_samples.FSX_MOUNTNAME)
    fields = [ln.split() for ln in (tmp_path / "node/etc/fstab").read_text().splitlines() if not ln.startswith("#")]
    assert fields == [[f"{node_samples.FSX_DNS}@tcp:/{node_samples.FSX_MOUNTNAME}", "/fsx", "lustre", fsx.FSTAB_OPTIONS, "0", "0"]]


def test_node_info_written_by_identify_is_json_read_back(tmp_path):
    """The node info round-trips through the same writer (a non-object or non-UTF-8 file is refused)."""
    path = tmp_path / "node-info.json"
    files.write_file(str(path), json.dumps({"a": 1}))
    assert files.read_json(str(path)) == {"a": 1}
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(files.InputError, match="not UTF-8"):
        files.read_json(str(path))
    path.write_text("[" * 100000)
    with pytest.raises(files.InputError):
        files.read_json(str(path))
