#!/usr/bin/env bash
# Everything the GPU benchmarks of docs/benchmarks.md need, in one run on a multi-GPU box
# without Slurm or internet (the device machine). Writes its logs and summary.md to $OUT.
#   STAGES="env nccltests nanogpt karpathy" bench/gpu_bench.sh
# Stages: env (versions, topology), nccltests (NVIDIA nccl-tests 2.19.6 built here against torch's NCCL,
# interleaved with the built-in benchmark, twice each; run-nccl-test's nccl-tests path; its mpirun command
# once if mpirun exists; stage mpirun alone runs only that), nanogpt (gpt2-124m on 1 GPU, then all GPUs),
# karpathy (karpathy/nanoGPT's train.py, same shape, from .tools/nanoGPT). The older `nccl` stage (a home-made
# NCCL baseline program) is retired: docs/benchmarks.md says why.
# nccltests needs the nccl-tests source tarball: NCCL_TESTS_TGZ (default .tools/nccl-tests-2.19.6.tar.gz,
# an ignored folder the device tool can carry; the tarball is third-party and never committed).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/hpq-bench-out}
mkdir -p "$OUT"
STAGES=${STAGES:-"env nccltests nanogpt"}
MAXB=${MAXB:-16G}
NG_ITERS=${NG_ITERS:-200}
NG_ARGS=${NG_ARGS:-"--compile"}
# NVLink multicast (NVLS) stays off on the lent GPU machines (their operators' rule); the same goes into every child.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# hpq's launches drop inherited NCCL_* the worker type does not set (docs/design.md): keep this one on purpose.
export HPQ_KEEP_ENV=NCCL_NVLS_ENABLE
export HPQ_IMDS_ENDPOINT=off PYTHONUNBUFFERED=1 HPQ_RESULTS_DIR=/tmp/hpq-results NCCL_DEBUG=WARN
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')
# File prefix like h200x4 / h100x1, from the GPU's own name.
TAG=$(python3 -c 'import re, torch; m = re.search(r"([HAB]\d{2,3})", torch.cuda.get_device_name(0)); print((m.group(1) if m else "gpu").lower())')x$NGPU
NCCL_TESTS_TGZ=${NCCL_TESTS_TGZ:-.tools/nccl-tests-2.19.6.tar.gz}

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

if stage nccltests || stage mpirun; then  # the NCCL library torch loads: nccl-tests builds and runs against it
  NCCL_DIR=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
  export LD_LIBRARY_PATH="$NCCL_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

if stage nccltests; then
  t build nccl-tests
  bash bench/build_nccl_tests.sh "$NCCL_TESTS_TGZ" /tmp/nccl-tests "$NCCL_DIR" > "$OUT/nccl-tests_build.txt" 2>&1 \
      || { echo "nccl-tests build failed"; tail -20 "$OUT/nccl-tests_build.txt"; }
  ART=/tmp/nccl-tests/build/all_reduce_perf
  # Interleaved on the same GPUs: nccl-tests, built-in, nccl-tests, built-in (same sizes, same session).
  for i in 1 2; do
    t "nccl-tests $i"
    "$ART" -b 8 -e "$MAXB" -f 2 -g "$NGPU" > "$OUT/${TAG}_nccl-tests_all_reduce_perf_run$i.txt" 2>&1
    echo "all_reduce_perf exit $?"
    t "built-in $i"
    run-nccl-test 1 "$NGPU" --launcher local --builtin -b 8 -e "$MAXB" --log-dir /tmp/hpq-results \
        > "$OUT/${TAG}_run-nccl-test_builtin_run$i.txt" 2>&1
    echo "run-nccl-test exit $?"
  done
  # run-nccl-test's nccl-tests path without MPI: all_reduce_perf -g N found through NCCL_TESTS_HOME.
  t "run-nccl-test through nccl-tests (--launcher local)"
  NCCL_TESTS_HOME=/tmp/nccl-tests run-nccl-test 1 "$NGPU" --launcher local -b 8 -e "$MAXB" \
      --log-dir /tmp/hpq-results > "$OUT/${TAG}_run-nccl-test_nccl-tests_local.txt" 2>&1
  echo "run-nccl-test (nccl-tests, local) exit $?"
fi

