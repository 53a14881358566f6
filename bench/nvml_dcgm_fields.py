"""Read, through NVML, each DCGM field hpq's dcgm-exporter selection names, on a real GPU; print JSON.

    python3 bench/nvml_dcgm_fields.py [observability/dcgm-metrics.csv | -] > capture.json

Why: DCGM (and so dcgm-exporter) is not installed on the lent GPU machines; NVML is (the driver's
libnvidia-ml, through pynvml). Most DCGM device fields are NVML values under another name: DCGM's field
documentation says which NVML call backs each. This shows which of hpq's fields the GPU really reports, and
keeps the raw values as test data (tests/observability/data/exporters/). Fields NVML does not expose (the profiling
``DCGM_FI_PROF_*`` family needs DCGM's profiler; Xid arrives as an event, not a value) are listed as such.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import pynvml as N  # noqa: N812


def _field(fid: int) -> Callable:
    def read(h):
        v = N.nvmlDeviceGetFieldValues(h, [fid])[0]
        if v.nvmlReturn != N.NVML_SUCCESS:
            raise N.NVMLError(v.nvmlReturn)
        kinds = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}
        return getattr(v.value, kinds.get(v.valueType, "ullVal"))

    return read


def readers() -> dict[str, tuple]:
    """DCGM field -> (NVML call as text, reader)."""
    vol, agg = N.NVML_VOLATILE_ECC, N.NVML_AGGREGATE_ECC
    corr, unc = N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    return {
        "DCGM_FI_DEV_SM_CLOCK": (
            "nvmlDeviceGetClockInfo(SM)",
            lambda h: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM),
        ),
        "DCGM_FI_DEV_MEM_CLOCK": (
            "nvmlDeviceGetClockInfo(MEM)",
            lambda h: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM),
        ),
        "DCGM_FI_DEV_GPU_TEMP": (
            "nvmlDeviceGetTemperature(GPU)",
            lambda h: N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU),
        ),
        "DCGM_FI_DEV_MEMORY_TEMP": ("field NVML_FI_DEV_MEMORY_TEMP", _field(N.NVML_FI_DEV_MEMORY_TEMP)),
        "DCGM_FI_DEV_POWER_USAGE": ("nvmlDeviceGetPowerUsage (mW)", N.nvmlDeviceGetPowerUsage),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (
            "nvmlDeviceGetTotalEnergyConsumption (mJ)",
            N.nvmlDeviceGetTotalEnergyConsumption,
        ),
        "DCGM_FI_DEV_GPU_UTIL": (
            "nvmlDeviceGetUtilizationRates.gpu",
            lambda h: N.nvmlDeviceGetUtilizationRates(h).gpu,
        ),
        "DCGM_FI_DEV_MEM_COPY_UTIL": (
            "nvmlDeviceGetUtilizationRates.memory",
            lambda h: N.nvmlDeviceGetUtilizationRates(h).memory,
        ),
        "DCGM_FI_DEV_FB_FREE": (
            "nvmlDeviceGetMemoryInfo.free (B)",
            lambda h: N.nvmlDeviceGetMemoryInfo(h).free,
        ),
        "DCGM_FI_DEV_FB_USED": (
            "nvmlDeviceGetMemoryInfo.used (B)",
            lambda h: N.nvmlDeviceGetMemoryInfo(h).used,
        ),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": (
            "nvmlDeviceGetPcieReplayCounter",
            N.nvmlDeviceGetPcieReplayCounter,
        ),
        "DCGM_FI_DEV_POWER_VIOLATION": (
            "nvmlDeviceGetViolationStatus(POWER).violationTime (ns)",
            lambda h: N.nvmlDeviceGetViolationStatus(h, N.NVML_PERF_POLICY_POWER).violationTime,
        ),
        "DCGM_FI_DEV_THERMAL_VIOLATION": (
            "nvmlDeviceGetViolationStatus(THERMAL).violationTime (ns)",
            lambda h: N.nvmlDeviceGetViolationStatus(h, N.NVML_PERF_POLICY_THERMAL).violationTime,
        ),
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (
            "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)",
            lambda h: N.nvmlDeviceGetTotalEccErrors(h, corr, vol),
        ),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (
            "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
            lambda h: N.nvmlDeviceGetTotalEccErrors(h, unc, vol),
        ),
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (
            "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE)",
            lambda h: N.nvmlDeviceGetTotalEccErrors(h, unc, agg),
        ),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": (
            "nvmlDeviceGetRemappedRows[0]",
            lambda h: N.nvmlDeviceGetRemappedRows(h)[0],
        ),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (
            "nvmlDeviceGetRemappedRows[1]",
            lambda h: N.nvmlDeviceGetRemappedRows(h)[1],
        ),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": (
            "nvmlDeviceGetRemappedRows[3]",
            lambda h: N.nvmlDeviceGetRemappedRows(h)[3],
        ),
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": (
            "field NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL",
            _field(N.NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL),
        ),
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (
            "field NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            _field(N.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL),
        ),
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": (
            "field NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
            _field(N.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL),
        ),
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": (
            "field NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
            _field(N.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL),
        ),
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": (
            "field NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
            _field(N.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL),
        ),
    }


NOT_NVML = {
    "DCGM_FI_DEV_XID_ERRORS": "an event (nvmlEventSetWait, NVML_EVENT_TYPE_XID_CRITICAL_ERROR), not a value",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "a DCGM profiling metric (needs nv-hostengine's profiler)",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "a DCGM profiling metric (needs nv-hostengine's profiler)",
    "DCGM_FI_PROF_DRAM_ACTIVE": "a DCGM profiling metric (needs nv-hostengine's profiler)",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "a DCGM profiling metric (needs nv-hostengine's profiler)",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "a DCGM profiling metric (needs nv-hostengine's profiler)",
}


def main() -> int:
    csv = sys.argv[1] if len(sys.argv) > 1 else "observability/dcgm-metrics.csv"
    table = readers()
    if csv == "-":  # no checkout at hand (a device run from a copy): every field this script knows
        fields = sorted(set(table) | set(NOT_NVML))
    else:
        with open(csv) as fh:
            fields = [ln.split(",", 1)[0].strip() for ln in fh if ln.strip() and not ln.startswith("#")]
    N.nvmlInit()
    out = {"driver": N.nvmlSystemGetDriverVersion(), "nvml": N.nvmlSystemGetNVMLVersion(), "gpus": []}
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        gpu = {"index": i, "name": N.nvmlDeviceGetName(h), "fields": {}}
        for f in fields:
            if f in NOT_NVML:
                gpu["fields"][f] = {"status": "not_via_nvml", "why": NOT_NVML[f]}
                continue
            if f not in table:
                gpu["fields"][f] = {"status": "no_reader"}
                continue
            call, read = table[f]
            try:
                gpu["fields"][f] = {"status": "ok", "via": call, "value": read(h)}
            except N.NVMLError as exc:
                gpu["fields"][f] = {"status": "error", "via": call, "error": str(exc)}
        out["gpus"].append(gpu)
    N.nvmlShutdown()
    json.dump(out, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
