// GEMM micro-benchmark on the shapes of one training step of the source model (batch 32, 63 tokens:
// 2016 rows; width 128; qkv 384, MLP 512), blocklab's sgemm against OpenBLAS's cblas_sgemm, and
// blocklab's bf16 GEMM (float operands rounded to bf16 while packed, float accumulation) where the CPU
// has AVX512-BF16.
// Reports GFLOP/s. Run: build/bench_gemm [--benchmark_filter=...]  (threads: OMP_NUM_THREADS / --threads)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <vector>

#include "kernels/bf16_gemm.h"
#include "kernels/sgemm.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;

namespace {
// Shapes as (trans_a, trans_b, M, N, K): forward x@W^T, backward dX = dY@W, dW = dY^T@X.
enum class Impl { Sgemm, Blas, Bf16 };

void run(benchmark::State& state, Impl impl) {
  if (impl == Impl::Bf16 && kernels::bf16_isa() == kernels::Bf16Isa::None) {
    state.SkipWithError(kernels::bf16_isa_description());
    return;
  }
  const bool ta = state.range(0), tb = state.range(1);
  const int M = state.range(2), N = state.range(3), K = state.range(4);
  set_num_threads(static_cast<int>(state.range(5)));
  Rng rng(1);
  std::vector<float> A(static_cast<size_t>(M) * K), B(static_cast<size_t>(K) * N), C(static_cast<size_t>(M) * N);
  for (auto& x : A) x = static_cast<float>(rng.normal());
  for (auto& x : B) x = static_cast<float>(rng.normal());
  const int lda = ta ? M : K, ldb = tb ? K : N;
  for (auto _ : state) {
    if (impl == Impl::Bf16)
      kernels::bf16_gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, 0.f, C.data(), N);
    else if (impl == Impl::Blas)
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.f, A.data(),
                  lda, B.data(), ldb, 0.f, C.data(), N);
    else
      kernels::sgemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, 0.f, C.data(), N);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * state.iterations(), benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({0, 1, 2016, 384, 128, threads});  // qkv forward
    b->Args({0, 1, 2016, 512, 128, threads});  // fc1 forward
    b->Args({0, 1, 2016, 128, 512, threads});  // fc2 forward
    b->Args({0, 0, 2016, 128, 384, threads});  // qkv backward dX
    b->Args({0, 0, 2016, 128, 512, threads});  // fc1 backward dX
    b->Args({1, 0, 512, 128, 2016, threads});  // fc1 backward dW
    b->Args({1, 0, 128, 512, 2016, threads});  // fc2 backward dW
  }
  b->ArgNames({"ta", "tb", "M", "N", "K", "threads"})->UseRealTime();
}
}  // namespace

static void BM_blocklab_sgemm(benchmark::State& s) { run(s, Impl::Sgemm); }
static void BM_blocklab_bf16_gemm(benchmark::State& s) { run(s, Impl::Bf16); }
static void BM_openblas_sgemm(benchmark::State& s) { run(s, Impl::Blas); }
BENCHMARK(BM_blocklab_sgemm)->Apply(shapes);
BENCHMARK(BM_blocklab_bf16_gemm)->Apply(shapes);
BENCHMARK(BM_openblas_sgemm)->Apply(shapes);
BENCHMARK_MAIN();
