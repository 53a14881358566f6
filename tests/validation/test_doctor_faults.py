"""The rehearsal's fault kinds (rehearsal/faults.py) without a rehearsal: what ``--fault`` accepts, and that the
stand-in nvidia-smi's answer, made from the real H100 capture, is healthy to node_checks for every GPU type and
sick once a fault's edit is applied (the same edit inject() makes on the node)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpq.errors import UsageError
from hpq.lifecycle import catalog
from hpq.rehearsal import faults
from hpq.scripts import node_checks
from tests.support import CHECKOUT

CHECKOUT_DATA = Path(CHECKOUT) / "tests" / "data" / "node_tools"


def test_parse_and_applicability_refuse_with_one_line():
    assert faults.parse(["worker-2:xid79", "worker-10:disk-full"]) == [("worker-2", "xid79"),
                                                                       ("worker-10", "disk-full")]
    for bad in ("worker-2", "controller:xid79", "worker-0:xid79", "worker-1:nope", ":xid79"):
        with pytest.raises(UsageError):
            faults.parse([bad])
    with pytest.raises(UsageError):
        faults.check_applicable([("worker-1", "efa-missing")], 2, "ml.g5.xlarge")
    faults.check_applicable([("worker-1", "efa-missing")], 2, "ml.p5.48xlarge")
    assert set(faults.describe().split()) >= set(faults.KINDS)


@pytest.mark.parametrize("itype", ["ml.g5.8xlarge", "ml.g5.48xlarge", "ml.trn1.32xlarge", "ml.c5.xlarge"])
def test_nvlink_down_is_refused_where_the_gpus_have_no_nvlink(itype):
    with pytest.raises(UsageError) as err:
        faults.check_applicable([("worker-1", "nvlink-down")], 2, itype)
    assert "\n" not in str(err.value) and "NVLink" in str(err.value)


@pytest.mark.parametrize("a,b", [("gpu-missing", "nvlink-down"), ("gpu-missing", "row-remap-pending"),
                                 ("fsx-gone", "fsx-readonly"), ("disk-full", "inodes-full")])
def test_kinds_that_hide_each_other_are_refused_on_one_node_and_accepted_on_two(a, b):
    with pytest.raises(UsageError) as err:
        faults.check_applicable([("worker-1", a), ("worker-1", b)], 2, "ml.p5.48xlarge")
    assert "\n" not in str(err.value) and a in str(err.value) and b in str(err.value)
    faults.check_applicable([("worker-1", a), ("worker-2", b)], 2, "ml.p5.48xlarge")


@pytest.mark.parametrize("itype", ["ml.p4d.24xlarge", "ml.p5.48xlarge"])
def test_nvlink_down_is_accepted_where_the_gpus_have_nvlinks(itype):
    faults.check_applicable([("worker-1", "nvlink-down")], 1, itype)


@pytest.mark.parametrize("itype", ["ml.g5.xlarge", "ml.p4d.24xlarge", "ml.p5.48xlarge", "ml.g5.48xlarge"])
def test_the_stand_in_nvidia_smi_is_healthy_for_the_type(itype):
    entry = catalog.lookup(itype)
    smi = node_checks.parse_smi_xml(faults.smi_xml(entry.accelerator_count, entry.accelerator_model))
    assert len({g.bus_id for g in smi.gpus}) == entry.accelerator_count
    links = node_checks.GPU_MODELS[entry.accelerator_model].nvlinks
    nvlinks = node_checks.parse_nvlink_status(faults.nvlink_text(entry.accelerator_count, links)) if links else None
    assert node_checks.judge_gpus(smi, entry.accelerator_count, entry.accelerator_model, nvlinks) == []


@pytest.mark.parametrize("kind,finding", [("ecc", "ecc_uncorrectable"), ("row-remap-failure", "row_remap_failure"),
                                          ("throttle", "clock_slowdown"), ("pcie-degraded", "pcie_degraded"),
                                          ("row-remap-pending", "row_remap_pending")])
def test_the_xml_faults_are_seen(tmp_path, kind, finding):
    path = tmp_path / "smi.xml"
    path.write_text(faults.smi_xml(8, "H100"))

    class Local:  # runs inject()'s shell edit on the local copy instead of the node's /etc/hpq-rehearse
        def sh(self, script: str, *args: str) -> None:
            subprocess.run(["sh", "-c", script.replace("/etc/hpq-rehearse/nvidia-smi-q-x.xml", str(path))],
                           check=True)

    faults.inject(Local(), kind)
    found = node_checks.judge_gpus(node_checks.parse_smi_xml(path.read_text()), 8, "H100")
    assert [f.kind for f in found] == [finding] and found[0].gpu == "00000000:00:06.0"
    assert found[0].action == faults.KINDS[kind].action


class Rewriting:
    """Runs inject()'s shell on this machine with the node's paths rewritten to local copies."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths

    def sh(self, script: str, *args: str) -> None:
        for node_path, local in self.paths.items():
            script = script.replace(node_path, local)
        subprocess.run(["sh", "-c", script, "sh", *args], check=True)


