"""GPU metrics under the DCGM exporter's names: ``python3 -m hpq.scripts.gpu_metrics [--every 30]`` on GPU workers.

AWS's Slurm observability runs NVIDIA's dcgm-exporter as an image that exists only in HyperPod's ECR registry
(awslabs/awsome-distributed-ai 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/observability/
install_dcgm_exporter.sh, ``hyperpod/dcgm_exporter:4.1.1-4.0.4-ubi9``), whose digest no public source records, so
hpq runs no image. It writes the same series itself, into node_exporter's textfile directory, from the NVIDIA
driver's own tools on the node, which read the same NVML values DCGM reads:
- ``nvidia-smi -q -x`` (NVIDIA's XML, ``nvidia_smi_log/gpu``; as captured on H100 and H200 hosts with driver 580,
  tests/data/node_tools/): utilization/gpu_util and memory_util, clocks/sm_clock and mem_clock, temperature/
  gpu_temp and memory_temp, gpu_power_readings/average_power_draw (power_readings/power_draw before R535),
  fb_memory_usage/used and free, ecc_errors volatile/aggregate (``*_correctable`` / ``*_uncorrectable*`` since
  R535, ``single_bit``/``double_bit`` totals before), remapped_rows, pci/replay_counter;
- ``nvidia-smi nvlink -e``: per link ``Replay Errors``, ``Recovery Errors``, ``CRC Errors`` (the real 2x H200
  capture), summed per GPU as DCGM's ``*_TOTAL`` fields are. Hopper's nvidia-smi prints one CRC counter where
  older ones printed ``CRC Flit`` and ``CRC Data``; hpq takes the single one as the flit count (NVML's
  DL_CRC_FLIT, the counter NVIDIA keeps on Hopper): an inference, written down in docs/observability.md;
- the kernel log (dmesg, else ``journalctl -k``): ``NVRM: Xid (PCI:...): N`` lines; DCGM_FI_DEV_XID_ERRORS is the
  last Xid of each GPU (DCGM's definition: "Value of the last XID error encountered"), 0 when there was none.

Names and units are dcgm-exporter's (DCGM field names; MHz, C, W, MiB, %); labels are dcgm-exporter's ``gpu``
(nvidia-smi's index: the order it lists GPUs in), ``UUID``, ``pci_bus_id``, ``device`` (``nvidia<minor>``),
``modelName`` and ``Hostname``. Fields NVML gives only through DCGM (the ``DCGM_FI_PROF_*`` profiling family)
or through calls nvidia-smi does not print (energy, violation times, NVLink bandwidth) are not written.
A value nvidia-smi prints as ``N/A`` is left out, never written as 0. ``hpq_gpu_metrics_up`` is 1 when every
essential source answered (``nvidia-smi -q -x`` and the kernel log; ``nvlink -e``, which a GPU without NVLink
may refuse, only leaves its families out). Standard library only (the node's python3). Exit codes as scripts/metric_writer.py says.
"""

from __future__ import annotations

import re
import socket
import sys
import xml.etree.ElementTree as ET
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from hpq.scripts import metric_writer, node_checks, node_doctor
from hpq.scripts.metric_writer import Families, Runner

OUTPUT_NAME = "hpq_gpu.prom"
COMMAND_TIMEOUT_S = 20.0
SMI = ["nvidia-smi", "-q", "-x"]
NVLINK_ERRORS = ["nvidia-smi", "nvlink", "-e"]

