"""scripts/gpu_metrics.py: the DCGM exporter's series, read from the NVIDIA driver's own tools on the node.

Ground truth is what real GPUs printed, not our output:
- data/gpu_metrics_h200x2/ (``bash dev/capture_gpu_metrics.sh``, a lent host with two H200 joined by 18 NVLinks,
  driver 580.159.04, 2026-11-27): the writer run on the real host, idle and with both GPUs under a matmul load,
  with ``nvidia-smi -q -x`` and NVML's own reading of each DCGM field (bench/nvml_dcgm_fields.py, pynvml) taken at
  the same moments;
- tests/data/node_tools/{h100-x1,h200-x2}/ (dev/capture_node_tools.sh): ``nvidia-smi -q -x``, ``nvidia-smi nvlink
  -e`` (18 NVLinks per H200) and the kernel log.
The names must be the fields AWS's HyperPod reference gives dcgm-exporter (data/exporters/dcgm_exporter.txt), which
export under the DCGM field name; the labels dcgm-exporter's. Every rule has a broken twin: nvidia-smi failing,
answering garbage, a value printed N/A, an Xid on one GPU, the kernel log unreadable, a pre-R535 ECC layout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from hpq.lifecycle import bundle
from hpq.scripts import gpu_metrics
from tests.support import CHECKOUT

DATA = Path(CHECKOUT) / "tests/observability/data"
CAPTURE = DATA / "gpu_metrics_h200x2"
GPUS = ("0", "1")
TOOLS = Path(CHECKOUT) / "tests/data/node_tools"
DCGM_NAMES = {
    line.strip()
    for line in (DATA / "exporters/dcgm_exporter.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
}
SEED_SIX = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")
LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}


def parse(text: str) -> dict:
    """{(name, gpu label or None): (value, labels)} through Prometheus's own Python parser."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, s.labels.get("gpu"))] = (s.value, s.labels)
    return out


def replay(folder: Path, smi: str = "nvidia-smi-q-x.out", nvlink: str | None = "nvidia-smi-nvlink-e.out",
           kernel: str | None = "dmesg.out", hostname: str = "ip-10-1-2-3"):
    answers = {tuple(gpu_metrics.SMI): (folder / smi).read_text()}
    if nvlink:
        answers[tuple(gpu_metrics.NVLINK_ERRORS)] = (folder / nvlink).read_text()
    log = (folder / kernel).read_text() if kernel else None
    return gpu_metrics.collect(lambda argv: answers.get(tuple(argv)), lambda: log, hostname)


def nvml(name: str, gpu: str) -> dict:
    return json.loads((CAPTURE / f"{name}.nvml.json").read_text())["gpus"][int(gpu)]["fields"]


def test_the_writer_ran_on_real_h200s_and_wrote_the_seed_six_ecc_and_nvlink_under_dcgm_names():
    """The file the writer printed on the real host (not a replay): every family is a field AWS selects for
    dcgm-exporter, with dcgm-exporter's labels, one set per GPU, NVLink error sums from the real ``nvlink -e``,
    and under load both GPUs are busy as NVML saw them."""
    for moment in ("idle", "load"):
        assert (CAPTURE / f"{moment}.rc").read_text().strip() == "0"
        got = parse((CAPTURE / f"{moment}.prom").read_text())
        assert got[("hpq_gpu_metrics_up", None)][0] == 1
        dcgm = {name for name, _ in got if name.startswith("DCGM_")}
        assert dcgm <= DCGM_NAMES, dcgm - DCGM_NAMES
        assert set(SEED_SIX) | {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                                "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"} <= dcgm
        uuids = set()
        for gpu in GPUS:
            value, labels = got[("DCGM_FI_DEV_GPU_UTIL", gpu)]
            assert set(labels) == LABELS and labels["modelName"] == "NVIDIA H200"
            assert labels["UUID"].startswith("GPU-") and labels["device"] == f"nvidia{gpu}"
            uuids.add(labels["UUID"])
        assert len(uuids) == 2
    busy, idle = parse((CAPTURE / "load.prom").read_text()), parse((CAPTURE / "idle.prom").read_text())
    for gpu in GPUS:
        assert busy[("DCGM_FI_DEV_GPU_UTIL", gpu)][0] >= 90 and idle[("DCGM_FI_DEV_GPU_UTIL", gpu)][0] == 0
        assert busy[("DCGM_FI_DEV_SM_CLOCK", gpu)][0] > 2 * idle[("DCGM_FI_DEV_SM_CLOCK", gpu)][0]
        assert busy[("DCGM_FI_DEV_POWER_USAGE", gpu)][0] > 3 * idle[("DCGM_FI_DEV_POWER_USAGE", gpu)][0]


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("moment", ["idle", "load"])
def test_each_value_agrees_with_what_nvml_read_at_the_same_moment(moment, gpu):
    """nvidia-smi and NVML (the library DCGM reads) on the same GPU seconds apart: equal where the value cannot
    move (ECC, remapped rows, PCIe replays, memory clock), close where it can (utilization, clocks, power, heat)."""
    got = parse((CAPTURE / f"{moment}.prom").read_text())
    ref = nvml(moment, gpu)

    def ours(name):
        return got[(name, gpu)][0]

    for exact in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
                  "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                  "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_MEM_CLOCK"):
        assert ref[exact]["status"] == "ok" and ours(exact) == ref[exact]["value"], exact
    assert abs(ours("DCGM_FI_DEV_GPU_UTIL") - ref["DCGM_FI_DEV_GPU_UTIL"]["value"]) <= 10
    assert abs(ours("DCGM_FI_DEV_SM_CLOCK") - ref["DCGM_FI_DEV_SM_CLOCK"]["value"]) <= 0.1 * ours("DCGM_FI_DEV_SM_CLOCK")
    assert abs(ours("DCGM_FI_DEV_GPU_TEMP") - ref["DCGM_FI_DEV_GPU_TEMP"]["value"]) <= 5
    watts = ref["DCGM_FI_DEV_POWER_USAGE"]["value"] / 1000.0  # NVML's milliwatts, DCGM's and nvidia-smi's watts
    assert abs(ours("DCGM_FI_DEV_POWER_USAGE") - watts) <= 0.05 * watts
    # nvidia-smi's "used" leaves out the driver's reservation that NVML's v1 memory info counts as used
    assert 0 <= ref["DCGM_FI_DEV_FB_USED"]["value"] / 2**20 - ours("DCGM_FI_DEV_FB_USED") <= 1024
    # NVML's NVLink error fields answer "Not Supported" on this driver, where nvidia-smi nvlink -e prints the
    # per-link counters hpq sums: the writer's series exist where DCGM's field source has none
    assert ref["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"]["status"] == "error"
    assert ours("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL") == 0


