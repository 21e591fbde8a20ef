// blocklab's sgemm on the shapes of one training step of the source model (batch 32 x 63 tokens = 2016 rows,
// width 128, qkv 384, MLP 512), each called as the step calls it (the weight-gradient products with the bias
// gradient's row sums), twice: with the same operands every call (cache-resident, what bench's MFU peak
// measures) and with operands cycled through 96 MB, so that they come from memory as the step's saved
// activations do. The gap between the two is what the step's memory traffic costs each GEMM.
// Reports GFLOP/s of the fastest of 60 calls: by the thread's CPU time with one thread (a busy machine's waits
// for a core left out), by wall time with more.
// Run: build/bench_sgemm_memory [THREADS] [fp32|bf16]   (default 1 fp32; bf16: the mixed-precision GEMM, bf16_gemm.h)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bench_threads.h"
#include "kernels/bf16_gemm.h"
#include "kernels/sgemm.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;

namespace {

struct Shape {
  bool trans_a, trans_b;
  int M, N, K;
  const char* what;
};
}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::threads_argument(argc, argv, "bench_sgemm_memory");
  if (threads == 0) return 2;
  if (kernels::sgemm_isa() == kernels::SgemmIsa::None) {
    std::printf("BLOCKLAB_GEMM=blas: the GEMMs run in BLAS, not in blocklab's sgemm: nothing to time\n");
    return 0;
  }
  kernels::GemmPrecision precision = kernels::GemmPrecision::Fp32;
  if (argc > 2) {
    if (std::strcmp(argv[2], "bf16") == 0) {
      precision = kernels::GemmPrecision::Bf16;
      if (kernels::bf16_isa() == kernels::Bf16Isa::None) {
        std::printf("bf16: %s: the products would run in fp32, nothing of bf16's to time\n",
                    kernels::bf16_isa_description());
        return 0;
      }
    } else if (std::strcmp(argv[2], "fp32") != 0) {
      std::fprintf(stderr, "bench_sgemm_memory: precision must be fp32 or bf16, not '%s'\n", argv[2]);
      return 2;
    }
  }
  set_num_threads(threads);
  const Shape shapes[] = {
      {false, true, 2016, 384, 128, "qkv forward"},  {false, true, 2016, 128, 128, "proj forward"},
      {false, true, 2016, 512, 128, "fc1 forward"},  {false, true, 2016, 128, 512, "fc2 forward"},
      {false, false, 2016, 128, 384, "qkv dX"},      {false, false, 2016, 128, 128, "proj dX"},
      {false, false, 2016, 128, 512, "fc1 dX"},      {false, false, 2016, 512, 128, "fc2 dX"},
      {true, false, 384, 128, 2016, "qkv dW"},       {true, false, 128, 128, 2016, "proj dW"},
      {true, false, 512, 128, 2016, "fc1 dW"},       {true, false, 128, 512, 2016, "fc2 dW"}};
  const long pool = 24L << 20;  // floats: 96 MB, three times the L3 of the machines measured
  std::vector<float> memory(static_cast<size_t>(pool));
  Rng rng(1);
  for (auto& x : memory) x = static_cast<float>(rng.normal());
  std::vector<float> row_sums(4096);
  const auto now = [threads] { return bench::now_seconds(threads); };
  std::printf("%s GFLOP/s, %d thread%s (%s time), fastest of 60 calls\n",
              precision == kernels::GemmPrecision::Bf16 ? "bf16_gemm" : "sgemm", threads, threads == 1 ? "" : "s",
              threads == 1 ? "CPU" : "wall");
  std::printf("%-13s %-16s %14s %18s\n", "product", "M x N x K", "cache-resident", "operands from memory");
  for (const Shape& s : shapes) {
    const long a = static_cast<long>(s.M) * s.K, b = static_cast<long>(s.K) * s.N, c = static_cast<long>(s.M) * s.N;
    const int lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
    const double flops = 2.0 * s.M * s.N * s.K;
    double best[2] = {1e30, 1e30};
    for (int cold = 0; cold < 2; ++cold) {
      long offset = 0;
      for (int call = 0; call < 60; ++call) {
        if (cold) offset = offset + 2 * (a + b + c) > pool ? 0 : offset + a + b + c;
        float* A = memory.data() + offset;
        float* B = A + a;
        float* C = B + b;
        kernels::SgemmExtras extras;
        if (s.trans_a) extras.a_row_sums = row_sums.data();  // the bias gradient, as linear_backward asks
        const double start = now();
        kernels::sgemm_in(precision, s.trans_a, s.trans_b, s.M, s.N, s.K, A, lda, B, ldb, s.trans_a ? 1.f : 0.f, C, s.N,
                          extras);
        best[cold] = std::min(best[cold], now() - start);
      }
    }
    char dims[32];
    std::snprintf(dims, sizeof dims, "%dx%dx%d %s%s", s.M, s.N, s.K, s.trans_a ? "T" : "N", s.trans_b ? "T" : "N");
    std::printf("%-13s %-16s %14.1f %18.1f\n", s.what, dims, flops / best[0] / 1e9, flops / best[1] / 1e9);
  }
  return 0;
}
