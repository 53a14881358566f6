"""Look inside one node and say what is wrong with it: the node-side half of ``hpq doctor``.

Two halves, so that the judging is tested on what the real tools print: ``parse_*`` and ``judge`` are pure
functions of the tools' text (tests feed them outputs captured on real GPU hosts, tests/data/node_tools/),
and ``collect`` runs the tools on this node, each bounded in time, and keeps their raw output.

Formats read, and where they come from:
- ``nvidia-smi -q -x``: NVIDIA's XML (``nvidia_smi_log/gpu``; per GPU ``pci/pci_gpu_link_info``,
  ``ecc_errors/volatile``, ``remapped_rows``, ``clocks_event_reasons`` or, before driver R535,
  ``clocks_throttle_reasons``), as captured on H100 and H200 hosts with driver 580.
- ``nvidia-smi nvlink -s``: ``GPU i: NAME (UUID: ...)`` then ``\\t Link n: 26.562 GB/s`` or
  ``Link n: <inactive>``, as captured on 2x H200.
- the kernel log: ``NVRM: Xid (PCI:0000:2b:00): 79, pid=..., GPU has fallen off the bus.`` (the driver's
  format, e.g. NVIDIA/open-gpu-kernel-modules issue 1151), classified by scripts/xid_catalog.py.
- EFA: the devices under ``/sys/class/infiniband`` bound to the ``efa`` driver and their
  ``ports/1/hw_counters`` (names from the Linux EFA driver, drivers/infiniband/hw/efa: struct
  efa_com_network_stats: retrans_timeout_events, unresponsive_remote_events, impaired_remote_conn_events).

Standard library only: it runs on cluster nodes with the system python3.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

from hpq.scripts import xid_catalog
from hpq.scripts.xid_catalog import (
    ACTION_DRAIN,
    ACTION_REBOOT,
    ACTION_REPLACE,
    SEVERITY_CRITICAL,
    SEVERITY_WARNING,
)

# Bounds on what is read, so a huge or hostile input costs linear time and bounded memory.
MAX_TOOL_OUTPUT_BYTES = 8 * 1024 * 1024
MAX_LINE_CHARS = 4096

# A disk this full stops jobs (checkpoints, container layers, logs); the inode limit likewise.
DISK_CRITICAL_PERCENT = 95.0
DISK_WARNING_PERCENT = 90.0


@dataclass(frozen=True)
class GpuModelFacts:
    """What a healthy GPU of a model shows: NVLink links and the PCIe link to the host."""

    nvlinks: int
    pcie_gen: int
    pcie_width: int


# NVIDIA's data sheets: A100 SXM4 has 12 NVLink 3 links and PCIe Gen4 x16; H100 and H200 SXM5 have 18
# NVLink 4 links and PCIe Gen5 x16 (18 links seen on 2x H200, tests/data/node_tools/h200-x2); A10G, L4
# and L40S have no NVLink and PCIe Gen4 x16.
GPU_MODELS: Dict[str, GpuModelFacts] = {
    "A100-40GB": GpuModelFacts(12, 4, 16),
    "A100-80GB": GpuModelFacts(12, 4, 16),
    "H100": GpuModelFacts(18, 5, 16),
    "H200": GpuModelFacts(18, 5, 16),
    "A10G": GpuModelFacts(0, 4, 16),
    "L4": GpuModelFacts(0, 4, 16),
    "L40S": GpuModelFacts(0, 4, 16),
}

# EFA counters that rise when a link or its peer is sick (Linux EFA driver, efa_com_network_stats).
EFA_ERROR_COUNTERS = ("retrans_timeout_events", "unresponsive_remote_events", "impaired_remote_conn_events")


@dataclass
class Finding:
    """One thing wrong (or worth knowing) on one node, with the line that shows it and what to do."""

    kind: str
    severity: str
    evidence: str
    action: str
    gpu: Optional[str] = None

    def to_dict(self) -> Dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class GpuState:
    """One GPU as ``nvidia-smi -q -x`` describes it; None where the tool said N/A."""

    bus_id: str
    name: str
    ecc_uncorrected_volatile: Optional[int] = None
    remapped_pending: Optional[bool] = None
    remapped_failure: Optional[bool] = None
    pcie_gen_max: Optional[int] = None
    pcie_gen_current: Optional[int] = None
    pcie_width_current: Optional[int] = None
    pcie_width_max: Optional[int] = None
    slowdowns: List[str] = field(default_factory=list)


@dataclass
class SmiReport:
    driver_version: str
    cuda_version: str
    gpus: List[GpuState]


@dataclass(frozen=True)
class XidEvent:
    bus: str
    code: int
    message: str
    line: str


def _cap(text: str) -> str:
    return text[:MAX_TOOL_OUTPUT_BYTES]


def _int_or_none(text: Optional[str]) -> Optional[int]:
    text = (text or "").strip().rstrip("x")
    return int(text) if text.isascii() and text.isdigit() else None


def _yes_no(text: Optional[str]) -> Optional[bool]:
    text = (text or "").strip().lower()
    return {"yes": True, "no": False}.get(text)


# Clock slowdowns that mean hardware trouble (heat, power delivery), not the normal idle or power cap.
_SLOWDOWN_SUFFIXES = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")


def parse_smi_xml(text: str) -> SmiReport:
    """The GPUs of ``nvidia-smi -q -x``. Raises ValueError on text that is not that XML."""
    try:
        root = ET.fromstring(_cap(text))
    except ET.ParseError as exc:
        raise ValueError("nvidia-smi -q -x output is not XML: %s" % exc) from None
    if root.tag != "nvidia_smi_log":
        raise ValueError("nvidia-smi -q -x output has root <%s>, not <nvidia_smi_log>" % root.tag)
    gpus = []
    for gpu in root.findall("gpu"):
        state = GpuState(bus_id=gpu.get("id") or (gpu.findtext("pci/pci_bus_id") or "?"),
                         name=(gpu.findtext("product_name") or "").strip())
        volatile = gpu.find("ecc_errors/volatile")
        if volatile is not None:
            counts = [_int_or_none(e.text) for e in volatile if "uncorrectable" in e.tag]
            known = [c for c in counts if c is not None]
            state.ecc_uncorrected_volatile = sum(known) if known else None
        state.remapped_pending = _yes_no(gpu.findtext("remapped_rows/remapped_row_pending"))
        state.remapped_failure = _yes_no(gpu.findtext("remapped_rows/remapped_row_failure"))
        link = "pci/pci_gpu_link_info/"
        state.pcie_gen_max = _int_or_none(gpu.findtext(link + "pcie_gen/max_link_gen"))
        state.pcie_gen_current = _int_or_none(gpu.findtext(link + "pcie_gen/current_link_gen"))
        state.pcie_width_max = _int_or_none(gpu.findtext(link + "link_widths/max_link_width"))
        state.pcie_width_current = _int_or_none(gpu.findtext(link + "link_widths/current_link_width"))
        reasons = gpu.find("clocks_event_reasons")
        if reasons is None:
            reasons = gpu.find("clocks_throttle_reasons")
        for reason in reasons if reasons is not None else ():
            if (reason.text or "").strip() == "Active" and reason.tag.endswith(_SLOWDOWN_SUFFIXES):
                state.slowdowns.append(reason.tag.split("reason_", 1)[-1])
        gpus.append(state)
    return SmiReport(driver_version=(root.findtext("driver_version") or "").strip(),
                     cuda_version=(root.findtext("cuda_version") or "").strip(), gpus=gpus)


_NVLINK_GPU_RE = re.compile(r"^GPU (\d+): ")
_NVLINK_LINK_RE = re.compile(r"^\s*Link (\d+): (.*)$")


def parse_nvlink_status(text: str) -> Dict[int, Dict[int, bool]]:
    """``nvidia-smi nvlink -s``: GPU index -> link -> up (a speed) or down (``<inactive>`` or no speed)."""
    links: Dict[int, Dict[int, bool]] = {}
    current: Optional[int] = None
    for raw in _cap(text).splitlines():
        line = raw[:MAX_LINE_CHARS]
        gpu = _NVLINK_GPU_RE.match(line)
        if gpu:
            current = int(gpu.group(1))
            links[current] = {}
            continue
        link = _NVLINK_LINK_RE.match(line)
        if link and current is not None:
            links[current][int(link.group(1))] = "GB/s" in link.group(2) and "inactive" not in link.group(2)
    return links


_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]{1,20})\): (\d{1,4}), (.*)$")


def parse_xids(kernel_log: str) -> List[XidEvent]:
    """Every Xid line in a kernel log (dmesg or journalctl -k), in order."""
    events = []
    for raw in _cap(kernel_log).splitlines():
        if "NVRM: Xid" not in raw:
            continue
        line = raw[:MAX_LINE_CHARS]
        match = _XID_RE.search(line)
        if match:
            events.append(XidEvent(match.group(1), int(match.group(2)), match.group(3).strip(), line.strip()))
    return events


def judge_gpus(smi: Optional[SmiReport], expected_count: int, model: str,
               nvlinks: Optional[Mapping[int, Mapping[int, bool]]] = None) -> List[Finding]:
    """Findings from nvidia-smi: count, ECC, row remapping, PCIe link, slowdowns and NVLink."""
    if smi is None:
        return [Finding("gpu_count", SEVERITY_CRITICAL,
                        "nvidia-smi did not answer: 0 of %d GPUs visible" % expected_count, ACTION_REBOOT)]
    findings: List[Finding] = []
    if len(smi.gpus) != expected_count:
        findings.append(Finding(
            "gpu_count", SEVERITY_CRITICAL,
            "nvidia-smi shows %d of %d GPUs (%s)" % (len(smi.gpus), expected_count,
                                                    ", ".join(g.bus_id for g in smi.gpus) or "none"),
            ACTION_REBOOT))
    facts = GPU_MODELS.get(model)
    for gpu in smi.gpus:
        if gpu.remapped_failure:
            # NVIDIA's memory error management: a row-remapping failure means the GPU is out of spare rows.
            findings.append(Finding("row_remap_failure", SEVERITY_CRITICAL,
                                    "%s: remapped_row_failure Yes" % gpu.bus_id, ACTION_REPLACE, gpu.bus_id))
        if gpu.ecc_uncorrected_volatile:
            findings.append(Finding("ecc_uncorrectable", SEVERITY_CRITICAL,
                                    "%s: %d uncorrectable ECC errors since the driver loaded"
                                    % (gpu.bus_id, gpu.ecc_uncorrected_volatile), ACTION_REBOOT, gpu.bus_id))
        if gpu.remapped_pending:
            findings.append(Finding("row_remap_pending", SEVERITY_WARNING,
                                    "%s: remapped_row_pending Yes (a GPU reset activates the remap)"
                                    % gpu.bus_id, ACTION_REBOOT, gpu.bus_id))
        if facts is not None:
            # The current PCIe generation drops when a GPU idles (power saving), so only the width and the
            # link's maximum generation say that the slot or riser is degraded.
            if gpu.pcie_width_current is not None and gpu.pcie_width_current < facts.pcie_width:
                findings.append(Finding("pcie_degraded", SEVERITY_WARNING,
                                        "%s: PCIe x%d, expected x%d" % (gpu.bus_id, gpu.pcie_width_current,
                                                                        facts.pcie_width),
                                        ACTION_REBOOT, gpu.bus_id))
            if gpu.pcie_gen_max is not None and gpu.pcie_gen_max < facts.pcie_gen:
                findings.append(Finding("pcie_degraded", SEVERITY_WARNING,
                                        "%s: PCIe link at most Gen%d, expected Gen%d"
                                        % (gpu.bus_id, gpu.pcie_gen_max, facts.pcie_gen),
                                        ACTION_REBOOT, gpu.bus_id))
        for reason in gpu.slowdowns:
            findings.append(Finding("clock_slowdown", SEVERITY_WARNING,
                                    "%s: clocks slowed down (%s active)" % (gpu.bus_id, reason),
                                    ACTION_DRAIN, gpu.bus_id))
    if facts is not None and facts.nvlinks and nvlinks is not None:
        for index in sorted(nvlinks):
            up = sum(1 for ok in nvlinks[index].values() if ok)
            if up < facts.nvlinks:
                findings.append(Finding("nvlink_down", SEVERITY_CRITICAL,
                                        "GPU %d: %d of %d NVLinks active" % (index, up, facts.nvlinks),
                                        ACTION_REBOOT, str(index)))
    return findings


def judge_xids(events: Sequence[XidEvent]) -> List[Finding]:
    """One finding per (GPU, Xid code), the latest line as evidence; app-level Xids stay informational."""
    latest: Dict[tuple, XidEvent] = {}
    counts: Dict[tuple, int] = {}
    for event in events:
        key = (event.bus, event.code)
        latest[key] = event
        counts[key] = counts.get(key, 0) + 1
    findings = []
    for key, event in latest.items():
        mnemonic, severity, action = xid_catalog.classify(event.code, event.message)
        times = " (%d times)" % counts[key] if counts[key] > 1 else ""
        findings.append(Finding("xid", severity, "Xid %d %s on %s%s: %s"
                                % (event.code, mnemonic, event.bus, times, event.line), action, event.bus))
    return findings


def judge_efa(devices: Sequence[str], expected: int, counters_before: Mapping[str, Mapping[str, int]],
              counters_after: Mapping[str, Mapping[str, int]], provider_ok: Optional[bool]) -> List[Finding]:
    """EFA device count, the libfabric provider answering, and error counters that rose while we watched."""
    findings = []
    if expected and len(devices) < expected:
        findings.append(Finding("efa_count", SEVERITY_CRITICAL,
                                "%d of %d EFA devices present (%s)" % (len(devices), expected,
                                                                       ", ".join(devices) or "none"),
                                ACTION_REBOOT))
    if expected and provider_ok is False:
        findings.append(Finding("efa_provider", SEVERITY_CRITICAL,
                                "fi_info -p efa found no EFA provider", ACTION_REBOOT))
    for device in sorted(counters_after):
        for name in EFA_ERROR_COUNTERS:
            before = counters_before.get(device, {}).get(name)
            after = counters_after[device].get(name)
            if before is not None and after is not None and after > before:
                findings.append(Finding("efa_errors", SEVERITY_WARNING,
                                        "%s: %s rose %d -> %d" % (device, name, before, after), ACTION_DRAIN))
    return findings


def judge_disk(path: str, total: int, free: int, inodes_total: int, inodes_free: int) -> List[Finding]:
    """A disk or its inodes nearly full (statvfs numbers, as df computes them)."""
    findings = []
    for what, whole, left in (("space", total, free), ("inodes", inodes_total, inodes_free)):
        if whole <= 0:
            continue
        used = 100.0 * (whole - left) / whole
        if used >= DISK_WARNING_PERCENT:
            severity = SEVERITY_CRITICAL if used >= DISK_CRITICAL_PERCENT else SEVERITY_WARNING
            findings.append(Finding("disk_full", severity, "%s: %.1f%% of %s used" % (path, used, what),
                                    ACTION_DRAIN))
    return findings


def judge_mounts(proc_mounts: str, fsx_path: Optional[str], writable: Optional[bool]) -> List[Finding]:
    """``/fsx`` mounted as Lustre (an autofs placeholder alone is not a mount) and writable."""
    if not fsx_path:
        return []
    types = [fields[2] for fields in (line.split() for line in _cap(proc_mounts).splitlines())
             if len(fields) >= 3 and fields[1] == fsx_path]
    if "lustre" not in types:
        return [Finding("fsx_missing", SEVERITY_CRITICAL, "%s is not mounted as lustre (%s)"
                        % (fsx_path, ", ".join(types) or "no mount"), ACTION_REBOOT)]
    if writable is False:
        return [Finding("fsx_unwritable", SEVERITY_CRITICAL, "%s: a test file could not be written" % fsx_path,
                        ACTION_DRAIN)]
    return []


# A fingerprint value a node could not read (its tool did not answer): neither drift nor part of a majority.
UNKNOWN = "unknown"


def drift(fingerprints: Mapping[str, Mapping[str, str]]) -> Dict[str, List[Finding]]:
    """Per node, every software version that differs from the majority of nodes (no majority: no verdict)."""
    out: Dict[str, List[Finding]] = {node: [] for node in fingerprints}
    keys = sorted({key for fp in fingerprints.values() for key in fp})
    for key in keys:
        values: Dict[str, List[str]] = {}
        for node, fp in fingerprints.items():
            if fp.get(key) != UNKNOWN:
                values.setdefault(fp.get(key, "absent"), []).append(node)
        if len(values) < 2:
            continue
        majority_value, majority_nodes = max(values.items(), key=lambda kv: len(kv[1]))
        if len(majority_nodes) * 2 <= len(fingerprints):
            continue
        for value, nodes in values.items():
            if value == majority_value:
                continue
            for node in nodes:
                out[node].append(Finding("drift", SEVERITY_WARNING, "%s %s, while %d of %d nodes have %s"
                                         % (key, value, len(majority_nodes), len(fingerprints), majority_value),
                                         ACTION_REPLACE))
    return out


def worst(findings: Iterable[Finding]) -> str:
    """The node's verdict: FAIL on anything critical, PASS otherwise (warnings are shown, not failing)."""
    return "FAIL" if any(f.severity == SEVERITY_CRITICAL for f in findings) else "PASS"