def test_nvlink_down_marks_one_link_inactive_in_the_real_format(tmp_path):
    """The stand-in's nvlink -s (the real 2x H200 capture's form) with the first GPU's Link 1 shown as
    ``<inactive>``: parse_nvlink_status reads it down, judge_gpus names nvlink_down on GPU 0 and nothing else."""
    path = tmp_path / "nvlink.txt"
    path.write_text(faults.nvlink_text(8, 18))
    smi = node_checks.parse_smi_xml(faults.smi_xml(8, "H100"))
    healthy = node_checks.parse_nvlink_status(path.read_text())
    assert node_checks.judge_gpus(smi, 8, "H100", healthy) == []
    faults.inject(Rewriting({faults.NVLINK_TXT: str(path)}), "nvlink-down")
    text = path.read_text()
    assert "\t Link 1: <inactive>\n" in text and text.count("<inactive>") == 1
    found = node_checks.judge_gpus(smi, 8, "H100", node_checks.parse_nvlink_status(text))
    assert [(f.kind, f.action, f.gpu) for f in found] == [("nvlink_down", "reboot", "0")]
    assert "17 of 18" in found[0].evidence


def test_the_real_h200_capture_with_a_link_inactive_is_nvlink_down():
    """The parser on the real capture (tests/data/node_tools/h200-x2), and on its broken twin: one link
    ``<inactive>``, the form nvidia-smi prints for a link that is down."""
    real = (CHECKOUT_DATA / "h200-x2" / "nvidia-smi-nvlink-s.out").read_text()
    links = node_checks.parse_nvlink_status(real)
    assert links and all(all(up.values()) and len(up) == 18 for up in links.values())
    broken = real.replace("\t Link 5: 26.562 GB/s", "\t Link 5: <inactive>", 1)
    assert node_checks.parse_nvlink_status(broken)[0][5] is False


@pytest.mark.parametrize("kind,code,mnemonic", [("xid94", 94, "ROBUST_CHANNEL_CONTAINED_ERROR"),
                                                ("xid13", 13, "ROBUST_CHANNEL_GR_EXCEPTION")])
def test_application_xids_are_named_as_information_with_no_node_action(tmp_path, kind, code, mnemonic):
    """Xid 94 and 13 are RESTART_APP in NVIDIA's catalog: the doctor names them (info, action none), and the
    rehearsal's missed() accepts exactly that: the same Xid judged as a node fault would be a miss."""
    log = tmp_path / "kern.log"
    log.write_text((faults.DATA / "dmesg.txt").read_text())
    assert node_checks.judge_xids(node_checks.parse_xids(log.read_text())) == []  # the seed alone: clean
    faults.inject(Rewriting({faults.KERNEL_LOG: str(log)}), kind)
    found = node_checks.judge_xids(node_checks.parse_xids(log.read_text()))
    assert [(f.kind, f.severity, f.action) for f in found] == [("xid", "info", "none")]
    assert found[0].evidence.startswith(f"Xid {code} {mnemonic} on 0000:00:06")
    k = faults.KINDS[kind]
    assert (k.finding, k.action, k.severity) == ("xid", "none", "info")
    named = [{"node": "worker-1", **found[0].to_dict()}]
    assert faults.missed([("worker-1", kind)], named) == []
    assert faults.missed([("worker-2", kind)], named) != []  # on another node: missed
    as_fault = [{**named[0], "severity": "critical", "action": "reboot"}]
    assert faults.missed([("worker-1", kind)], as_fault) != []


