"""The systemctl stand-in (standins/systemctl.py) against systemd's documented semantics.

References: systemctl(1) https://www.freedesktop.org/software/systemd/man/latest/systemctl.html (verbs, "Exit
status"), systemd.unit(5) https://www.freedesktop.org/software/systemd/man/latest/systemd.unit.html (drop-in
order, masking, conditions), systemd.service(5)
https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html (ExecStart= reset, Type=). Each
check runs the shim the rehearsal puts on a node's PATH, as a command, and reads what it answers and what
runs: a stand-in that ran a unit's old ExecStart, or the drop-ins in the wrong order, fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpq.standins import systemctl

SLEEP = f"{sys.executable} -c 'import sys, time; time.sleep(60)'"


@pytest.fixture
def node(tmp_path):
    """A node root with the stand-in's shim; ``node.ctl(*args)`` runs it; every unit is stopped at the end."""
    root = tmp_path / "root"
    (root / "lib/systemd/system").mkdir(parents=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shim = systemctl.install(str(tmp_path / "bin"), str(root))

    class Node:
        def __init__(self):
            self.root = root

        def ctl(self, *args: str) -> subprocess.CompletedProcess:
            return subprocess.run([shim, *args], capture_output=True, text=True, timeout=60)

        def write(self, rel: str, text: str) -> None:
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

        def argv(self, unit: str) -> list[str]:
            pid = int((root / f"run/hpq/services/{unit}.pid").read_text())
            return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]

    n = Node()
    yield n
    for pid_file in (root / "run/hpq/services").glob("*.pid"):
        n.ctl("stop", pid_file.name[: -len(".pid")])


def test_drop_ins_apply_in_file_name_order_etc_over_lib(node):
    """Vendor file, then every <unit>.d/*.conf sorted by file name; /etc's file of a name hides /lib's."""
    node.write("lib/systemd/system/d.service", f"[Service]\nEnvironment=A=vendor B=vendor C=vendor\nExecStart={SLEEP} $A $B $C\n")
    node.write("lib/systemd/system/d.service.d/20-b.conf", "[Service]\nEnvironment=B=lib20\n")
    node.write("lib/systemd/system/d.service.d/30-c.conf", "[Service]\nEnvironment=C=lib30\n")
    node.write("etc/systemd/system/d.service.d/10-a.conf", "[Service]\nEnvironment=A=etc10 C=etc10\n")
    node.write("etc/systemd/system/d.service.d/20-b.conf", "[Service]\nEnvironment=B=etc20\n")
    res = node.ctl("start", "d")
    assert res.returncode == 0, res.stderr
    assert node.argv("d.service")[-3:] == ["etc10", "etc20", "lib30"]
    # Broken twin: the same drop-ins read in reverse order would leave C=etc10 and B=lib20.


def test_exec_start_needs_a_reset_in_a_drop_in(node):
    """systemd.service(5): ``ExecStart=`` empties the list; a second command without it is refused (not oneshot)."""
    node.write("lib/systemd/system/x.service", f"[Service]\nExecStart={SLEEP} vendor\n")
    node.write("etc/systemd/system/x.service.d/hpq.conf", f"[Service]\nExecStart={SLEEP} ours\n")
    res = node.ctl("start", "x.service")
    assert res.returncode == 1 and "more than one ExecStart= setting" in res.stderr
    assert node.ctl("is-active", "x").returncode == 3
    node.write("etc/systemd/system/x.service.d/hpq.conf", f"[Service]\nExecStart=\nExecStart={SLEEP} ours\n")
    assert node.ctl("start", "x.service").returncode == 0
    assert node.argv("x.service")[-1] == "ours"


def test_a_masked_unit_is_refused_and_mask_refuses_a_real_file(node):
    node.write("etc/systemd/system/m.service", f"[Service]\nExecStart={SLEEP}\n")
    res = node.ctl("mask", "m.service")
    assert res.returncode == 1 and "Failed to mask unit: File /etc/systemd/system/m.service already exists." in res.stderr
    (node.root / "etc/systemd/system/m.service").rename(node.root / "lib/systemd/system/m.service")
    res = node.ctl("mask", "m.service")
    assert res.returncode == 0 and os.readlink(node.root / "etc/systemd/system/m.service") == "/dev/null"
    res = node.ctl("start", "m.service")
    assert (res.returncode, res.stderr) == (1, "Failed to start m.service: Unit m.service is masked.\n")
    assert node.ctl("show", "-p", "LoadState,ActiveState", "m").stdout == "LoadState=masked\nActiveState=inactive\n"