# DCGM field -> (XML paths tried in order, help text). Units are what both nvidia-smi and DCGM use.
XML_FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", ("utilization/gpu_util",), "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", ("utilization/memory_util",), "Memory utilization (in %)."),
    ("DCGM_FI_DEV_SM_CLOCK", ("clocks/sm_clock",), "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", ("clocks/mem_clock",), "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", ("temperature/gpu_temp",), "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", ("temperature/memory_temp",), "Memory temperature (in C)."),
    # nvmlDeviceGetPowerUsage, DCGM's source, is what R535+ prints as average_power_draw (the 2x H200 capture, GPU 0
    # idle: NVML 78383 mW, average 78.39 W, instant 77.89 W) and older drivers as power_draw; the instant is not it.
    ("DCGM_FI_DEV_POWER_USAGE", ("gpu_power_readings/average_power_draw", "gpu_power_readings/power_draw",
                                 "power_readings/power_draw"), "Power draw (in W)."),
    ("DCGM_FI_DEV_FB_USED", ("fb_memory_usage/used",), "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", ("fb_memory_usage/free",), "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", ("pci/replay_counter",), "Total number of PCIe retries."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", ("remapped_rows/remapped_row_corr",),
     "Number of remapped rows for correctable errors."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", ("remapped_rows/remapped_row_unc",),
     "Number of remapped rows for uncorrectable errors."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", ("remapped_rows/remapped_row_failure",),
     "Whether remapping of rows has failed."),
)
ECC_FIELDS = (  # (DCGM field, ecc_errors child, correctable?, help)
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "volatile", True, "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "volatile", False, "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "aggregate", True, "Total number of single-bit persistent ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "aggregate", False, "Total number of double-bit persistent ECC errors."),
)
NVLINK_FIELDS = {  # nvidia-smi nvlink -e counter -> DCGM field
    "replay errors": ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries."),
    "recovery errors": ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors."),
    "crc errors": ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                   "Total number of NVLink flow-control CRC errors."),
    "crc flit errors": ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                        "Total number of NVLink flow-control CRC errors."),
    "crc data errors": ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "Total number of NVLink data CRC errors."),
}
XID_HELP = "Value of the last XID error encountered."
UP_HELP = "1 when nvidia-smi -q -x listed GPUs and the kernel log was read, else 0."
_NUMBER = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*(?:%|MHz|C|W|MiB)?\s*$")
_NVLINK_GPU = re.compile(r"^GPU (\d+): ")
_NVLINK_COUNTER = re.compile(r"^\s*Link (\d+): ([A-Za-z ]+?):\s*(\d+)\s*$")


def value_of(text: Optional[str]) -> Optional[float]:
    """``36 C``, ``71.74 W``, ``0 %``, ``Yes``/``No`` -> a number; ``N/A``, absent or anything else -> None."""
    text = (text or "").strip()
    if text in ("Yes", "No"):
        return 1.0 if text == "Yes" else 0.0
    match = _NUMBER.match(text)
    return float(match.group(1)) if match else None


def bus_key(bus_id: str) -> Optional[Tuple[int, int]]:
    """(bus, device) of ``00000000:53:00.0`` or the kernel's ``0000:53:00``: the part both forms share."""
    parts = bus_id.strip().split(".")[0].split(":")
    if len(parts) < 2:
        return None
    try:
        return int(parts[-2], 16), int(parts[-1], 16)
    except ValueError:
        return None


def _ecc_total(gpu: ET.Element, child: str, correctable: bool) -> Optional[float]:
    section = gpu.find("ecc_errors/" + child)
    if section is None:
        return None
    old = section.findtext(("single_bit" if correctable else "double_bit") + "/total")
    if old is not None:  # before R535: single_bit/double_bit with a total each
        return value_of(old)
    if correctable:
        counts = [value_of(e.text) for e in section if e.tag.endswith("_correctable")]
    else:
        counts = [value_of(e.text) for e in section if "_uncorrectable" in e.tag]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


class Gpu(object):
    def __init__(self, index: int, labels: Dict[str, str], bus: Optional[Tuple[int, int]]) -> None:
        self.index, self.labels, self.bus = index, labels, bus


