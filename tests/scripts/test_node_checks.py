"""The node checks of hpq doctor, on what the real tools printed on healthy GPU hosts and on broken twins.

Healthy inputs are the captures in tests/data/node_tools/ (1x H100 and 2x H200, driver 580.159.04; see its
README): they must give no finding. Each broken twin is one of those captures changed the way the fault
changes it (an ECC count, a failed remap, a narrower PCIe link, a link down, a GPU gone), or a kernel log
line in the NVIDIA driver's Xid format. Xid classes come from NVIDIA's Xid catalog (scripts/xid_catalog.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hpq.scripts import node_checks, xid_catalog

DATA = Path(__file__).parents[1] / "data" / "node_tools"
HOSTS = {"h100-x1": ("H100", 1), "h200-x2": ("H200", 2)}


def _read(host: str, tool: str) -> str:
    return (DATA / host / f"{tool}.out").read_text()


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_healthy_hosts_give_no_finding(host):
    model, count = HOSTS[host]
    smi = node_checks.parse_smi_xml(_read(host, "nvidia-smi-q-x"))
    assert len(smi.gpus) == count and smi.driver_version == "580.159.04" and smi.cuda_version
    links = node_checks.parse_nvlink_status(_read(host, "nvidia-smi-nvlink-s"))
    findings = node_checks.judge_gpus(smi, count, model, links)
    findings += node_checks.judge_xids(node_checks.parse_xids(_read(host, "dmesg")))
    assert findings == []
    assert node_checks.worst(findings) == "PASS"


def test_the_h200_pair_shows_eighteen_links_each():
    links = node_checks.parse_nvlink_status(_read("h200-x2", "nvidia-smi-nvlink-s"))
    assert sorted(links) == [0, 1]
    assert all(len(gpu) == 18 and all(gpu.values()) for gpu in links.values())


def _twin(host: str, old: str, new: str, count: int = 1) -> str:
    text = _read(host, "nvidia-smi-q-x")
    assert text.count(old) >= count, old
    return text.replace(old, new, count)


def test_uncorrectable_ecc_means_reboot():
    xml = _twin("h100-x1", "<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>3</dram_uncorrectable>")
    [finding] = node_checks.judge_gpus(node_checks.parse_smi_xml(xml), 1, "H100")
    assert (finding.kind, finding.severity, finding.action) == ("ecc_uncorrectable", "critical", "reboot")
    assert "3 uncorrectable" in finding.evidence


def test_a_failed_row_remap_means_replace():
    xml = _twin("h100-x1", "<remapped_row_failure>No</remapped_row_failure>",
                "<remapped_row_failure>Yes</remapped_row_failure>")
    [finding] = node_checks.judge_gpus(node_checks.parse_smi_xml(xml), 1, "H100")
    assert (finding.kind, finding.action) == ("row_remap_failure", "replace")


def test_a_narrow_pcie_link_and_a_thermal_slowdown_are_warnings():
    xml = _twin("h100-x1", "<current_link_width>16x</current_link_width>",
                "<current_link_width>8x</current_link_width>")
    xml = xml.replace("<clocks_event_reason_hw_thermal_slowdown>Not Active",
                      "<clocks_event_reason_hw_thermal_slowdown>Active")
    kinds = {(f.kind, f.severity) for f in node_checks.judge_gpus(node_checks.parse_smi_xml(xml), 1, "H100")}
    assert kinds == {("pcie_degraded", "warning"), ("clock_slowdown", "warning")}


def test_the_idle_power_cap_and_idle_reason_are_not_slowdowns():
    """The captures have gpu_idle Active (a healthy idle GPU): that must not count."""
    smi = node_checks.parse_smi_xml(_read("h100-x1", "nvidia-smi-q-x"))
    assert "<clocks_event_reason_gpu_idle>Active" in _read("h100-x1", "nvidia-smi-q-x")
    assert smi.gpus[0].slowdowns == []


def test_a_missing_gpu_is_named():
    text = _read("h200-x2", "nvidia-smi-q-x")
    second = text.index("<gpu id=", text.index("<gpu id=") + 1)
    end = text.index("</gpu>", second) + len("</gpu>")
    one_gone = text[:second] + text[end:]
    findings = node_checks.judge_gpus(node_checks.parse_smi_xml(one_gone), 2, "H200")
    assert [(f.kind, f.action) for f in findings] == [("gpu_count", "reboot")]
    assert "1 of 2" in findings[0].evidence


def test_nvidia_smi_silent_is_zero_gpus():
    [finding] = node_checks.judge_gpus(None, 8, "H100")
    assert finding.kind == "gpu_count" and finding.severity == "critical"


def test_a_link_down_on_an_nvlink_gpu():
    text = _read("h200-x2", "nvidia-smi-nvlink-s").replace("Link 5: 26.562 GB/s", "Link 5: <inactive>", 1)
    findings = node_checks.judge_gpus(node_checks.parse_smi_xml(_read("h200-x2", "nvidia-smi-q-x")), 2, "H200",
                             node_checks.parse_nvlink_status(text))
    assert [(f.kind, f.gpu) for f in findings] == [("nvlink_down", "0")]
    assert "17 of 18" in findings[0].evidence


# The driver's Xid line format, as real kernel logs show it (NVIDIA/open-gpu-kernel-modules issue 1151 for
# Xid 79; NVIDIA's dynamic page retirement docs for Xid 48's wording).
XID79 = "[ 1936.5] NVRM: Xid (PCI:0000:2b:00): 79, pid=1896, GPU has fallen off the bus."
XID48 = "[ 2001.1] NVRM: Xid (PCI:0000:10:1c): 48, pid=2231, An uncorrectable double bit error (DBE) has been detected"
XID13 = "[ 3000.0] NVRM: Xid (PCI:0000:10:1c): 13, pid=99, Graphics Exception: ESR 0x514648=0x1f000e"


def test_xids_are_classified_by_the_catalog():
    log = _read("h100-x1", "dmesg") + "\n".join([XID79, XID48, XID48, XID13]) + "\n"
    findings = {f.evidence.split()[1]: f for f in node_checks.judge_xids(node_checks.parse_xids(log))}
    assert (findings["79"].severity, findings["79"].action) == ("critical", "reboot")
    assert (findings["48"].severity, findings["48"].action) == ("critical", "reboot")
    assert "(2 times)" in findings["48"].evidence
    # An application fault (Xid 13) is not the node's: informational, no action on the node.
    assert (findings["13"].severity, findings["13"].action) == ("info", "none")
    assert node_checks.worst(findings.values()) == "FAIL"
    assert node_checks.worst([findings["13"]]) == "PASS"


def test_xid_154_takes_the_recovery_it_names_and_unknown_codes_are_not_ignored():
    line = "NVRM: Xid (PCI:0000:10:1c): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    [finding] = node_checks.judge_xids(node_checks.parse_xids(line))
    assert finding.action == "reboot" and finding.severity == "critical"
    [unknown] = node_checks.judge_xids(node_checks.parse_xids("NVRM: Xid (PCI:0000:10:1c): 999, something new"))
    assert unknown.severity == "warning" and unknown.action == "drain"
    assert xid_catalog.classify(999)[0] == "UNKNOWN_XID"


def test_every_catalog_bucket_has_an_action():
    for code, entry in xid_catalog.CATALOG.items():
        _, severity, action = xid_catalog.classify(code, "to 0x2 (Node Reboot Required)")
        assert severity in xid_catalog.SEVERITIES and action in xid_catalog.ACTIONS, (code, entry)


def test_parsers_are_linear_on_hostile_input():
    started = time.monotonic()
    node_checks.parse_xids("NVRM: Xid (PCI:" + "0" * 2_000_000 + "\n" + "NVRM: Xid " * 200_000)
    node_checks.parse_nvlink_status("GPU 0: x\n" + ("\t Link 1: " + " " * 100_000 + "\n") * 20)
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError):
        node_checks.parse_smi_xml("<html>not it</html>")
    with pytest.raises(ValueError):
        node_checks.parse_smi_xml("\x00garbage")


def test_efa_devices_counters_and_provider(tmp_path):
    root = tmp_path / "infiniband"
    for dev, driver in (("rdmap0s31", "efa"), ("rdmap1s31", "efa"), ("mlx5_0", "mlx5_core")):
        (tmp_path / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (root / dev / "device").mkdir(parents=True)
        os.symlink(tmp_path / "drivers" / driver, root / dev / "device" / "driver")
        counters = root / dev / "ports" / "1" / "hw_counters"
        counters.mkdir(parents=True)
        for name in node_checks.EFA_ERROR_COUNTERS:
            (counters / name).write_text("0\n")
    assert node_checks.efa_devices(str(root)) == ["rdmap0s31", "rdmap1s31"]
    before = node_checks.read_efa_counters(str(root))
    assert node_checks.judge_efa(node_checks.efa_devices(str(root)), 2, before, before, True) == []
    (root / "rdmap1s31" / "ports" / "1" / "hw_counters" / "retrans_timeout_events").write_text("7\n")
    after = node_checks.read_efa_counters(str(root))
    findings = node_checks.judge_efa(node_checks.efa_devices(str(root)), 4, before, after, False)
    assert [f.kind for f in findings] == ["efa_count", "efa_provider", "efa_errors"]
    assert "2 of 4" in findings[0].evidence and "0 -> 7" in findings[2].evidence


def test_disk_and_fsx():
    assert node_checks.judge_disk("/", 100, 50, 100, 90) == []
    [full] = node_checks.judge_disk("/", 1000, 10, 100, 90)
    assert (full.severity, full.action) == ("critical", "drain")
    [inodes] = node_checks.judge_disk("/opt/sagemaker", 1000, 900, 100, 8)
    assert inodes.severity == "warning" and "inodes" in inodes.evidence
    mounted = "10.1.2.3@tcp:/abcdef /fsx lustre rw 0 0\n"
    autofs_only = "systemd-1 /fsx autofs rw 0 0\n"
    assert node_checks.judge_mounts(mounted, "/fsx", True) == []
    assert node_checks.judge_mounts(autofs_only, "/fsx", None)[0].kind == "fsx_missing"
    assert node_checks.judge_mounts(mounted, "/fsx", False)[0].kind == "fsx_unwritable"
    assert node_checks.judge_mounts("", None, None) == []


def test_a_version_a_node_could_not_read_is_not_drift():
    """A node whose nvidia-smi did not answer has the driver UNKNOWN (its gpu_count finding names it); its twin
    with the field absent altogether is drift, as an uninstalled piece is."""
    fps = {n: {"nvidia_driver": "580.1"} for n in ("a", "b", "c")}
    assert node_checks.drift({**fps, "d": {"nvidia_driver": node_checks.UNKNOWN}}) == {n: [] for n in "abcd"}
    assert [f.kind for f in node_checks.drift({**fps, "d": {}})["d"]] == ["drift"]


def test_drift_names_the_minority_only():
    fps = {n: {"nccl": "2.21.5", "driver": "550.127"} for n in ("a", "b", "c")}
    fps["c"] = {"nccl": "2.18.3", "driver": "550.127"}
    out = node_checks.drift(fps)
    assert out["a"] == [] and out["b"] == []
    [finding] = out["c"]
    assert "nccl 2.18.3" in finding.evidence and "2 of 3" in finding.evidence
    assert node_checks.drift({"a": {"nccl": "1"}, "b": {"nccl": "2"}}) == {"a": [], "b": []}