def test_an_unknown_unit_exits_5_and_is_inactive(node):
    res = node.ctl("start", "nope.service")
    assert (res.returncode, res.stderr) == (5, "Failed to start nope.service: Unit nope.service not found.\n")
    res = node.ctl("stop", "nope")
    assert (res.returncode, res.stderr) == (5, "Failed to stop nope.service: Unit nope.service not loaded.\n")
    res = node.ctl("is-active", "nope.service")
    assert (res.returncode, res.stdout) == (3, "inactive\n")  # systemctl(1): 3, "unit is not active"
    assert node.ctl("is-active", "--quiet", "nope").stdout == ""
    assert node.ctl("frobnicate", "x").returncode == 1


def test_a_running_unit_keeps_its_config_until_daemon_reload(node):
    node.write("lib/systemd/system/r.service", f"[Service]\nExecStart={SLEEP} one\n")
    assert node.ctl("start", "r").returncode == 0 and node.ctl("is-active", "r").stdout == "active\n"
    node.write("etc/systemd/system/r.service.d/hpq.conf", f"[Service]\nExecStart=\nExecStart={SLEEP} two\n")
    res = node.ctl("restart", "r")
    assert res.returncode == 0 and "Run 'systemctl daemon-reload' to reload units." in res.stderr
    assert node.argv("r.service")[-1] == "one"
    assert node.ctl("daemon-reload").returncode == 0
    assert node.ctl("restart", "r").returncode == 0 and node.argv("r.service")[-1] == "two"


def test_conditions_skip_environment_files_refuse(node):
    node.write("lib/systemd/system/c.service",
               f"[Unit]\nConditionPathExists=/etc/needed\n[Service]\nExecStart={SLEEP}\n")
    res = node.ctl("start", "c")
    assert res.returncode == 0 and node.ctl("is-active", "c").returncode == 3  # skipped, not failed
    node.write("etc/needed", "")
    assert node.ctl("start", "c").returncode == 0 and node.ctl("is-active", "c").returncode == 0
    node.write("lib/systemd/system/e.service", f"[Service]\nEnvironmentFile=/etc/missing\nExecStart={SLEEP}\n")
    res = node.ctl("start", "e")
    assert res.returncode == 1 and "Failed to load environment files" in res.stderr
    assert node.ctl("is-active", "e").stdout == "failed\n"


def test_a_simple_service_that_dies_reads_failed(node):
    node.write("lib/systemd/system/dies.service", "[Service]\nExecStart=/bin/sh -c 'echo boom; exit 3'\n")
    assert node.ctl("start", "dies").returncode == 0  # systemd.service(5): simple is started once forked
    deadline = time.time() + 10  # a loaded host may take a while to run even /bin/sh
    while node.ctl("is-active", "dies").returncode == 0 and time.time() < deadline:
        time.sleep(0.1)
    res = node.ctl("is-active", "dies")
    assert (res.returncode, res.stdout) == (3, "failed\n")
    assert "boom" in (node.root / "var/log/hpq/dies.service.log").read_text()


def test_enable_and_disable_follow_the_install_section(node):
    node.write("lib/systemd/system/w.service", f"[Service]\nExecStart={SLEEP}\n[Install]\nWantedBy=multi-user.target\n")
    assert node.ctl("enable", "w").returncode == 0
    link = node.root / "etc/systemd/system/multi-user.target.wants/w.service"
    assert os.readlink(link) == "/lib/systemd/system/w.service"
    assert node.ctl("disable", "w").returncode == 0 and not os.path.lexists(link)
    res = node.ctl("enable", "gone")
    assert res.returncode == 1 and "Unit file gone.service does not exist." in res.stderr