def read_efa_counters(sys_root: str = "/sys/class/infiniband") -> Dict[str, Dict[str, int]]:
    """device -> counter -> value, for the EFA devices under ``sys_root`` (port 1's hw_counters)."""
    counters: Dict[str, Dict[str, int]] = {}
    for device in efa_devices(sys_root):
        folder = os.path.join(sys_root, device, "ports", "1", "hw_counters")
        values = {}
        for name in EFA_ERROR_COUNTERS:
            value = read_counter(os.path.join(folder, name))
            if value is not None:
                values[name] = value
        counters[device] = values
    return counters


def read_counter(path: str) -> Optional[int]:
    """A sysfs counter file's number; None when it cannot be read or is not a plain decimal number (a binary
    file, or "²": ``isdigit()`` says yes and ``int()`` refuses it)."""
    try:
        with open(path) as fh:
            text = fh.read(64).strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isascii() and text.isdigit() else None


def efa_devices(sys_root: str = "/sys/class/infiniband") -> List[str]:
    """RDMA devices bound to the ``efa`` kernel driver."""
    try:
        names = sorted(os.listdir(sys_root))
    except OSError:
        return []
    found = []
    for name in names:
        driver = os.path.join(sys_root, name, "device", "driver")
        if os.path.basename(os.path.realpath(driver)) == "efa":
            found.append(name)
    return found


def tool_json(text: str, tool: str) -> object:
    """A tool's JSON answer, read up to the output bound every reader keeps. Raises ValueError naming ``tool``
    on text that is not JSON (its check is then unchecked, not passed)."""
    try:
        return json.loads(text[:MAX_TOOL_OUTPUT_BYTES])
    except ValueError as exc:
        raise ValueError("%s output is not JSON: %s" % (tool, exc)) from None
