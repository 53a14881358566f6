"""Each Slurm node runs its own daemon only: slurmd never on the controller, slurmctld never on workers/login.

AWS's reference start_slurm.sh (awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/
base-config/start_slurm.sh) renames ``/etc/systemd/system/slurmd.service`` to
``slurmd_DO_NOT_START_ON_CONTROLLER.service`` on the controller and ``slurmctld.service`` likewise on compute and
login nodes. The AMI's slurmd unit deletes ``/opt/slurm/etc/slurm.conf`` in ``ExecStartPre`` (hyperpod-mental-model.md
in the same repo; tests/node_samples.AMI_SLURMD_UNIT), so a slurmd started on the controller at boot would delete
the slurm.conf the controller serves. The slurm step stops, disables and masks the other daemon (systemd.unit(5):
a unit linked to /dev/null is masked and never started), idempotently.

systemd itself is not PID 1 here. The lifecycle's one service manager runs ``systemctl``; here that is hpq's
systemctl stand-in (standins/systemctl.py) for the node root, which refuses what systemctl refuses: ``mask`` of a
unit whose file is in /etc/systemd/system fails ("File ... already exists"), start of a masked unit fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hpq.lifecycle import identity, services, slurm
from hpq.standins import systemctl
from tests.slurm_cluster import make_context

KEEPER = f"{sys.executable} -c 'import time; time.sleep(300)'"
# A vendor unit with an [Install] section, as Slurm's packaged units have (WantedBy=multi-user.target).
UNIT = "[Unit]\nDescription=%s\n\n[Service]\nType=simple\nExecStart=" + KEEPER + "\n\n[Install]\nWantedBy=multi-user.target\n"


def node_root(tmp_path: Path, unit: str) -> Path:
    """A node root with the AMI's unit for ``unit`` in /etc/systemd/system, enabled (its wants link)."""
    root = tmp_path / "node"
    etc = root / "etc/systemd/system"
    (etc / "multi-user.target.wants").mkdir(parents=True)
    (etc / unit).write_text(UNIT % unit)
    os.symlink(f"/etc/systemd/system/{unit}", etc / "multi-user.target.wants" / unit)
    return root


def with_role(ctx, role: str):
    ctx.node = identity.NodeInfo("c", "i-1", "n", "g", role, "10.0.0.2", "ml.m5.xlarge", ["10.0.0.1"])
    return ctx


@pytest.mark.parametrize(("role", "unit"), [(identity.CONTROLLER, "slurmd.service"),
                                            (identity.WORKER, "slurmctld.service"),
                                            (identity.LOGIN, "slurmctld.service")])
def test_the_other_daemon_is_stopped_disabled_and_masked(tmp_path, role, unit):
    root = node_root(tmp_path, unit)
    ctx = with_role(make_context(root), role)
    mgr = ctx.services
    mgr.ensure_running(unit)  # the AMI started it at boot
    standin = systemctl.Systemd(str(root))
    pid = standin.main_pid(unit)
    assert pid
    try:
        result = slurm.keep_other_daemon_off(ctx, ctx.node)
        assert unit in result and "masked" in result
        assert standin.main_pid(unit) is None and not systemctl.pid_alive(pid)
        etc = root / "etc/systemd/system"
        assert os.readlink(etc / unit) == "/dev/null"
        aside = etc / unit.replace(".service", "_DO_NOT_START_ON_CONTROLLER.service")
        assert aside.read_text() == UNIT % unit  # AWS's name for the set-aside unit file, content kept
        assert not (etc / "multi-user.target.wants" / unit).exists()  # disabled
        assert mgr.is_masked(unit)
        with pytest.raises(services.ServiceError, match="masked"):
            mgr.ensure_running(unit)
        assert "already masked" in slurm.keep_other_daemon_off(ctx, ctx.node)  # a second run changes nothing
        assert os.readlink(etc / unit) == "/dev/null" and aside.read_text() == UNIT % unit
    finally:
        mgr.stop(unit)


