// Causal attention's forward and backward (kernels/attention.h, attention_gqa.h) alone, on the shapes the
// benchmarks train:
//   source  the source's model: batch 32, T 63, width 128, 4 heads of 32 (one layer's call; 24 per step)
//   small   the same heads at batch 2: every operand stays in L2, so what is left is the kernel's own work
//   gpt2    GPT-2 124M as bench/compare_pytorch --model gpt2 runs it: batch 4, T 64, width 768, 12 heads of 64
//   gpt2-256  the same at T 256
//   source-general  the source's shape through the general kernel (attention_gqa.h), which every block with RoPE,
//                   norms on q and k, grouped key/value heads or cross-attention runs
//   source-gqa      the same with 2 key/value heads for the 4 query heads
// For each: the fastest of N calls (by the thread's CPU time with one thread, wall time with more), the
// useful FLOPs (the causal half of q.k and p.v, forward; twice that backward) per second, and the time
// per (batch, head) pair. Forward and backward alternate call by call on the same operands. A second line, "from
// memory", times them as a training step meets them (other layers' work passes between a layer's forward and its
// backward): before each call a 96 MB pool, larger than the L3 of the machines measured, is written over, outside
// the timing.
// Run: build/bench_attention [THREADS [SHAPE]]   (default 1 thread, every shape)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "bench_threads.h"
#include "kernels/attention.h"
#include "kernels/attention_gqa.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::kernels;

namespace {

struct Shape {
  const char* name;
  int B, T, C, H;
  int Hkv = 0;  // 0: the fused multi-head kernel (attention.h); else the general kernel (attention_gqa.h) with Hkv
                // key/value heads, which every block with RoPE, norms on q and k, GQA or cross-attention runs
};

void run(const Shape& s, int threads, int calls) {
  Rng rng(1);
  const int D = s.C / s.H, Hkv = s.Hkv == 0 ? s.H : s.Hkv;
  const long rows = static_cast<long>(s.B) * s.T, width = static_cast<long>(s.H + 2 * Hkv) * D;  // [q | k | v]
  const long btc = rows * s.C;
  std::vector<float> qkv(rows * width), out(btc), dout(btc), dqkv(rows * width);
  std::vector<float> att(static_cast<size_t>(s.B) * s.H * s.T * s.T);
  std::vector<float> scratch(s.Hkv == 0 ? attention_scratch_size(s.B, s.T, s.C, s.H)
                                        : attention_gqa_scratch_size(s.B, s.T, s.T, s.H, D));
  for (auto& x : qkv) x = static_cast<float>(rng.normal());
  for (auto& x : dout) x = static_cast<float>(rng.normal());
  const float* q = qkv.data();
  const float* k = q + static_cast<long>(s.H) * D;
  const float* v = k + static_cast<long>(Hkv) * D;
  float* dq = dqkv.data();
  float* dk = dq + static_cast<long>(s.H) * D;
  float* dv = dk + static_cast<long>(Hkv) * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto forward = [&] {
    if (s.Hkv == 0)
      attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), s.B, s.T, s.C, s.H);
    else
      attention_gqa_forward(out.data(), s.C, att.data(), scratch.data(), q, width, k, width, v, width, s.B, s.T, s.T,
                            s.H, Hkv, D, true, scale);
  };
  auto backward = [&] {
    if (s.Hkv == 0)
      attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.H);
    else
      attention_gqa_backward(dq, width, dk, width, dv, width, scratch.data(), dout.data(), s.C, q, width, k, width, v,
                             width, att.data(), s.B, s.T, s.T, s.H, Hkv, D, true, scale);
  };
  forward();
  backward();
  std::vector<unsigned char> pool(96L << 20);
  const auto evict = [&] {  // every line of the pool written: the operands leave every cache level
    for (size_t i = 0; i < pool.size(); i += 64) ++pool[i];
  };
  // causal pairs (t, s <= t): T (T + 1) / 2 per (batch, head); 2 FLOPs per multiply-add over the head size
  const double pairs = static_cast<double>(s.B) * s.H * s.T * (s.T + 1) / 2.0;
  const double flops_f = 2.0 * 2.0 * pairs * (s.C / s.H);  // q.k and p.v
  const double heads = static_cast<double>(s.B) * s.H;
  for (const bool cold : {false, true}) {
    double best_f = 1e30, best_b = 1e30;
    for (int call = 0; call < calls; ++call) {
      if (cold) evict();
      const double t0 = bench::now_seconds(threads);
      forward();
      const double t1 = bench::now_seconds(threads);
      if (cold) evict();
      const double t2 = bench::now_seconds(threads);
      backward();
      const double t3 = bench::now_seconds(threads);
      best_f = std::min(best_f, t1 - t0);
      best_b = std::min(best_b, t3 - t2);
    }
    std::printf("%-14s B %2d T %3d C %3d H %2d | forward %8.1f us %6.1f GFLOP/s %6.2f us/head | backward %8.1f us "
                "%6.1f GFLOP/s %6.2f us/head%s\n",
                s.name, s.B, s.T, s.C, s.H, 1e6 * best_f, flops_f / best_f * 1e-9, 1e6 * best_f / heads,
                1e6 * best_b, 2 * flops_f / best_b * 1e-9, 1e6 * best_b / heads, cold ? "  (from memory)" : "");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::threads_argument(argc, argv, "bench_attention");
  if (threads == 0) return 2;
  const Shape shapes[] = {{"source", 32, 63, 128, 4},         {"small", 2, 63, 128, 4},
                          {"gpt2", 4, 64, 768, 12},           {"gpt2-256", 4, 256, 768, 12},
                          {"source-general", 32, 63, 128, 4, 4}, {"source-gqa", 32, 63, 128, 4, 2}};
  const char* only = argc > 2 ? argv[2] : nullptr;
  if (only != nullptr &&
      std::none_of(std::begin(shapes), std::end(shapes), [&](const Shape& s) { return std::strcmp(only, s.name) == 0; })) {
    std::string names;
    for (const Shape& s : shapes) names += (names.empty() ? "" : ", ") + std::string(s.name);
    std::fprintf(stderr, "bench_attention: no shape named '%s' (%s)\n", only, names.c_str());
    return 2;
  }
  set_num_threads(threads);
  std::printf("causal attention, float, %d thread(s); fastest of the calls, by %s\n", threads,
              threads == 1 ? "the thread's CPU time" : "wall time");
  for (const Shape& s : shapes)
    if (only == nullptr || std::strcmp(only, s.name) == 0) run(s, threads, s.T > 64 ? 20 : 100);
  return 0;
}
