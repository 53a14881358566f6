"""The Trainium half of the node checks: Neuron devices seen against the type's, and Neuron hardware errors.

Pure functions of the tools' text, as node_checks.py is for GPUs, so the judging is tested on what the real
tools print. Formats read, and where they come from:

- ``neuron-ls --json-output`` (``-j``): a JSON list with one object per Neuron device (``neuron_device``,
  ``bdf``, ``nc_count``, ``memory_size``, ``connected_to``, ``neuron_processes`` with their
  ``neuron_runtime_version``): the Neuron LS User Guide, aws-neuron/aws-neuron-sdk
  tools/neuron-sys-tools/neuron-ls.rst (sample kept in tests/data/node_tools/neuron/). Neuron 2.34 drops
  ``--json-output`` for ``--output-format json``, an object that adds instance-wide fields around the devices
  (announce-intent-eos-neuron-ls-json, same repository): a device list under any key of such an object is read
  the same way, untested against a real 2.34 print.
- the kernel log: the Neuron driver prints ``NEURON_HW_ERR=<KIND> instance-id=... nd-id=N nc-id=N ...
  action=TERMINATE_INSTANCE`` on a hardware error (Neuron Runtime troubleshooting guide,
  https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/nrt-troubleshoot.html); the Neuron
  Node Problem Detector treats SRAM_UNCORRECTABLE_ERROR, NC_UNCORRECTABLE_ERROR, HBM_UNCORRECTABLE_ERROR and
  DMA_ERROR as permanent conditions that replace the node (aws-neuron/aws-neuron-sdk
  src/k8/neuron-problem-detector/k8s-neuron-problem-detector-and-recovery-config.yml).

Standard library only: it runs on cluster nodes with the system python3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

from hpq.scripts.node_checks import MAX_LINE_CHARS, MAX_TOOL_OUTPUT_BYTES, Finding, tool_json
from hpq.scripts.xid_catalog import ACTION_REBOOT, ACTION_REPLACE, SEVERITY_CRITICAL


@dataclass(frozen=True)
class NeuronDevice:
    index: int
    bdf: str
    cores: Optional[int]
    runtime_versions: tuple


def _device_list(doc: Any) -> Optional[list]:
    """The per-device list: the document itself (``--json-output``) or a list of device objects inside it."""
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        for value in doc.values():
            if isinstance(value, list) and value and all(isinstance(v, dict) and "neuron_device" in v
                                                         for v in value):
                return value
        if "neuron_device" in doc:
            return [doc]
    return None


def parse_neuron_ls(text: str) -> List[NeuronDevice]:
    """The devices of ``neuron-ls --json-output``. Raises ValueError on text that is not that JSON."""
    doc = tool_json(text, "neuron-ls")
    entries = _device_list(doc)
    if entries is None:
        raise ValueError("neuron-ls JSON has no list of devices")
    devices = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("neuron_device"), int):
            raise ValueError("neuron-ls JSON device without an integer neuron_device: %.200r" % (entry,))
        procs = entry.get("neuron_processes") or []
        versions = tuple(sorted({str(p.get("neuron_runtime_version")) for p in procs
                                 if isinstance(p, dict) and p.get("neuron_runtime_version")}))
        cores = entry.get("nc_count")
        devices.append(NeuronDevice(entry["neuron_device"], str(entry.get("bdf") or "?"),
                                    cores if isinstance(cores, int) else None, versions))
    return devices


def judge_neuron(devices: Optional[Sequence[NeuronDevice]], expected_count: int) -> List[Finding]:
    """Devices seen against the type's count; None: neuron-ls failed (no driver, a device gone wrong)."""
    if devices is None:
        return [Finding("neuron_count", SEVERITY_CRITICAL,
                        "neuron-ls did not answer: 0 of %d Neuron devices visible" % expected_count, ACTION_REBOOT)]
    if len(devices) != expected_count:
        return [Finding("neuron_count", SEVERITY_CRITICAL, "neuron-ls shows %d of %d Neuron devices (%s)"
                        % (len(devices), expected_count, ", ".join(d.bdf for d in devices) or "none"),
                        ACTION_REBOOT)]
    return []


_HW_ERR_RE = re.compile(r"NEURON_HW_ERR=([A-Z_]{1,64})(.*)$")
_ND_RE = re.compile(r"\bnd-id=(\d{1,4})")


def judge_neuron_log(kernel_log: str) -> List[Finding]:
    """One finding per (device, error kind) of ``NEURON_HW_ERR=`` lines, the latest as evidence: replace."""
    latest = {}
    counts: dict = {}
    for raw in kernel_log[:MAX_TOOL_OUTPUT_BYTES].splitlines():
        if "NEURON_HW_ERR=" not in raw:
            continue
        line = raw[:MAX_LINE_CHARS].strip()
        match = _HW_ERR_RE.search(line)
        if not match:
            continue
        nd = _ND_RE.search(match.group(2))
        key = (nd.group(1) if nd else "?", match.group(1))
        latest[key] = line
        counts[key] = counts.get(key, 0) + 1
    findings = []
    for (device, kind), line in latest.items():
        times = " (%d times)" % counts[(device, kind)] if counts[(device, kind)] > 1 else ""
        findings.append(Finding("neuron_hw_error", SEVERITY_CRITICAL, "%s on Neuron device %s%s: %s"
                                % (kind, device, times, line), ACTION_REPLACE, device))
    return findings
