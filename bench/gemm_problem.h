#pragma once
// What the GEMM benchmarks share: the GEMM shapes of one training step of the source model (batch 32,
// 63 tokens: 2016 rows; width 128; qkv 384, MLP 512) at 1 and 2 threads, the operands of one shape, and
// the GFLOP/s counter, so that every implementation is timed on the same problems the same way.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "util/rng.h"
#include "util/threads.h"

namespace blocklab::bench {

// C (M,N) = op(A) (M,K) @ op(B) (K,N), row-major; the benchmark's arguments are (ta, tb, M, N, K, threads).
struct GemmProblem {
  bool ta, tb;
  int M, N, K, lda, ldb;
  std::vector<float> A, B, C;

  // Reads the shape from the benchmark's arguments, sets the thread count, fills A and B with N(0, 1).
  explicit GemmProblem(const benchmark::State& state)
      : ta(state.range(0) != 0),
        tb(state.range(1) != 0),
        M(static_cast<int>(state.range(2))),
        N(static_cast<int>(state.range(3))),
        K(static_cast<int>(state.range(4))),
        lda(ta ? M : K),
        ldb(tb ? K : N),
        A(static_cast<std::size_t>(M) * K),
        B(static_cast<std::size_t>(K) * N),
        C(static_cast<std::size_t>(M) * N) {
    set_num_threads(static_cast<int>(state.range(5)));
    Rng rng(1);
    for (auto& x : A) x = static_cast<float>(rng.normal());
    for (auto& x : B) x = static_cast<float>(rng.normal());
  }

  void report(benchmark::State& state) const {
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K * static_cast<double>(state.iterations()),
                                                   benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  }
};

// Shapes as (trans_a, trans_b, M, N, K): forward x@W^T, backward dX = dY@W, dW = dY^T@X.
inline void step_shapes(benchmark::internal::Benchmark* b) {
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

// One training step of GPT-2 124M (`blocklab bench --block gpt2 --layers 12 --width 768 --heads 12 --vocab 50257
// --copy-len 32 --batch 4`: 252 token rows), per linear layer its forward x@W^T (NT), dX = dY@W (NN) and
// dW = dY^T@X (TN), as (trans_a, trans_b, M, N, K). The head's products take only the R = 128 positions the copy
// task's loss counts, as the step does (bench/torch_gemm.py --model gpt2 lists the same shapes).
inline void gpt2_shapes(benchmark::internal::Benchmark* b) {
  constexpr int T = 252, C = 768, V = 50257, R = 128;
  for (int threads : {1, 2}) {
    for (const int OC : {3 * C, C, 4 * C}) {  // qkv, attention projection, fc
      b->Args({0, 1, T, OC, C, threads});
      b->Args({0, 0, T, C, OC, threads});
      b->Args({1, 0, OC, C, T, threads});
    }
    b->Args({0, 1, T, C, 4 * C, threads});  // fc projection (C from 4C)
    b->Args({0, 0, T, 4 * C, C, threads});
    b->Args({1, 0, C, 4 * C, T, threads});
    b->Args({0, 1, R, V, C, threads});  // tied embedding / LM head: logits
    b->Args({0, 0, R, C, V, threads});
    b->Args({1, 0, V, C, R, threads});
  }
  b->ArgNames({"ta", "tb", "M", "N", "K", "threads"})->UseRealTime();
}

}  // namespace blocklab::bench
