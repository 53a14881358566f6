#!/usr/bin/env bash
# Everything the GPU benchmarks of docs/benchmarks.md need, in one run on a multi-GPU box
# without Slurm or internet (the device machine). Writes at most 8 files to $OUT.
#   STAGES="env nccl nanogpt" bench/gpu_bench.sh
# Stages: env (versions, topology), nccl (NCCL baseline vs built-in benchmark, same sizes,
# baseline run twice around the built-in one), nanogpt (gpt2-124m on 1 GPU, then all GPUs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/hpq-bench-out}
mkdir -p "$OUT"
STAGES=${STAGES:-"env nccl nanogpt"}
MAXB=${MAXB:-16G}
ITERS=${ITERS:-20}
NG_ITERS=${NG_ITERS:-200}
NG_ARGS=${NG_ARGS:-"--compile"}
# NVLink multicast (NVLS) stays off on the shared machine (KINDS.md); the same goes into every child.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HPQ_IMDS_ENDPOINT=off PYTHONUNBUFFERED=1 HPQ_RESULTS_DIR=/tmp/hpq-results NCCL_DEBUG=WARN
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')

# The node bundle layout (<root>/hpq/{scripts,lifecycle}), as on a cluster node: nothing installed.
B=/tmp/hpq-bundle
rm -rf "$B" && mkdir -p "$B/hpq"
cp hpq/__init__.py hpq/errors.py "$B/hpq/" && cp -r scripts "$B/hpq/scripts" && cp -r lifecycle "$B/hpq/lifecycle"
export PATH="$B/hpq/scripts/bin:$PATH"

stage() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
t() { echo "== $(date -u +%H:%M:%S) $*"; }

if stage env; then
  t env
  { nvidia-smi; nvidia-smi topo -m; nvcc --version | tail -2
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    nproc; } > "$OUT/env.txt" 2>&1
  tail -4 "$OUT/env.txt"
fi

if stage nccl; then
  t build baseline
  NCCL_DIR=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
  nvcc -O2 -std=c++17 -arch=sm_90 -I"$NCCL_DIR/include" -o /tmp/nccl_baseline bench/nccl_allreduce_baseline.cu \
       -L"$NCCL_DIR/lib" -l:libnccl.so.2 -Xlinker -rpath="$NCCL_DIR/lib" || { echo "baseline build failed"; }
  # Interleaved: baseline, built-in, baseline, built-in: same sizes, same session.
  for i in 1 2; do
    t "baseline $i"
    /tmp/nccl_baseline -b 8 -e "$MAXB" -f 2 -n "$ITERS" -w 5 -g "$NGPU" > "$OUT/h200x${NGPU}_baseline_run$i.txt" 2>&1
    t "built-in $i"
    run-nccl-test 1 "$NGPU" --launcher local -b 8 -e "$MAXB" -n "$ITERS" -w 5 --log-dir /tmp/hpq-results \
        > "$OUT/h200x${NGPU}_builtin_run$i.txt" 2>&1
    echo "run-nccl-test exit $?"
  done
fi

if stage nanogpt; then
  # One 1-GPU run, then the multi-GPU variants separated by ';' (all logs in one file).
  NG_VARIANTS=${NG_VARIANTS:-"--compile"}
  LOG="$OUT/nanogpt_gpt2-124m_runs.txt"
  : > "$LOG"
  t nanogpt 1 GPU
  echo "===== run-nanogpt 1 1 $NG_ARGS" >> "$LOG"
  run-nanogpt 1 1 --launcher local --model gpt2-124m $NG_ARGS --iters "$NG_ITERS" --ckpt-every 0 --log-every 20 \
      >> "$LOG" 2>&1
  echo "run-nanogpt exit $?"
  IFS=';' read -r -a variants <<< "$NG_VARIANTS"
  for v in "${variants[@]}"; do
    t nanogpt "$NGPU" GPUs: $v
    echo "===== run-nanogpt 1 $NGPU $v" >> "$LOG"
    run-nanogpt 1 "$NGPU" --launcher local --model gpt2-124m $v --iters "$NG_ITERS" --ckpt-every 0 \
        --log-every 20 >> "$LOG" 2>&1
    echo "run-nanogpt exit $?"
  done
fi
t summary
python3 bench/summarize.py "$OUT" /tmp/hpq-results | tee "$OUT/summary.md"
