// The gated MLP (SwiGLU) on the source model's shapes (2016 rows = batch 32 x 63 tokens, width 128, hidden 512:
// fc1 128 -> 2 x 512, fc2 512 -> 128), its forward (fc1, the GLU, fc2) and backward (fc2's products, the GLU's
// backward, fc1's products) timed whole, three ways:
//   unfused   linear_forward + glu_forward + linear_forward; linear_backward + glu_backward + linear_backward
//   fused     the GLU in the GEMMs' epilogues (kernels/linear_glu.h)
//   rounded   bf16 only, where the bf16 products take rounded operands (oneDNN): act and d_pre kept in bf16 as well
// in fp32 and in bf16 (with the weights' rounded copies, as a training step has them). The operands cycle through 8
// sets (about 280 MB), so that each call finds them in memory, as a step's layers do; the variants alternate call by
// call; the fastest and the median of 40 calls each, by the thread's CPU time with one thread, by wall time with
// more. Ratios are from this one run.
// Run: build/bench_glu [THREADS]   (default 1)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_threads.h"
#include "kernels/bf16_gemm.h"
#include "kernels/linear_glu.h"
#include "kernels/sgemm.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::kernels;

namespace {

constexpr int N = 2016, C = 128, I = 512, kSets = 8, kCalls = 40;

std::vector<float> normal(long n, Rng& rng, double scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

// What one layer's MLP reads and writes; each set is a layer of its own.
struct Set {
  std::vector<float> inp, pre, act, out, dout, dpre, dact, dinp;
  std::vector<uint16_t> act16, dpre16;
};

struct Timing {
  double fastest = 1e30, median = 0;
};

// Times of each variant's forward and backward, the variants alternating call by call.
std::vector<Timing> alternate(const std::vector<std::function<void(Set&)>>& fns, std::vector<Set>& sets, int threads) {
  std::vector<std::vector<double>> times(fns.size());
  for (size_t v = 0; v < fns.size(); ++v) fns[v](sets[0]);  // warm-up: thread pool, packing buffers, plans
  for (int call = 0; call < kCalls; ++call)
    for (size_t v = 0; v < fns.size(); ++v) {
      Set& set = sets[(call * fns.size() + v) % kSets];
      const double start = bench::now_seconds(threads);
      fns[v](set);
      times[v].push_back(bench::now_seconds(threads) - start);
    }
  std::vector<Timing> result(fns.size());
  for (size_t v = 0; v < fns.size(); ++v) {
    std::sort(times[v].begin(), times[v].end());
    result[v] = {times[v].front(), times[v][times[v].size() / 2]};
  }
  return result;
}
}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::threads_argument(argc, argv, "bench_glu");
  if (threads == 0) return 2;
  set_num_threads(threads);
  Rng rng(1);
  const auto w1 = normal(2L * I * C, rng, 0.09), b1 = normal(2 * I, rng, 0.1);
  const auto w2 = normal(static_cast<long>(C) * I, rng, 0.05), b2 = normal(C, rng, 0.1);
  std::vector<uint16_t> w1_16(w1.size()), w2_16(w2.size());
  round_to_bf16(w1.data(), w1_16.data(), static_cast<long>(w1.size()));
  round_to_bf16(w2.data(), w2_16.data(), static_cast<long>(w2.size()));
  std::vector<float> dw1(w1.size()), db1(b1.size()), dw2(w2.size()), db2(b2.size());
  std::vector<Set> sets(kSets);
  for (Set& s : sets) {
    s.inp = normal(static_cast<long>(N) * C, rng, 1.0), s.dout = normal(static_cast<long>(N) * C, rng, 1.0);
    s.pre.assign(2L * N * I, 0.f), s.dpre.assign(s.pre.size(), 0.f), s.act.assign(static_cast<size_t>(N) * I, 0.f);
    s.dact.assign(s.act.size(), 0.f), s.out.assign(s.inp.size(), 0.f), s.dinp.assign(s.inp.size(), 0.f);
    s.act16.assign(s.act.size(), 0), s.dpre16.assign(s.pre.size(), 0);
    linear_glu_forward(s.act.data(), s.pre.data(), s.inp.data(), w1.data(), b1.data(), N, C, I, GluKind::SwiGLU);
  }
  const GluKind kind = GluKind::SwiGLU;
  std::printf("SwiGLU MLP, %d x %d -> 2 x %d -> %d, %d thread%s (%s time), operands from memory (%d sets), "
              "fastest / median of %d calls; sgemm %s, bf16: %s\n",
              N, C, I, C, threads, threads == 1 ? "" : "s", threads == 1 ? "CPU" : "wall", kSets, kCalls,
              sgemm_isa_name(sgemm_isa()), bf16_isa_description());
  std::printf("%-9s %-9s %21s %21s %12s\n", "precision", "variant", "forward ms", "backward ms", "fwd+bwd");
  for (const GemmPrecision p : {GemmPrecision::Fp32, GemmPrecision::Bf16}) {
    const bool bf16 = p == GemmPrecision::Bf16;
    const uint16_t* r1 = bf16 ? w1_16.data() : nullptr;
    const uint16_t* r2 = bf16 ? w2_16.data() : nullptr;
    std::vector<std::string> names = {"unfused", "fused"};
    std::vector<std::function<void(Set&)>> forward = {
        [&](Set& s) {
          linear_forward(s.pre.data(), s.inp.data(), w1.data(), b1.data(), N, C, 2 * I, p, 0, r1);
          glu_forward(s.act.data(), s.pre.data(), N, I, kind);
          linear_forward(s.out.data(), s.act.data(), w2.data(), b2.data(), N, I, C, p, 0, r2);
        },
        [&](Set& s) {
          linear_glu_forward(s.act.data(), s.pre.data(), s.inp.data(), w1.data(), b1.data(), N, C, I, kind, p, r1);
          linear_forward(s.out.data(), s.act.data(), w2.data(), b2.data(), N, I, C, p, 0, r2);
        }};
    std::vector<std::function<void(Set&)>> backward = {
        [&](Set& s) {
          linear_backward(s.dact.data(), dw2.data(), db2.data(), s.dout.data(), s.act.data(), w2.data(), N, I, C,
                          GradWrite::Overwrite, p, 0, r2);
          glu_backward(s.dpre.data(), s.dact.data(), s.pre.data(), N, I, kind);
          linear_backward(s.dinp.data(), dw1.data(), db1.data(), s.dpre.data(), s.inp.data(), w1.data(), N, C, 2 * I,
                          GradWrite::Overwrite, p, 0, r1);
        },
        [&](Set& s) {
          glu_linear_backward(s.dpre.data(), dw2.data(), db2.data(), s.dout.data(), s.pre.data(), s.act.data(),
                              w2.data(), N, I, C, kind, p, r2);
          linear_backward(s.dinp.data(), dw1.data(), db1.data(), s.dpre.data(), s.inp.data(), w1.data(), N, C, 2 * I,
                          GradWrite::Overwrite, p, 0, r1);
        }};
    if (bf16 && bf16_gemm_takes_rounded_operands()) {
      names.push_back("rounded");
      forward.push_back([&](Set& s) {
        linear_glu_forward_rounded_act(s.act16.data(), s.pre.data(), s.inp.data(), w1.data(), b1.data(), N, C, I, kind,
                                       r1);
        linear_forward_rounded_input(s.out.data(), s.act16.data(), w2.data(), b2.data(), N, I, C, 0, r2);
      });
      backward.push_back([&](Set& s) {
        glu_linear_backward_rounded_dpre(s.dpre16.data(), db1.data(), dw2.data(), db2.data(), s.dout.data(),
                                         s.pre.data(), s.act16.data(), w2.data(), N, I, C, kind, r2);
        linear_backward_rounded_dout(s.dinp.data(), dw1.data(), s.dpre16.data(), s.inp.data(), w1.data(), N, C, 2 * I,
                                     GradWrite::Overwrite, r1);
      });
    }
    const auto f = alternate(forward, sets, threads), b = alternate(backward, sets, threads);
    for (size_t v = 0; v < names.size(); ++v) {
      char ratio[32] = "";
      if (v > 0)
        std::snprintf(ratio, sizeof ratio, "%.2fx", (f[0].median + b[0].median) / (f[v].median + b[v].median));
      std::printf("%-9s %-9s %9.3f / %9.3f %9.3f / %9.3f %12s\n", bf16 ? "bf16" : "fp32", names[v].c_str(),
                  1e3 * f[v].fastest, 1e3 * f[v].median, 1e3 * b[v].fastest, 1e3 * b[v].median, ratio);
    }
  }
  std::printf("(fwd+bwd: the unfused variant's median time over this one's)\n");
  return 0;
}
