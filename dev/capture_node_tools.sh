#!/usr/bin/env bash
# Capture what the real node tools print on a GPU host, as test data for the parsers that read them
# (hpq doctor's GPU/EFA/node checks, the observability exporters' fields). Read-only: it changes nothing
# on the host. Usage: bash dev/capture_node_tools.sh OUTDIR  (then OUTDIR.tar.gz holds the captures).
# Each capture is the tool's stdout; TOOL.rc and TOOL.err hold its exit code and stderr, so a tool that is
# absent or refused is recorded as such rather than missing.
set -u
out=${1:?usage: capture_node_tools.sh OUTDIR}
mkdir -p "$out"
cap() {  # cap NAME CMD...: run with a 60 s bound, keep stdout, stderr and the exit code
    local name=$1; shift
    timeout 60 "$@" >"$out/$name.out" 2>"$out/$name.err"
    echo $? >"$out/$name.rc"
}
cap uname uname -a
cap os-release cat /etc/os-release
cap nvidia-smi-q-x nvidia-smi -q -x
cap nvidia-smi-q nvidia-smi -q
cap nvidia-smi-L nvidia-smi -L
cap nvidia-smi-topo nvidia-smi topo -m
cap nvidia-smi-nvlink-s nvidia-smi nvlink -s
cap nvidia-smi-nvlink-e nvidia-smi nvlink -e
cap nvidia-smi-query nvidia-smi --format=csv \
    --query-gpu=index,uuid,pci.bus_id,name,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,retired_pages.pending,remapped_rows.failure,clocks_throttle_reasons.active,clocks_event_reasons.active,temperature.gpu,power.draw,clocks.sm,utilization.gpu
cap driver-version cat /proc/driver/nvidia/version
cap dmesg dmesg
cap dmesg-xid sh -c 'dmesg | grep -i xid'
cap journal-kernel journalctl -k --no-pager -n 2000
cap lspci-nvidia sh -c 'lspci -vvv -d 10de: 2>&1'
cap fi_info-efa fi_info -p efa
cap fi_info fi_info --version
cap dcgmi-discovery dcgmi discovery -l
cap dcgmi-version dcgmi --version
cap ibv_devices ibv_devices
cap sys-infiniband sh -c 'ls -l /sys/class/infiniband/ 2>&1; for d in /sys/class/infiniband/*/ports/*/hw_counters; do echo "== $d"; for f in "$d"/*; do printf "%s %s\n" "${f##*/}" "$(cat "$f")"; done; done'
cap df df -P -k / /tmp
cap df-i df -P -i / /tmp
cap mounts cat /proc/mounts
cap nccl-version sh -c 'python3 -c "import torch;print(torch.cuda.nccl.version(), torch.__version__, torch.version.cuda)"'
cap ldconfig-nccl sh -c 'ldconfig -p | grep -E "nccl|fabric|ofi|efa"'
cap nvml python3 - <<'PY'
"""The fields the DCGM exporter's default counters read, through NVML (nvidia-ml-py)."""
import json
import pynvml as n
n.nvmlInit()
out = {"driver": n.nvmlSystemGetDriverVersion(), "cuda_driver": n.nvmlSystemGetCudaDriverVersion_v2(), "gpus": []}
def safe(f, *a):
    try:
        v = f(*a)
        return v.decode() if isinstance(v, bytes) else v
    except n.NVMLError as e:
        return "NVMLError: %s" % e
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    u = safe(n.nvmlDeviceGetUtilizationRates, h)
    g = {
        "index": i, "name": safe(n.nvmlDeviceGetName, h), "uuid": safe(n.nvmlDeviceGetUUID, h),
        "util_gpu": getattr(u, "gpu", u), "util_mem_copy": getattr(u, "memory", u),
        "sm_clock_mhz": safe(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
        "temp_c": safe(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
        "power_mw": safe(n.nvmlDeviceGetPowerUsage, h),
        "ecc_uncorrected_volatile": safe(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC),
        "ecc_uncorrected_aggregate": safe(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_AGGREGATE_ECC),
        "remapped_rows": safe(n.nvmlDeviceGetRemappedRows, h),
        "throttle_reasons": safe(n.nvmlDeviceGetCurrentClocksEventReasons, h),
        "pcie_gen": safe(n.nvmlDeviceGetCurrPcieLinkGeneration, h), "pcie_gen_max": safe(n.nvmlDeviceGetMaxPcieLinkGeneration, h),
        "pcie_width": safe(n.nvmlDeviceGetCurrPcieLinkWidth, h), "pcie_width_max": safe(n.nvmlDeviceGetMaxPcieLinkWidth, h),
        "nvlink": [],
    }
    for link in range(18):
        st = safe(n.nvmlDeviceGetNvLinkState, h, link)
        if isinstance(st, str) and "NVMLError" in st:
            break
        g["nvlink"].append({"link": link, "state": st})
    out["gpus"].append(g)
print(json.dumps(out, indent=1, default=str))
PY
tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
