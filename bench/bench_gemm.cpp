// GEMM micro-benchmark on the shapes of one training step of the source model (batch 32, 63 tokens:
// 2016 rows; width 128; qkv 384, MLP 512) and of GPT-2 124M (252 rows; width 768, vocabulary 50257), blocklab's sgemm against OpenBLAS's cblas_sgemm, and
// blocklab's bf16 GEMM (float operands rounded to bf16 while packed, float accumulation) where the CPU
// has AVX512-BF16.
// Reports GFLOP/s. Run: build/bench_gemm [--benchmark_filter=...]  (the GPT-2 shapes: --benchmark_filter=gpt2)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include "gemm_problem.h"
#include "kernels/bf16_gemm.h"
#include "kernels/sgemm.h"

using namespace blocklab;

namespace {
enum class Impl { Sgemm, Blas, Bf16 };

void run(benchmark::State& state, Impl impl) {
  if (impl == Impl::Bf16 && kernels::bf16_isa() == kernels::Bf16Isa::None) {
    state.SkipWithError(kernels::bf16_isa_description());
    return;
  }
  bench::GemmProblem p(state);
  for (auto _ : state) {
    if (impl == Impl::Bf16)
      kernels::bf16_gemm(p.ta, p.tb, p.M, p.N, p.K, p.A.data(), p.lda, p.B.data(), p.ldb, 0.f, p.C.data(), p.N);
    else if (impl == Impl::Blas)
      cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans, p.M, p.N, p.K, 1.f,
                  p.A.data(), p.lda, p.B.data(), p.ldb, 0.f, p.C.data(), p.N);
    else
      kernels::sgemm(p.ta, p.tb, p.M, p.N, p.K, p.A.data(), p.lda, p.B.data(), p.ldb, 0.f, p.C.data(), p.N);
    benchmark::ClobberMemory();
  }
  p.report(state);
}
}  // namespace

static void BM_blocklab_sgemm(benchmark::State& s) { run(s, Impl::Sgemm); }
static void BM_blocklab_bf16_gemm(benchmark::State& s) { run(s, Impl::Bf16); }
static void BM_openblas_sgemm(benchmark::State& s) { run(s, Impl::Blas); }
BENCHMARK(BM_blocklab_sgemm)->Apply(bench::step_shapes);
BENCHMARK(BM_blocklab_bf16_gemm)->Apply(bench::step_shapes);
BENCHMARK(BM_openblas_sgemm)->Apply(bench::step_shapes);
static void BM_gpt2_blocklab_sgemm(benchmark::State& s) { run(s, Impl::Sgemm); }
static void BM_gpt2_blocklab_bf16_gemm(benchmark::State& s) { run(s, Impl::Bf16); }
static void BM_gpt2_openblas_sgemm(benchmark::State& s) { run(s, Impl::Blas); }
BENCHMARK(BM_gpt2_blocklab_sgemm)->Apply(bench::gpt2_shapes);
BENCHMARK(BM_gpt2_blocklab_bf16_gemm)->Apply(bench::gpt2_shapes);
BENCHMARK(BM_gpt2_openblas_sgemm)->Apply(bench::gpt2_shapes);
BENCHMARK_MAIN();
