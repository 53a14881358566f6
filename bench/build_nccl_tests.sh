#!/usr/bin/env bash
# Build NVIDIA nccl-tests from its source tarball against a given NCCL (the one torch loads), single-process
# builds (MPI=0: all_reduce_perf -g N drives N GPUs from one process), as NVIDIA/nccl-tests' README.md describes.
#   bench/build_nccl_tests.sh TARBALL DEST NCCL_HOME ["MPI=1 MPI_HOME=DIR"]
# NCCL_HOME holds include/nccl.h and lib/libnccl.so* (torch's nvidia-nccl package directory). Binaries land
# in DEST/build/. The source is third-party: it is unpacked outside the repository and never committed.
set -euo pipefail
tgz=$1 dest=$2 nccl_home=$3 mpi=${4:-MPI=0}
[ -f "$tgz" ] || { echo "build_nccl_tests: no tarball at $tgz" >&2; exit 2; }
[ -f "$nccl_home/include/nccl.h" ] || { echo "build_nccl_tests: $nccl_home/include/nccl.h missing" >&2; exit 2; }
# pip's NCCL wheel ships libnccl.so.2 only; nccl-tests links -lnccl.
[ -e "$nccl_home/lib/libnccl.so" ] || ln -sf libnccl.so.2 "$nccl_home/lib/libnccl.so"
cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
rm -rf "$dest" && mkdir -p "$dest"
tar xzf "$tgz" -C "$dest" --strip-components=1
cd "$dest"
# shellcheck disable=SC2086 # $mpi is make variables, one word each
make -j"$(nproc)" $mpi CUDA_HOME="$cuda_home" NCCL_HOME="$nccl_home" NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90"
ls -la build/all_reduce_perf
