// blocklab's bf16 GEMM against oneDNN's bf16 matmul (the library PyTorch's CPU bf16 autocast runs), on the
// GEMM shapes of one training step of the source model. Three rows per shape:
//   blocklab_bf16      float operands in, rounded to bf16 while packed, float out (what the step calls)
//   blocklab_onednn_tiles  blocklab's oneDNN path (bf16_onednn.h): operands rounded to bf16, then one
//                      single-threaded oneDNN matmul per fixed tile of C (thread-count independent)
//   onednn_bf16        operands already bf16 in memory, float out (oneDNN's best case: no conversion)
//   onednn_bf16_cvt    float operands converted to bf16 by oneDNN reorders on every call, then the matmul
//                      (what a drop-in replacement in blocklab's float step would pay)
// Built only where oneDNN's headers are installed (Debian: libdnnl-dev). Run: build/bench_onednn
#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "gemm_problem.h"
#include "kernels/bf16_gemm.h"
#include "kernels/bf16_onednn.h"

using namespace blocklab;
using dnnl::memory;

namespace {

enum class Impl { Blocklab, BlocklabOneDnn, OneDnn, OneDnnConvert };

void run(benchmark::State& state, Impl impl) {
  if (impl == Impl::Blocklab && kernels::bf16_isa() == kernels::Bf16Isa::None) {
    state.SkipWithError(kernels::bf16_isa_description());
    return;
  }
  // oneDNN has a bf16 matmul only on CPUs with AVX-512 (AVX512-BF16, AMX-BF16 or its emulation)
  if (std::string why; impl != Impl::Blocklab && !kernels::onednn_bf16_available(&why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  bench::GemmProblem p(state);
  const bool ta = p.ta, tb = p.tb;
  const int M = p.M, N = p.N, K = p.K, lda = p.lda, ldb = p.ldb;
  std::vector<float>& A = p.A;
  std::vector<float>& B = p.B;
  std::vector<float>& C = p.C;
  if (impl == Impl::Blocklab) {
    for (auto _ : state) {
      kernels::bf16_gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, 0.f, C.data(), N);
      benchmark::ClobberMemory();
    }
  } else if (impl == Impl::BlocklabOneDnn) {
    for (auto _ : state) {
      kernels::onednn_bf16_gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, 0.f, C.data(), N);
      benchmark::ClobberMemory();
    }
  } else {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    // op(A) (M,K) and op(B) (K,N) as strided views of the row-major storage
    const memory::dims a_strides = ta ? memory::dims{1, lda} : memory::dims{lda, 1};
    const memory::dims b_strides = tb ? memory::dims{1, ldb} : memory::dims{ldb, 1};
    const memory::desc a_f32({M, K}, memory::data_type::f32, a_strides), b_f32({K, N}, memory::data_type::f32, b_strides);
    const memory::desc a_bf16({M, K}, memory::data_type::bf16, a_strides), b_bf16({K, N}, memory::data_type::bf16, b_strides);
    const memory::desc c_f32({M, N}, memory::data_type::f32, memory::dims{N, 1});
    memory a_src(a_f32, engine, A.data()), b_src(b_f32, engine, B.data()), c_mem(c_f32, engine, C.data());
    memory a_mem(a_bf16, engine), b_mem(b_bf16, engine);
    dnnl::reorder convert_a(a_src, a_mem), convert_b(b_src, b_mem);
    convert_a.execute(stream, a_src, a_mem);
    convert_b.execute(stream, b_src, b_mem);
    dnnl::matmul matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_bf16, b_bf16, c_f32), engine));
    for (auto _ : state) {
      if (impl == Impl::OneDnnConvert) {
        convert_a.execute(stream, a_src, a_mem);
        convert_b.execute(stream, b_src, b_mem);
      }
      matmul.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
      stream.wait();
      benchmark::ClobberMemory();
    }
  }
  p.report(state);
}
}  // namespace

static void BM_blocklab_bf16(benchmark::State& s) { run(s, Impl::Blocklab); }
static void BM_blocklab_onednn_tiles(benchmark::State& s) { run(s, Impl::BlocklabOneDnn); }
static void BM_onednn_bf16(benchmark::State& s) { run(s, Impl::OneDnn); }
static void BM_onednn_bf16_cvt(benchmark::State& s) { run(s, Impl::OneDnnConvert); }
BENCHMARK(BM_blocklab_bf16)->Apply(bench::step_shapes);
BENCHMARK(BM_blocklab_onednn_tiles)->Apply(bench::step_shapes);
BENCHMARK(BM_onednn_bf16)->Apply(bench::step_shapes);
BENCHMARK(BM_onednn_bf16_cvt)->Apply(bench::step_shapes);
BENCHMARK_MAIN();