@pytest.mark.parametrize("moment", ["idle", "load"])
def test_power_is_nvmls_power_usage_the_average_reading_not_the_instant_one(moment):
    """nvmlDeviceGetPowerUsage (DCGM's source) is what nvidia-smi prints as average_power_draw: on every GPU of
    the capture it is nearer the average than the instant reading (NVML read seconds before the XML)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring((CAPTURE / f"{moment}.nvidia-smi-q-x.xml").read_text())
    for gpu, element in zip(GPUS, root.findall("gpu"), strict=True):
        nvml_w = nvml(moment, gpu)["DCGM_FI_DEV_POWER_USAGE"]["value"] / 1000.0
        average = float(element.findtext("gpu_power_readings/average_power_draw").split()[0])
        instant = float(element.findtext("gpu_power_readings/instant_power_draw").split()[0])
        assert abs(average - nvml_w) <= abs(instant - nvml_w), (moment, gpu, nvml_w, average, instant)


def test_a_replay_of_the_real_xml_gives_what_the_host_wrote():
    """The same XML through the writer here reads as the writer read it there (the nvidia-smi answer was taken
    seconds after the writer's own run, so only the moving values may differ)."""
    text, ok = replay(CAPTURE, smi="idle.nvidia-smi-q-x.xml", nvlink="nvlink-e.txt", kernel=None)
    assert not ok  # no kernel log in this replay: the Xid family is left out and up says so
    here, there = parse(text), parse((CAPTURE / "idle.prom").read_text())
    assert {k for k in here if k[0] != "DCGM_FI_DEV_XID_ERRORS"} == {k for k in there if k[0] !=
                                                                       "DCGM_FI_DEV_XID_ERRORS"}
    assert ("DCGM_FI_DEV_XID_ERRORS", "0") not in here and here[("hpq_gpu_metrics_up", None)][0] == 0
    for gpu in GPUS:
        for name in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_FB_FREE",
                     "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"):
            assert here[(name, gpu)][0] == there[(name, gpu)][0]