def test_a_node_without_the_other_unit_gets_it_masked_too(tmp_path):
    """The rehearsal's controller has no slurmd unit: masked anyway, so a package installed later stays off."""
    root = tmp_path / "node"
    ctx = with_role(make_context(root), identity.CONTROLLER)
    assert "masked" in slurm.keep_other_daemon_off(ctx, ctx.node)
    assert os.readlink(root / "etc/systemd/system/slurmd.service") == "/dev/null"
    assert not list((root / "etc/systemd/system").glob("*_DO_NOT_START_*"))


def test_the_node_keeps_its_own_daemon(tmp_path):
    root = node_root(tmp_path, "slurmctld.service")
    ctx = with_role(make_context(root), identity.CONTROLLER)
    slurm.keep_other_daemon_off(ctx, ctx.node)
    assert not ctx.services.is_masked("slurmctld.service")
    assert (root / "etc/systemd/system/slurmctld.service").is_file()


SYSTEMCTL = r'''#!/usr/bin/env python3
"""systemctl stand-in: acts on unit files under $HPQ_TEST_SYSTEMD_ROOT as systemctl does under /."""
import os, sys
root = os.environ["HPQ_TEST_SYSTEMD_ROOT"]
etc = root + "/etc/systemd/system"
with open(os.environ["HPQ_TEST_SYSTEMCTL_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\n")
verb, args = sys.argv[1], [a for a in sys.argv[2:] if not a.startswith("-")]
if verb == "mask":
    for unit in args:
        path = os.path.join(etc, unit)
        if os.path.islink(path) and os.readlink(path) == "/dev/null":
            continue
        if os.path.lexists(path):
            sys.stderr.write("Failed to mask unit: File %s already exists.\n" % path.replace(root, "", 1))
            sys.exit(1)
        os.symlink("/dev/null", path)
        print("Created symlink %s -> /dev/null." % path.replace(root, "", 1))
elif verb == "disable":
    for unit in args:
        for wants in os.listdir(etc) if os.path.isdir(etc) else []:
            link = os.path.join(etc, wants, unit)
            if wants.endswith(".wants") and os.path.islink(link):
                os.unlink(link)
elif verb == "is-active":
    sys.exit(3)
sys.exit(0)
'''


def test_systemd_manager_sets_the_unit_file_aside_before_systemctl_mask(tmp_path, monkeypatch):
    """systemctl mask refuses a unit whose file is in /etc/systemd/system (the AMI's slurmd.service is there): the
    manager moves it to AWS's name first, then masks, then reloads; a second run only stops it again."""
    root = node_root(tmp_path, "slurmd.service")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "systemctl").write_text(SYSTEMCTL)
    (bindir / "systemctl").chmod(0o755)
    log = tmp_path / "systemctl.log"
    monkeypatch.setenv("HPQ_TEST_SYSTEMD_ROOT", str(root))
    monkeypatch.setenv("HPQ_TEST_SYSTEMCTL_LOG", str(log))
    ctx = with_role(make_context(root, HPQ_SYSTEMCTL_CMD=str(bindir / "systemctl")), identity.CONTROLLER)
    assert isinstance(ctx.services, services.SystemdManager)
    assert "masked" in slurm.keep_other_daemon_off(ctx, ctx.node)
    assert log.read_text().splitlines() == ["stop slurmd.service", "disable slurmd.service", "mask slurmd.service",
                                            "daemon-reload"]
    etc = root / "etc/systemd/system"
    assert os.readlink(etc / "slurmd.service") == "/dev/null"
    assert (etc / "slurmd_DO_NOT_START_ON_CONTROLLER.service").is_file()
    assert not (etc / "multi-user.target.wants/slurmd.service").exists()
    log.write_text("")
    assert "already masked" in slurm.keep_other_daemon_off(ctx, ctx.node)
    assert log.read_text().splitlines() == ["stop slurmd.service"]

