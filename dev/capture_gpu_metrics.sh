#!/usr/bin/env bash
# Run hpq's GPU metric writer (scripts/gpu_metrics.py) on a real GPU host, idle and under a matmul load, and read
# the same DCGM fields through NVML (bench/nvml_dcgm_fields.py) at the same moments, as test data for
# tests/observability/test_gpu_metrics.py. Read-only on the host apart from the load. Needs torch and pynvml.
# Usage (repository root): bash dev/capture_gpu_metrics.sh OUTDIR  (then OUTDIR.tar.gz holds the captures)
set -u
out=${1:?usage: capture_gpu_metrics.sh OUTDIR}
mkdir -p "$out"
pp=$(mktemp -d)  # hpq.scripts and hpq.lifecycle as the node bundle lays them out, without installing hpq
mkdir -p "$pp/hpq" && cp hpq/__init__.py "$pp/hpq/" && ln -s "$PWD/scripts" "$pp/hpq/scripts" \
    && ln -s "$PWD/lifecycle" "$pp/hpq/lifecycle"
snap() {  # snap NAME: the writer's output, and NVML's and nvidia-smi's view of the same fields
    (cd "$pp" && PYTHONPATH=$pp timeout 60 python3 -m hpq.scripts.gpu_metrics --stdout) >"$out/$1.prom" 2>"$out/$1.err"
    echo $? >"$out/$1.rc"
    timeout 60 python3 bench/nvml_dcgm_fields.py observability/dcgm-metrics.csv >"$out/$1.nvml.json" 2>>"$out/$1.err"
    timeout 60 nvidia-smi -q -x >"$out/$1.nvidia-smi-q-x.xml" 2>>"$out/$1.err"
}
snap idle
timeout 60 nvidia-smi nvlink -e >"$out/nvlink-e.txt" 2>&1; echo $? >"$out/nvlink-e.rc"
python3 - <<'PY' &
import time
import torch
mats = [torch.randn(8192, 8192, device=f"cuda:{i}") for i in range(torch.cuda.device_count())]
end = time.time() + 45
while time.time() < end:  # every GPU busy: each queues its matmul, then all are waited for
    outs = [m @ m for m in mats]
    for i in range(len(mats)):
        torch.cuda.synchronize(i)
PY
load=$!
sleep 20
snap load
wait $load
python3 --version >"$out/python.txt" 2>&1
rm -rf "$pp"
tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
