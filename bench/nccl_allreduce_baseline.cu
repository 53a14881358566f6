// NCCL all-reduce baseline for the built-in benchmark comparison (bench/gpu_bench.sh).
//
// Why this exists: the GPU machine used for the benchmarks has no internet and no nccl-tests,
// so the "nccl-tests all_reduce_perf" baseline cannot be built there. This program calls NCCL
// directly the way all_reduce_perf does with -g N (one process, N GPUs, ncclCommInitAll,
// ncclAllReduce out-of-place and in-place inside ncclGroupStart/End, -w warm-up calls, -n timed
// calls, host wall clock after cudaStreamSynchronize, busbw = algbw * 2(n-1)/n) and prints the
// same columns, so `hpq nccl-report` reads it. It also checks every element of one fresh run per
// size and mode (#wrong). Build: nvcc -O2 -arch=sm_90 -I$NCCL/include x.cu -L$NCCL/lib -l:libnccl.so.2
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CUDACHECK(cmd) do { cudaError_t e = (cmd); if (e != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define NCCLCHECK(cmd) do { ncclResult_t r = (cmd); if (r != ncclSuccess) { \
  fprintf(stderr, "NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(r)); exit(1); } } while (0)

__global__ void fill(float* p, size_t n, int rank) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (float)((i % 7 + 1) * (rank + 1));
}

__global__ void check(const float* p, size_t n, int nranks, unsigned long long* wrong) {
  unsigned long long mine = 0;
  float mult = (float)(nranks * (nranks + 1) / 2);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if (p[i] != (float)(i % 7 + 1) * mult) mine++;
  if (mine) atomicAdd(wrong, mine);
}

static size_t parse_size(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K': case 'k': v *= 1024.0; break;
    case 'M': case 'm': v *= 1024.0 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  }
  return (size_t)v;
}

int main(int argc, char** argv) {
  size_t minb = 8, maxb = 1ull << 30;
  int factor = 2, iters = 20, warmup = 5, ngpus = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) minb = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-e")) maxb = parse_size(argv[i + 1]);
    else if (!strcmp(argv[i], "-f")) factor = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-w")) warmup = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-g")) ngpus = atoi(argv[i + 1]);
  }
  if (ngpus == 0) CUDACHECK(cudaGetDeviceCount(&ngpus));
  int version = 0;
  NCCLCHECK(ncclGetVersion(&version));
  std::vector<int> devs(ngpus);
  for (int i = 0; i < ngpus; i++) devs[i] = i;
  std::vector<ncclComm_t> comms(ngpus);
  NCCLCHECK(ncclCommInitAll(comms.data(), ngpus, devs.data()));
  std::vector<float*> send(ngpus), recv(ngpus);
  std::vector<cudaStream_t> streams(ngpus);
  std::vector<unsigned long long*> wrong(ngpus);
  for (int g = 0; g < ngpus; g++) {
    CUDACHECK(cudaSetDevice(g));
    CUDACHECK(cudaMalloc(&send[g], maxb));
    CUDACHECK(cudaMalloc(&recv[g], maxb));
    CUDACHECK(cudaMalloc(&wrong[g], sizeof(unsigned long long)));
    CUDACHECK(cudaStreamCreateWithFlags(&streams[g], cudaStreamNonBlocking));
  }
  printf("# hpq NCCL baseline (bench/nccl_allreduce_baseline.cu): all_reduce, NCCL %d.%d.%d, %d GPU(s) in one "
         "process\n", version / 10000, (version % 10000) / 100, version % 100, ngpus);
  printf("# nGpus %d minBytes %zu maxBytes %zu step: %d(factor) warmup iters: %d iters: %d validation: 1\n#\n",
         ngpus, minb, maxb, factor, warmup, iters);
  printf("# %57s %34s\n", "out-of-place", "in-place");
  printf("# %10s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
         "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  printf("# %10s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
         "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  double bwsum = 0;
  int bwn = 0;
  unsigned long long wrong_total = 0;
  double factor_bus = 2.0 * (ngpus - 1) / ngpus;
  for (size_t size = minb; size <= maxb; size *= factor) {
    size_t count = size / sizeof(float);
    if (count == 0) continue;
    size_t bytes = count * sizeof(float);
    printf("  %10zu %12zu %8s %6s %6d", bytes, count, "float", "sum", -1);
    for (int inplace = 0; inplace < 2; inplace++) {
      // one checked run on fresh data
      for (int g = 0; g < ngpus; g++) {
        CUDACHECK(cudaSetDevice(g));
        float* dst = inplace ? recv[g] : send[g];
        fill<<<1024, 512, 0, streams[g]>>>(dst, count, g);
        CUDACHECK(cudaGetLastError());
        if (!inplace) CUDACHECK(cudaMemsetAsync(recv[g], 0, bytes, streams[g]));
        CUDACHECK(cudaMemsetAsync(wrong[g], 0, sizeof(unsigned long long), streams[g]));
      }
      auto launch = [&]() {
        NCCLCHECK(ncclGroupStart());
        for (int g = 0; g < ngpus; g++)
          NCCLCHECK(ncclAllReduce(inplace ? recv[g] : send[g], recv[g], count, ncclFloat, ncclSum, comms[g],
                                  streams[g]));
        NCCLCHECK(ncclGroupEnd());
      };
      launch();
      unsigned long long w = 0;
      for (int g = 0; g < ngpus; g++) {
        CUDACHECK(cudaSetDevice(g));
        check<<<1024, 512, 0, streams[g]>>>(recv[g], count, ngpus, wrong[g]);
        CUDACHECK(cudaGetLastError());
        unsigned long long h = 0;
        CUDACHECK(cudaMemcpyAsync(&h, wrong[g], sizeof(h), cudaMemcpyDeviceToHost, streams[g]));
        CUDACHECK(cudaStreamSynchronize(streams[g]));
        w += h;
      }
      for (int i = 0; i < warmup; i++) launch();
      for (int g = 0; g < ngpus; g++) CUDACHECK(cudaStreamSynchronize(streams[g]));
      auto t0 = std::chrono::high_resolution_clock::now();
      for (int i = 0; i < iters; i++) launch();
      for (int g = 0; g < ngpus; g++) CUDACHECK(cudaStreamSynchronize(streams[g]));
      double sec = std::chrono::duration<double>(std::chrono::high_resolution_clock::now() - t0).count() / iters;
      double algbw = bytes / 1e9 / sec;
      double busbw = algbw * factor_bus;
      bwsum += busbw;
      bwn++;
      wrong_total += w;
      double us = sec * 1e6;
      if (us >= 10000) printf(" %8.0f", us); else if (us >= 100) printf(" %8.1f", us); else printf(" %8.2f", us);
      printf(" %7.2f %7.2f %6llu", algbw, busbw, w);
    }
    printf("\n");
    fflush(stdout);
  }
  printf("# Out of bounds values : %llu %s\n", wrong_total, wrong_total ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n#\n", bwn ? bwsum / bwn : 0.0);
  for (int g = 0; g < ngpus; g++) ncclCommDestroy(comms[g]);
  return wrong_total ? 1 : 0;
}
