"""Mounting FSx the way a node shows it: IP NID in the mount table, autofs lines, modprobe, bounded retries.

Stand-in: tests/node_samples.py's mount.lustre (resolves the MGS name, fails like mount.lustre when it
cannot, records ``<ip>@tcp:/<name> <target> lustre ...`` in the node's mount table). Mount table lines
follow proc(5) and the kernel's Lustre source format (node_samples docstring). Discovery by tag against
moto: test_lifecycle_fsx.py.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from hpq.lifecycle import fsx, identity, mounts
from tests import node_samples
from tests.slurm_cluster import make_context


def node(tmp_path: Path, fail_first: int = 0, hosts: dict | None = None, **env: str):
    root = tmp_path / "node"
    table = Path(env.get("HPQ_PROC_MOUNTS") or root / "proc/mounts")
    calls = node_samples.write_fake_mount(tmp_path / "mount.lustre", hosts=hosts, fail_first=fail_first, table=table)
    modprobe = node_samples.write_recorder(tmp_path / "modprobe")
    settings = dict(dict(HPQ_MOUNT_CMD=str(tmp_path / "mount.lustre"), HPQ_MODPROBE_CMD=str(tmp_path / "modprobe"),
                         HPQ_DNS_WAIT_S="0.2", HPQ_FSX_MOUNT_RETRY_S="0"), **env)
    ctx = make_context(root, **settings)
    ctx.node = identity.NodeInfo("ml-cluster", "i-1", "worker-group-1-1", "worker-group-1", "worker",
                                 "10.1.92.200", "ml.p5.48xlarge", ["10.1.61.107"],
                                 fsx_dns_name=node_samples.FSX_DNS, fsx_mountname=node_samples.FSX_MOUNTNAME)
    return ctx, root, calls, modprobe


def table(ctx) -> str:
    return Path(ctx.s.proc_mounts).read_text()


def test_ip_nid_mount_counts_and_a_rerun_behind_an_autofs_line_changes_nothing(tmp_path):
    ctx, root, calls, modprobe = node(tmp_path)
    (root / "proc").mkdir(parents=True)
    Path(ctx.s.proc_mounts).write_text(node_samples.BASE_MOUNTS)
    first = fsx.run(ctx)
    assert f"the kernel shows {node_samples.FSX_IP}@tcp:/{node_samples.FSX_MOUNTNAME} (attempt 1 of 5)" in first
    assert f"{node_samples.FSX_IP}@tcp:/{node_samples.FSX_MOUNTNAME} {root}/fsx lustre" in table(ctx)  # never the DNS name
    assert modprobe.read_text().splitlines() == ["lnet", "lustre"]
    fstab = (root / "etc/fstab").read_text()
    assert f"{node_samples.FSX_DNS}@tcp:/{node_samples.FSX_MOUNTNAME} /fsx lustre {fsx.FSTAB_OPTIONS} 0 0" in fstab  # name, for boot
    # After a reboot with x-systemd.automount, systemd's autofs trap comes first in the table.
    Path(ctx.s.proc_mounts).write_text(node_samples.BASE_MOUNTS + node_samples.autofs_line(f"{root}/fsx") + "\n" +
                                       node_samples.lustre_mount_line(f"{root}/fsx") + "\n")
    mtime = (root / "etc/fstab").stat().st_mtime_ns
    again = fsx.run(ctx)
    assert f"already mounted ({node_samples.FSX_IP}@tcp:/{node_samples.FSX_MOUNTNAME})" in again and "fstab unchanged" in again
    assert (root / "etc/fstab").stat().st_mtime_ns == mtime
    assert len(calls.read_text().splitlines()) == 1 and len(modprobe.read_text().splitlines()) == 2


def test_mount_table_may_name_the_node_path(tmp_path):
    """A table written in the node's own terms (``/fsx``) while the node runs under HPQ_ROOT."""
    ctx, root, calls, _ = node(tmp_path)
    (root / "proc").mkdir(parents=True)
    Path(ctx.s.proc_mounts).write_text(node_samples.autofs_line() + "\n" + node_samples.lustre_mount_line("/fsx") + "\n")
    assert "already mounted" in fsx.run(ctx) and not calls.exists()


def test_only_an_autofs_trap_means_not_mounted_yet(tmp_path):
    ctx, root, calls, _ = node(tmp_path)
    (root / "proc").mkdir(parents=True)
    (root / "fsx").mkdir(parents=True)
    Path(ctx.s.proc_mounts).write_text(node_samples.autofs_line(f"{root}/fsx") + "\n")
    assert "mounted, the kernel shows" in fsx.run(ctx)
    assert len(calls.read_text().splitlines()) == 1


def test_failed_mounts_are_retried_boundedly_and_each_retry_is_logged(tmp_path, caplog):
    ctx, _, calls, _ = node(tmp_path, fail_first=2)
    with caplog.at_level(logging.INFO, logger="hpq-test.lifecycle"):
        result = fsx.run(ctx)
    assert "(attempt 3 of 5)" in result and len(calls.read_text().splitlines()) == 3
    retries = [r.getMessage() for r in caplog.records if "FSx mount attempt" in r.getMessage()]
    assert len(retries) == 2 and retries[0].startswith("FSx mount attempt 1 of 5 failed:")
    assert "Input/output error" in retries[0] and retries[1].startswith("FSx mount attempt 2 of 5 failed:")
    # Between attempts: a bounded wait for the name (here it never resolves: 0.2 s each, then on).
    assert sum("still does not resolve after 0s" in r.getMessage() for r in caplog.records) == 2


