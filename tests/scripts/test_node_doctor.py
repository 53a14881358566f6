"""python3 -m hpq.scripts.node_doctor end to end on one node, with stand-in tools that replay what the
real nvidia-smi and dmesg printed on a healthy 2x H200 host (tests/data/node_tools/h200-x2), and twins
of them that show a fault. The verdict is PASS only with every check read; a tool that cannot be read
makes it INCONCLUSIVE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpq.lifecycle import catalog
from hpq.scripts import node_doctor

DATA = Path(__file__).parents[1] / "data" / "node_tools" / "h200-x2"
TWO_H200 = catalog.InstanceType("ml.test.2xh200", catalog.GPU, "H200", 2, 0, False, 100)


def _tools(tmp_path: Path, smi_xml: str, nvlink: str, kernel_log: str, hang_smi: bool = False) -> Path:
    """A folder of stand-ins: nvidia-smi prints the given captures for -q -x and nvlink -s; dmesg the log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("smi.xml", smi_xml), ("nvlink.txt", nvlink), ("kernel.log", kernel_log)):
        (tmp_path / name).write_text(text)
    smi = "sleep 60\n" if hang_smi else (
        'case "$1 $2" in\n'
        f'  "-q -x") cat {tmp_path}/smi.xml ;;\n'
        f'  "nvlink -s") cat {tmp_path}/nvlink.txt ;;\n'
        '  *) echo "stand-in: unexpected $*" >&2; exit 2 ;;\nesac\n')
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n" + smi)
    (bin_dir / "dmesg").write_text(f"#!/bin/sh\ncat {tmp_path}/kernel.log\n")
    (bin_dir / "systemctl").write_text("#!/bin/sh\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


def _real(name: str) -> str:
    return (DATA / f"{name}.out").read_text()


@pytest.fixture
def on_path(monkeypatch):
    def use(bin_dir: Path) -> None:
        monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return use


def test_a_healthy_host_passes_with_nothing_found(tmp_path, on_path):
    on_path(_tools(tmp_path, _real("nvidia-smi-q-x"), _real("nvidia-smi-nvlink-s"), _real("dmesg")))
    report = node_doctor.examine(TWO_H200, fsx=None, efa_window=0, disks=())
    assert report["verdict"] == "PASS", report
    assert report["findings"] == [] and report["unchecked"] == []
    assert report["fingerprint"]["nvidia_driver"] == "580.159.04"


def test_xid_79_on_the_node_fails_it_with_a_reboot(tmp_path, on_path):
    log = _real("dmesg") + "[ 99.1] NVRM: Xid (PCI:0000:00:07): 79, pid=1, GPU has fallen off the bus.\n"
    on_path(_tools(tmp_path, _real("nvidia-smi-q-x"), _real("nvidia-smi-nvlink-s"), log))
    report = node_doctor.examine(TWO_H200, fsx=None, efa_window=0, disks=())
    assert report["verdict"] == "FAIL"
    [finding] = report["findings"]
    assert (finding["kind"], finding["action"], finding["gpu"]) == ("xid", "reboot", "0000:00:07")


def test_a_hung_nvidia_smi_is_a_finding_not_a_hang(tmp_path, on_path, monkeypatch):
    monkeypatch.setattr(node_doctor, "TOOL_TIMEOUT_S", 1.0)
    on_path(_tools(tmp_path, "", "", _real("dmesg"), hang_smi=True))
    report = node_doctor.examine(TWO_H200, fsx=None, efa_window=0, disks=())
    assert report["verdict"] == "FAIL" and report["findings"][0]["kind"] == "gpu_count"
    assert report["seconds"] < 20


def test_an_unreadable_kernel_log_is_inconclusive_never_pass(tmp_path, on_path):
    bin_dir = _tools(tmp_path, _real("nvidia-smi-q-x"), _real("nvidia-smi-nvlink-s"), "")
    refused = "#!/bin/sh\necho '%s: Operation not permitted' >&2\nexit 1\n"
    (bin_dir / "dmesg").write_text(refused % "dmesg: read kernel buffer failed")
    (bin_dir / "journalctl").write_text(refused % "journalctl")
    (bin_dir / "journalctl").chmod(0o755)
    on_path(bin_dir)
    report = node_doctor.examine(TWO_H200, fsx=None, efa_window=0, disks=())
    assert report["verdict"] == "INCONCLUSIVE"
    assert report["unchecked"] and report["unchecked"][0].startswith("xid:")


def test_an_fsx_that_is_not_lustre_fails(tmp_path, on_path):
    on_path(_tools(tmp_path, _real("nvidia-smi-q-x"), _real("nvidia-smi-nvlink-s"), _real("dmesg")))
    mounts = tmp_path / "mounts"
    mounts.write_text("systemd-1 /fsx autofs rw 0 0\n")
    report = node_doctor.examine(TWO_H200, fsx="/fsx", efa_window=0, proc_mounts=str(mounts), disks=())
    assert report["verdict"] == "FAIL" and report["findings"][0]["kind"] == "fsx_missing"


def test_the_command_line(tmp_path):
    env = dict(os.environ, PATH=f"{_tools(tmp_path, _real('nvidia-smi-q-x'), '', '')}:/usr/bin:/bin",
               HPQ_IMDS_ENDPOINT="off")
    run = [sys.executable, "-m", "hpq.scripts.node_doctor"]
    done = subprocess.run(run + ["--instance-type", "ml.p5.48xlarge", "--fsx", "", "--efa-window", "0",
                                 "--output", "json"], env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)
    # The replayed host has 2 GPUs where a p5 has 8: a missing GPU, and FAIL's exit code.
    assert done.returncode == 1 and report["verdict"] == "FAIL"
    assert any(f["kind"] == "gpu_count" and "2 of 8" in f["evidence"] for f in report["findings"])
    bad = subprocess.run(run + ["--instance-type", "ml.bogus.type"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    bad = subprocess.run(run + ["--instance-type", "ml.p5.48xlarge", "--efa-window", "nan"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