def test_two_h200s_with_18_nvlinks_each_get_their_own_series_and_link_error_sums():
    text, ok = replay(TOOLS / "h200-x2")
    got = parse(text)
    assert ok and got[("hpq_gpu_metrics_up", None)][0] == 1
    uuids = {got[("DCGM_FI_DEV_GPU_TEMP", g)][1]["UUID"] for g in ("0", "1")}
    assert len(uuids) == 2
    for g in ("0", "1"):
        for name in ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
                     "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"):
            assert got[(name, g)][0] == 0
    # broken twin: errors on some of GPU 1's links are summed onto GPU 1 only
    links = (TOOLS / "h200-x2/nvidia-smi-nvlink-e.out").read_text()
    head, gpu1 = links.split("GPU 1:", 1)
    gpu1 = gpu1.replace("Link 3: Replay Errors: 0", "Link 3: Replay Errors: 7").replace(
        "Link 17: Replay Errors: 0", "Link 17: Replay Errors: 5").replace("Link 2: CRC Errors: 0", "Link 2: CRC Errors: 4")
    answers = {tuple(gpu_metrics.SMI): (TOOLS / "h200-x2/nvidia-smi-q-x.out").read_text(),
               tuple(gpu_metrics.NVLINK_ERRORS): head + "GPU 1:" + gpu1}
    got = parse(gpu_metrics.collect(lambda a: answers.get(tuple(a)), lambda: "", "h")[0])
    assert got[("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "1")][0] == 12
    assert got[("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "1")][0] == 4
    assert got[("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "0")][0] == 0


def test_a_gpu_without_nvlink_has_no_link_series_and_is_still_up():
    """The real 1x H100 host prints nothing for ``nvlink -e``; a refusal likewise leaves only those families out."""
    got = parse(replay(TOOLS / "h100-x1")[0])
    assert got[("hpq_gpu_metrics_up", None)][0] == 1
    assert not any("NVLINK" in name for name, _ in got)
    got = parse(replay(TOOLS / "h100-x1", nvlink=None)[0])
    assert got[("hpq_gpu_metrics_up", None)][0] == 1 and ("DCGM_FI_DEV_GPU_UTIL", "0") in got


def test_the_last_xid_of_each_gpu_is_its_value_and_a_gpu_without_one_reads_0():
    """The kernel's line format (node_checks.parse_xids): the PCI bus of the Xid line picks the GPU."""
    log = (TOOLS / "h200-x2/dmesg.out").read_text() + (
        "[  100.1] NVRM: Xid (PCI:0000:00:07): 13, pid=4242, name=python, Graphics Exception\n"
        "[  200.2] NVRM: Xid (PCI:0000:00:07): 79, pid=4242, name=python, GPU has fallen off the bus.\n"
        "[  300.3] NVRM: Xid (PCI:0000:9a:00): 48, an unrelated bus\n")
    answers = {tuple(gpu_metrics.SMI): (TOOLS / "h200-x2/nvidia-smi-q-x.out").read_text()}
    got = parse(gpu_metrics.collect(lambda a: answers.get(tuple(a)), lambda: log, "h")[0])
    assert got[("DCGM_FI_DEV_XID_ERRORS", "1")][0] == 79  # the last one, not the first
    assert got[("DCGM_FI_DEV_XID_ERRORS", "0")][0] == 0


def test_a_value_printed_na_is_left_out_never_written_as_0():
    xml = (TOOLS / "h100-x1/nvidia-smi-q-x.out").read_text()
    got = parse(gpu_metrics.collect(lambda a: xml if a == gpu_metrics.SMI else "", lambda: "", "h")[0])
    assert got[("DCGM_FI_DEV_POWER_USAGE", "0")][0] == 96.88  # the average (NVML's power usage), not the instant
    twin = xml.replace("<gpu_temp>36 C</gpu_temp>", "<gpu_temp>N/A</gpu_temp>").replace(
        "<average_power_draw>96.88 W</average_power_draw>", "<average_power_draw>N/A</average_power_draw>")
    assert twin != xml
    got = parse(gpu_metrics.collect(lambda a: twin if a == gpu_metrics.SMI else "", lambda: "", "h")[0])
    assert ("DCGM_FI_DEV_GPU_TEMP", "0") not in got and ("DCGM_FI_DEV_POWER_USAGE", "0") not in got
    assert got[("DCGM_FI_DEV_MEMORY_TEMP", "0")][0] == 38  # the neighbours are still there


def test_ecc_before_r535_reads_the_single_and_double_bit_totals():
    """Drivers before R535 print ``ecc_errors/volatile/{single_bit,double_bit}/total`` (NVIDIA's nvsmi DTD of that
    era); the R535+ layout is the captured one."""
    xml = (TOOLS / "h100-x1/nvidia-smi-q-x.out").read_text()
    start, end = xml.index("<volatile>"), xml.index("</volatile>") + len("</volatile>")
    old = xml[:start] + ("<volatile><single_bit><device_memory>3</device_memory><total>3</total></single_bit>"
                         "<double_bit><device_memory>2</device_memory><total>2</total></double_bit></volatile>"
                         ) + xml[end:]
    got = parse(gpu_metrics.collect(lambda a: old if a == gpu_metrics.SMI else "", lambda: "", "h")[0])
    assert got[("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "0")][0] == 3
    assert got[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0")][0] == 2
    # and the R535+ layout sums every uncorrectable source (SRAM parity, SRAM SEC-DED, DRAM)
    new = xml.replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>1</dram_uncorrectable>", 1)
    new = new.replace("<sram_uncorrectable_parity>0</sram_uncorrectable_parity>",
                      "<sram_uncorrectable_parity>2</sram_uncorrectable_parity>", 1)
    got = parse(gpu_metrics.collect(lambda a: new if a == gpu_metrics.SMI else "", lambda: "", "h")[0])
    assert got[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0")][0] == 3
    assert got[("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "0")][0] == 0


@pytest.mark.parametrize("answer", [None, "", "nvidia-smi has failed", "<html>no</html>", "<nvidia_smi_log/>"])
def test_no_answer_or_no_gpu_writes_no_gpu_series_and_up_0(answer, capsys):
    text, ok = gpu_metrics.collect(lambda a: answer, lambda: "", "h")
    got = parse(text)
    assert not ok and got == {("hpq_gpu_metrics_up", None): (0.0, {})}
    if answer is not None:
        assert capsys.readouterr().err.startswith("gpu_metrics: ")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400), st.text(max_size=400))
def test_any_tool_output_gives_valid_exposition_text_and_never_a_traceback(smi, links):
    """Whatever the tools print, the file parses (Prometheus's parser) or the GPU families are simply absent."""
    xml = (TOOLS / "h100-x1/nvidia-smi-q-x.out").read_text()
    in_a_field = xml.replace("<gpu_util>0 %</gpu_util>", "<gpu_util>" + smi.replace("<", "").replace("&", "") + "</gpu_util>")
    for answer in (smi, in_a_field):
        text, _ = gpu_metrics.collect(lambda a, d=answer: d if a == gpu_metrics.SMI else links, lambda: smi, "h")
        list(text_string_to_metric_families(text))


def test_the_bundle_runs_it_as_a_node_would_with_the_real_tools_output(tmp_path):
    """``python3 -m hpq.scripts.gpu_metrics`` from the node bundle, nvidia-smi and dmesg on PATH replaying the
    real 2x H200 captures: the file lands in the textfile directory, whole, with exit 0; on 3.7 too where it exists."""
    from tests.lifecycle.test_lifecycle_python37 import PY37_CANDIDATES, py37_offences

    for module in ("gpu_metrics", "metric_writer"):
        path = Path(CHECKOUT) / "scripts" / f"{module}.py"
        assert py37_offences(path.read_text(), path.name) == []
    for key, src in bundle.node_bundle_files().items():
        dest = tmp_path / "node" / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(Path(src).read_bytes())
    bindir = tmp_path / "bin"
    bindir.mkdir()
    caps = TOOLS / "h200-x2"
    smi, links = caps / "nvidia-smi-q-x.out", caps / "nvidia-smi-nvlink-e.out"
    (bindir / "nvidia-smi").write_text(
        f'#!/bin/sh\ncase "$1 $2" in\n"-q -x") exec /bin/cat {smi} ;;\n"nvlink -e") exec /bin/cat {links} ;;\nesac\nexit 2\n')
    (bindir / "dmesg").write_text(f"#!/bin/sh\nexec /bin/cat {caps / 'dmesg.out'}\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    out = tmp_path / "textfile"
    out.mkdir()
    pythons = ["python3"] + [p for p in (shutil.which(c) for c in PY37_CANDIDATES) if p][:1]
    for python in pythons:
        done = subprocess.run([python, "-S", "-m", "hpq.scripts.gpu_metrics", "--textfile-dir", str(out)],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path / "node",
                              env={"PATH": f"{bindir}:/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        got = parse((out / gpu_metrics.OUTPUT_NAME).read_text())
        assert got[("DCGM_FI_DEV_GPU_TEMP", "1")][0] == 41 and got[("hpq_gpu_metrics_up", None)][0] == 1
        assert [p.name for p in out.iterdir()] == [gpu_metrics.OUTPUT_NAME]  # no temporary left behind


def test_an_unwritable_file_or_a_bad_interval_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / gpu_metrics.OUTPUT_NAME).mkdir()  # its place taken: the rename fails, even for root
    assert gpu_metrics.main(["--textfile-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("gpu_metrics: cannot write ")
    for every in ("1", "nan", "inf", "-3"):  # the shared loop's guard (scripts/metric_writer.py), every writer's
        for module in ("gpu_metrics", "efa_metrics", "slurm_metrics"):
            res = subprocess.run(["python3", "-m", f"hpq.scripts.{module}", "--every", every], capture_output=True,
                                 text=True, cwd=CHECKOUT, timeout=30)
            assert res.returncode == 2 and "--every must be 0 (once) or at least 5 seconds" in res.stderr, (module,
                                                                                                            every)
            assert "Traceback" not in res.stderr
