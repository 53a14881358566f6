"""The rehearsal's fault kinds (rehearsal/faults.py) without a rehearsal: what ``--fault`` accepts, and that the
stand-in nvidia-smi's answer, made from the real H100 capture, is healthy to node_checks for every GPU type and
sick once a fault's edit is applied (the same edit inject() makes on the node)."""

from __future__ import annotations

import subprocess

import pytest

from hpq.errors import UsageError
from hpq.lifecycle import catalog
from hpq.rehearsal import faults
from hpq.scripts import node_checks


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


@pytest.mark.parametrize("itype", ["ml.g5.xlarge", "ml.p4d.24xlarge", "ml.p5.48xlarge", "ml.g5.48xlarge"])
def test_the_stand_in_nvidia_smi_is_healthy_for_the_type(itype):
    entry = catalog.lookup(itype)
    smi = node_checks.parse_smi_xml(faults.smi_xml(entry.accelerator_count, entry.accelerator_model))
    assert len({g.bus_id for g in smi.gpus}) == entry.accelerator_count
    links = node_checks.GPU_MODELS[entry.accelerator_model].nvlinks
    nvlinks = node_checks.parse_nvlink_status(faults.nvlink_text(entry.accelerator_count, links)) if links else None
    assert node_checks.judge_gpus(smi, entry.accelerator_count, entry.accelerator_model, nvlinks) == []


@pytest.mark.parametrize("kind,finding", [("ecc", "ecc_uncorrectable"), ("row-remap-failure", "row_remap_failure"),
                                          ("throttle", "clock_slowdown"), ("pcie-degraded", "pcie_degraded")])
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