def test_a_mount_that_never_works_fails_after_the_last_attempt(tmp_path):
    ctx, root, calls, _ = node(tmp_path, hosts={"other.example": "10.9.9.9"}, HPQ_FSX_MOUNT_ATTEMPTS="3")
    t0 = time.time()
    with pytest.raises(fsx.FsxError, match="FSx mount failed after 3 attempt\\(s\\):.*Can't parse NID "
                                           f"'{node_samples.FSX_DNS}@tcp:/{node_samples.FSX_MOUNTNAME}'"):
        fsx.run(ctx)
    assert time.time() - t0 < 10 and len(calls.read_text().splitlines()) == 3
    assert list((root / "fsx").iterdir()) == [] and not (root / "etc/fstab").exists()  # nothing written


def test_mount_returning_0_without_a_mount_is_not_trusted(tmp_path):
    ctx, root, _, _ = node(tmp_path, HPQ_FSX_MOUNT_ATTEMPTS="2")
    ctx.s.mount_cmd = ["true"]
    with pytest.raises(fsx.FsxError, match="mount returned 0 but .* shows nothing at .*fsx, not a lustre mount"):
        fsx.run(ctx)
    assert list((root / "fsx").iterdir()) == []  # the write test never ran in the bare directory


def test_missing_modprobe_is_a_warning_and_the_mount_decides(tmp_path, caplog):
    ctx, _, _, _ = node(tmp_path, HPQ_MODPROBE_CMD=str(tmp_path / "no-such-modprobe"))
    with caplog.at_level(logging.WARNING, logger="hpq-test.lifecycle"):
        assert "mounted, the kernel shows" in fsx.run(ctx)
    assert "no-such-modprobe lnet: [Errno 2]" in caplog.text


def test_something_else_mounted_at_fsx_is_an_error(tmp_path):
    ctx, root, calls, _ = node(tmp_path)
    (root / "proc").mkdir(parents=True)
    Path(ctx.s.proc_mounts).write_text(node_samples.lustre_mount_line(f"{root}/fsx", mountname="zzzzzzzz") + "\n")
    with pytest.raises(fsx.FsxError, match="already mounted from 10.1.40.25@tcp:/zzzzzzzz \\(lustre\\), not FSx"):
        fsx.run(ctx)
    Path(ctx.s.proc_mounts).write_text(f"10.1.0.9:/export {root}/fsx nfs4 rw,relatime,vers=4.1 0 0\n")
    with pytest.raises(fsx.FsxError, match="already mounted from 10.1.0.9:/export \\(nfs4\\)"):
        fsx.run(ctx)
    assert not calls.exists()


def test_fstab_block_replaced_not_appended(tmp_path):
    ctx, root, _, _ = node(tmp_path)
    (root / "etc").mkdir(parents=True)
    (root / "etc/fstab").write_text("UUID=abc / ext4 defaults 0 1\nold@tcp:/x /fsx lustre defaults 0 0\n")
    for dns, mount_name in (("a", "x"), ("b", "y"), ("b", "y")):
        fsx.update_fstab(ctx, dns, mount_name)
    text = (root / "etc/fstab").read_text()
    assert text.startswith("UUID=abc / ext4 defaults 0 1\n")
    assert text.count("BEGIN hpq managed: fsx") == 1 and text.count("/fsx lustre") == 1
    assert "b@tcp:/y /fsx lustre" in text


def test_mount_table_parsing():
    lines = ("10.1.40.25@tcp,10.1.40.26@tcp:10.1.41.25@tcp:/abcdefgh/sub /mnt/my\\040data lustre rw 0 0\n"
             + node_samples.autofs_line() + "\n" + node_samples.lustre_mount_line() + "\n")
    t = mounts.parse(lines)
    assert t[0].target == "/mnt/my data" and mounts.lustre_fsname(t[0].source) == "abcdefgh"
    assert mounts.lustre_nids(t[0].source) == ["10.1.40.25@tcp", "10.1.40.26@tcp", "10.1.41.25@tcp"]
    assert mounts.at(t, ["/fsx"]) == t[2] and mounts.at(t, ["/fsx"], include_autofs=True) == t[2]
    assert mounts.at(t[:2], ["/fsx"]) is None and mounts.at(t[:2], ["/fsx"], include_autofs=True) == t[1]
    assert mounts.is_lustre_mount_of(t[2], node_samples.FSX_MOUNTNAME) and not mounts.is_lustre_mount_of(t[2], "abcdefg")


def test_waiting_for_a_name_is_bounded(tmp_path):
    ctx, _, _, _ = node(tmp_path)
    t0 = time.time()
    assert fsx.wait_for_name(ctx, "localhost", 5) and time.time() - t0 < 2
    t0 = time.time()
    assert not fsx.wait_for_name(ctx, "no-such-host.invalid", 0.5, poll=0.1)
    assert 0.4 < time.time() - t0 < 5


def test_proc_mounts_setting_is_used_as_given(tmp_path):
    elsewhere = tmp_path / "mounts-sample"
    ctx, root, _, _ = node(tmp_path, HPQ_PROC_MOUNTS=str(elsewhere))
    assert ctx.s.proc_mounts == str(elsewhere)
    elsewhere.write_text(node_samples.lustre_mount_line("/fsx") + "\n")
    assert fsx.shared_dir(ctx) == str(root / "fsx")
    os.unlink(elsewhere)
    assert fsx.shared_dir(ctx) is None