def test_xid79_twin_is_a_node_fault(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    faults.inject(Rewriting({faults.KERNEL_LOG: str(log)}), "xid79")
    found = node_checks.judge_xids(node_checks.parse_xids(log.read_text()))
    assert [(f.severity, f.action) for f in found] == [("critical", "reboot")]


def _in_own_mounts(script: str) -> str:
    """Run ``script`` in a private mount namespace (as a rehearsal node has), its stdout back."""
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


PY = sys.executable


@pytest.mark.root
def test_inodes_full_is_disk_full_naming_inodes(tmp_path):
    """inject()'s own script on a local stand-in for /opt/sagemaker: statvfs then shows every inode used and
    space left; judge_disk names disk_full for inodes only (drain). Its healthy twin: the same volume empty."""
    vol = tmp_path / "opt-sagemaker"
    vol.mkdir()
    shell: list[str] = []

    class Capture:
        def sh(self, script: str, *args: str) -> None:
            shell.append(script.replace("/opt/sagemaker", str(vol)))

    faults.inject(Capture(), "inodes-full")
    judge = (f"{PY} -c 'import os,json,sys; from hpq.scripts import node_checks as n; s=os.statvfs(sys.argv[1]); "
             f"print(json.dumps([f.to_dict() for f in n.judge_disk(\"/opt/sagemaker\", s.f_blocks, s.f_bavail, "
             f"s.f_files, s.f_favail)]))' {vol}")
    sick = json.loads(_in_own_mounts(f"set -e; {shell[0]}; {judge}"))
    assert [(f["kind"], f["action"], f["severity"]) for f in sick] == [("disk_full", "drain", "critical")]
    assert sick[0]["evidence"] == "/opt/sagemaker: 100.0% of inodes used"
    healthy = json.loads(_in_own_mounts(f"set -e; mount -t tmpfs -o size=1m,nr_inodes=16 t {vol}; {judge}"))
    assert healthy == []


@pytest.mark.root
def test_fsx_readonly_is_fsx_unwritable_and_clear_makes_it_writable(tmp_path):
    """/fsx as a mount of its own (as the lifecycle's mount makes it), then inject()'s bind remount: node_doctor's
    write test fails (EROFS), judge_mounts says fsx_unwritable, drain; before it and after clear()'s remount the
    same write succeeds."""
    fsx = tmp_path / "fsx"
    fsx.mkdir()
    scripts: list[str] = []

    class Capture:
        def sh(self, script: str, *args: str) -> None:
            scripts.append(script.replace("/fsx", str(fsx)))

        def write(self, *a, **k) -> None:  # clear()'s re-prepare of the device tools: not this test's concern
            pass

    faults.inject(Capture(), "fsx-readonly")
    faults.clear(Capture(), "fsx-readonly", "ml.c5.xlarge")
    check = (f"{PY} -c 'import sys; from hpq.scripts import node_doctor as d, node_checks as n; "
             f"w=d.fsx_writable(sys.argv[1]); "
             f"print(w, [(f.kind, f.action) for f in n.judge_mounts(\"lustre@tcp:/x /fsx lustre rw 0 0\", "
             f"\"/fsx\", w)])' {fsx}")
    out = _in_own_mounts(f"set -e; mount --bind {fsx} {fsx}; {check}; {scripts[0]}; {check}; {scripts[1]}; {check}")
    assert out.splitlines() == ["True []", "False [('fsx_unwritable', 'drain')]", "True []"]


def _fi_info(tmp_path, devices: int, fail: bool = False) -> subprocess.CompletedProcess:
    """The stand-in fi_info over a sysfs-like tree of ``devices`` EFA devices (as node.py builds it)."""
    sysc = tmp_path / "infiniband"
    drivers = tmp_path / "drivers"
    (drivers / "efa").mkdir(parents=True)
    (drivers / "mlx5_ib").mkdir()
    for i in range(devices):
        (sysc / f"rdmap{i}s0" / "device").mkdir(parents=True)
        (sysc / f"rdmap{i}s0" / "device" / "driver").symlink_to(drivers / "efa")
    (sysc / "mlx5_0" / "device").mkdir(parents=True)  # another RDMA device is not an EFA provider
    (sysc / "mlx5_0" / "device" / "driver").symlink_to(drivers / "mlx5_ib")
    flag = tmp_path / "fail"
    if fail:
        flag.write_text("")
    script = faults.FI_INFO.replace("/sys/class/infiniband", str(sysc)).replace("/etc/hpq-rehearse/fi_info.fail",
                                                                                 str(flag))
    return subprocess.run(["sh", "-c", script, "fi_info", "-p", "efa"], capture_output=True, text=True)


def test_the_stand_in_fi_info_answers_per_efa_device_and_fails_as_libfabric_does(tmp_path):
    from hpq.scripts import node_doctor

    ok = _fi_info(tmp_path / "ok", 2)
    assert ok.returncode == 0 and ok.stdout.count("provider: efa") == 2, ok
    assert "domain: rdmap1s0-rdm" in ok.stdout and "mlx5" not in ok.stdout
    # node_doctor's reading of it (rc 0 and an efa provider): healthy; the broken twins: no device, the fault.
    assert node_checks.judge_efa(["rdmap0s0", "rdmap1s0"], 2, {}, {}, ok.returncode == 0 and "provider: efa" in ok.stdout) == []
    for broken in (_fi_info(tmp_path / "none", 0), _fi_info(tmp_path / "fail", 2, fail=True)):
        assert broken.returncode == 1 and broken.stdout == "" and "fi_getinfo: -61" in broken.stderr
        found = node_checks.judge_efa(["rdmap0s0", "rdmap1s0"], 2, {}, {}, broken.returncode == 0)
        assert [(f.kind, f.action) for f in found] == [("efa_provider", "reboot")]
    version = subprocess.run(["sh", "-c", faults.FI_INFO, "fi_info", "--version"], capture_output=True, text=True)
    assert node_doctor.re.search(r"^libfabric:\s*(\S+)", version.stdout, node_doctor.re.MULTILINE)