if stage nccltests || stage mpirun; then
  # The mpirun path needs a Slurm allocation (its hostfile); here the exact command run-nccl-test builds
  # (mpirun_command: ob1, btl tcp,self, -x the transport variables, one GPU per rank) runs on a
  # localhost hostfile, against an MPI build of nccl-tests.
  if MPIRUN=$(command -v mpirun); then
    MPI_HOME=$(dirname "$(dirname "$(readlink -f "$MPIRUN")")")
    if [ ! -f "$MPI_HOME/include/mpi.h" ] && command -v mpicc >/dev/null; then
      # Debian keeps Open MPI's headers and libraries apart (/usr/lib/x86_64-linux-gnu/openmpi/{include,lib}):
      # a folder with both, from mpicc's own answer, is the MPI_HOME nccl-tests' Makefile expects.
      MPI_HOME=/tmp/hpq-mpi-home && rm -rf "$MPI_HOME" && mkdir -p "$MPI_HOME"
      ln -s "$(mpicc --showme:incdirs | awk '{print $1}')" "$MPI_HOME/include"
      ln -s "$(mpicc --showme:libdirs | awk '{print $1}')" "$MPI_HOME/lib"
    fi
    t "nccl-tests MPI=1 build against $MPI_HOME"
    { bash bench/build_nccl_tests.sh "$NCCL_TESTS_TGZ" /tmp/nccl-tests-mpi "$NCCL_DIR" "MPI=1 MPI_HOME=$MPI_HOME" \
        && "$MPIRUN" --version; } > "$OUT/nccl-tests_mpi_build.txt" 2>&1 || echo "MPI build failed (see nccl-tests_mpi_build.txt)"
    if [ -x /tmp/nccl-tests-mpi/build/all_reduce_perf ]; then
      t "run-nccl-test's mpirun command, $NGPU ranks on localhost"
      echo "localhost slots=$NGPU" > /tmp/hpq-localhost.hosts
      CMD=$(cd /tmp && PYTHONPATH=/tmp/hpq-bundle python3 -c '
import shlex, sys
from hpq.scripts import run_nccl_test as r
args = r.parse_args(["1", sys.argv[1], "-b", "8", "-e", sys.argv[2]])
env = {"NCCL_DEBUG": "WARN", "LD_LIBRARY_PATH": ""}
print(shlex.join(r.mpirun_command(sys.argv[3], sys.argv[4], "/tmp/hpq-localhost.hosts", int(sys.argv[1]), env, args)))
' "$NGPU" "$MAXB" "$MPIRUN" /tmp/nccl-tests-mpi/build/all_reduce_perf)
      { echo "# $CMD"; eval "$CMD"; } > "$OUT/${TAG}_run-nccl-test_mpirun.txt" 2>&1
      echo "mpirun command exit $?"
    fi
  else
    echo "no mpirun on this machine: the mpirun path of run-nccl-test was not run" | tee "$OUT/${TAG}_no-mpirun.txt"
  fi
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
if stage karpathy; then
  # karpathy/nanoGPT's own train.py (MIT; carried in the ignored .tools/nanoGPT, never committed) on random
  # GPT-2 tokens, hpq's gpt2-124m shape: micro-batch 16, context 1024, 8 micro-batches per GPU per step.
  KDIR=/tmp/karpathy-nanogpt
  LOG="$OUT/karpathy_nanogpt_runs.txt"
  : > "$LOG"
  rm -rf "$KDIR" && mkdir -p "$KDIR/data/synthetic" && cp .tools/nanoGPT/*.py "$KDIR/"
  python3 -c 'import numpy as np; r = np.random.default_rng(0)
for s, n in (("train", 50_000_000), ("val", 2_000_000)):
    r.integers(0, 50257, n, dtype=np.uint16).tofile(f"/tmp/karpathy-nanogpt/data/synthetic/{s}.bin")'
  KARGS="--dataset=synthetic --batch_size=16 --block_size=1024 --max_iters=$NG_ITERS --eval_interval=1000000 \
--eval_iters=1 --log_interval=1 --always_save_checkpoint=False --compile=True --out_dir=/tmp/karpathy-out"
  t karpathy 1 GPU
  echo "===== karpathy train.py 1 GPU" >> "$LOG"
  (cd "$KDIR" && python3 train.py $KARGS --gradient_accumulation_steps=8) >> "$LOG" 2>&1
  echo "karpathy 1 GPU exit $?"
  t karpathy "$NGPU" GPUs
  echo "===== karpathy train.py $NGPU GPUs" >> "$LOG"
  (cd "$KDIR" && torchrun --standalone --nproc_per_node="$NGPU" train.py $KARGS \
      --gradient_accumulation_steps=$((8 * NGPU))) >> "$LOG" 2>&1
  echo "karpathy $NGPU GPUs exit $?"
fi
t summary
python3 bench/summarize.py "$OUT" /tmp/hpq-results | tee "$OUT/summary.md"