def add_smi(fam: Families, text: str, hostname: str) -> List[Gpu]:
    """The per-GPU fields of ``nvidia-smi -q -x``; the GPUs it lists. ValueError on text that is not that XML."""
    try:
        root = ET.fromstring(text[:node_checks.MAX_TOOL_OUTPUT_BYTES])
    except ET.ParseError as exc:
        raise ValueError("nvidia-smi -q -x output is not XML: %s" % exc) from None
    if root.tag != "nvidia_smi_log":
        raise ValueError("nvidia-smi -q -x output has root <%s>, not <nvidia_smi_log>" % root.tag)
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        bus_id = gpu.get("id") or (gpu.findtext("pci/pci_bus_id") or "")
        minor = (gpu.findtext("minor_number") or "").strip()
        labels = {"gpu": str(index), "UUID": (gpu.findtext("uuid") or "").strip(), "pci_bus_id": bus_id,
                  "device": "nvidia%s" % (minor if minor.isdigit() else index),
                  "modelName": (gpu.findtext("product_name") or "").strip(), "Hostname": hostname}
        for name, paths, help_text in XML_FIELDS:
            value = next((v for v in (value_of(gpu.findtext(p)) for p in paths) if v is not None), None)
            if value is not None:
                fam.add(name, help_text, labels, value)
        for name, child, correctable, help_text in ECC_FIELDS:
            total = _ecc_total(gpu, child, correctable)
            if total is not None:
                fam.add(name, help_text, labels, total)
        gpus.append(Gpu(index, labels, bus_key(bus_id)))
    return gpus


def add_nvlink_errors(fam: Families, text: str, gpus: Sequence[Gpu]) -> None:
    """``nvidia-smi nvlink -e``: each counter summed over the GPU's links (none printed: no NVLink, no series)."""
    by_index = {g.index: g for g in gpus}
    current: Optional[Gpu] = None
    for raw in text[:node_checks.MAX_TOOL_OUTPUT_BYTES].splitlines():
        line = raw[:node_checks.MAX_LINE_CHARS]
        gpu = _NVLINK_GPU.match(line)
        if gpu:
            current = by_index.get(int(gpu.group(1)))
            continue
        counter = _NVLINK_COUNTER.match(line)
        if counter and current is not None:
            field = NVLINK_FIELDS.get(counter.group(2).strip().lower())
            if field:
                fam.add(field[0], field[1], current.labels, float(counter.group(3)), accumulate=True)


def add_xids(fam: Families, kernel_log: str, gpus: Sequence[Gpu]) -> None:
    """The last Xid of each GPU in the kernel log; 0 for a GPU with none."""
    last: Dict[Tuple[int, int], int] = {}
    for event in node_checks.parse_xids(kernel_log):
        key = bus_key(event.bus)
        if key is not None:
            last[key] = event.code
    for gpu in gpus:
        fam.add("DCGM_FI_DEV_XID_ERRORS", XID_HELP, gpu.labels, float(last.get(gpu.bus, 0)) if gpu.bus else 0.0)


def run_command(argv: List[str]) -> Optional[str]:
    return metric_writer.run_command(argv, "gpu_metrics", COMMAND_TIMEOUT_S)


def read_kernel_log() -> Optional[str]:
    text, where = node_doctor.kernel_log()
    if text is None:
        print("gpu_metrics: the kernel log cannot be read (%s): no Xid series" % where, file=sys.stderr)
    return text


def collect(run: Runner = run_command, kernel_log: Callable[[], Optional[str]] = read_kernel_log,
            hostname: Optional[str] = None) -> Tuple[str, bool]:
    """(exposition text, whether every source answered)."""
    fam = Families()
    ok = True
    gpus: List[Gpu] = []
    text = run(SMI)
    if text is None:
        ok = False
    else:
        try:
            gpus = add_smi(fam, text, hostname or socket.gethostname())
        except ValueError as exc:
            print("gpu_metrics: %s" % exc, file=sys.stderr)
            ok = False
    if gpus:
        links = run(NVLINK_ERRORS)  # a GPU without NVLink may refuse it: its families are left out, up stays
        if links is not None:
            add_nvlink_errors(fam, links, gpus)
        log = kernel_log()
        if log is None:
            ok = False
        else:
            add_xids(fam, log, gpus)
    elif ok:
        print("gpu_metrics: nvidia-smi -q -x lists no GPU", file=sys.stderr)
        ok = False
    fam.add("hpq_gpu_metrics_up", UP_HELP, {}, 1.0 if ok else 0.0)
    return fam.render(), ok


def main(argv: Optional[Sequence[str]] = None) -> int:
    return metric_writer.main_loop("gpu_metrics", "Write the GPUs' DCGM fields, as nvidia-smi reads them, as "
                                   "Prometheus metrics.", OUTPUT_NAME, collect, argv)


if __name__ == "__main__":
    sys.exit(main())
