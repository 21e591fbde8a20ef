// What each step fused into blocklab's sgemm adds to its GEMM, on the source model's MLP shapes (2016 rows =
// batch 32 x 63 tokens, width 128, hidden 512), and what the same step costs as a separate pass over memory
// instead (as an unfused framework runs it):
//   bias            fc1 forward  2016x512x128 NT: the bias added to each finished block
//   GELU            fc1 forward  2016x512x128 NT + bias: gelu(pre) of each finished block (linear_gelu_forward)
//   GELU derivative fc2 dX       2016x512x128 NN: the product times gelu'(pre), block by block
//                                (gelu_linear_backward against linear_backward: the same weight-gradient
//                                products in both, so their difference is the epilogue's)
//   row sums        fc2 dW       128x512x2016 TN: the bias gradient's sums of dout, taken while A is packed
//   GELU and gelu'  fc1 forward  as GELU, also storing gelu'(pre) over pre for the backward (GeluSaved::Derivative)
//   times kept gelu' fc2 dX      as GELU derivative, multiplying by that stored derivative instead
// Plain and fused calls alternate, the same operands every call (cache-resident, as bench's GEMM peak);
// the fastest of 100 calls each, by the thread's CPU time with one thread (a busy machine's waits for a core
// left out), by wall time with more. All ratios are from this one run.
// Run: build/bench_epilogue [THREADS]   (default 1)
#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "bench_threads.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/linear_gelu.h"
#include "kernels/sgemm.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::kernels;

namespace {

std::vector<float> normal(long n, Rng& rng, double scale = 1.0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

// The fastest of `calls` runs of each function, the functions alternating call by call.
std::vector<double> fastest(const std::vector<std::function<void()>>& fns, int calls, int threads) {
  std::vector<double> best(fns.size(), 1e30);
  for (auto& f : fns) f();  // warm-up: caches, thread pool, packing buffers
  for (int call = 0; call < calls; ++call)
    for (size_t i = 0; i < fns.size(); ++i) {
      const double start = bench::now_seconds(threads);
      fns[i]();
      best[i] = std::min(best[i], bench::now_seconds(threads) - start);
    }
  return best;
}
}  // namespace

int main(int argc, char** argv) {
  const int threads = bench::threads_argument(argc, argv, "bench_epilogue");
  if (threads == 0) return 2;
  if (sgemm_isa() == SgemmIsa::None) {
    std::printf("BLOCKLAB_GEMM=blas: the GEMMs run in BLAS, with no fused epilogue to time\n");
    return 0;
  }
  set_num_threads(threads);
  const bool cpu_time = threads == 1;
  const int N = 2016, C = 128, H = 512;  // rows, width, MLP hidden
  Rng rng(1);
  // fc1: inp (N,C) @ w1 (H,C)^T + b1 -> pre, act (N,H).  fc2 backward: dout (N,C), w2 (C,H).
  auto inp = normal(static_cast<long>(N) * C, rng), w1 = normal(static_cast<long>(H) * C, rng, 0.09),
       b1 = normal(H, rng, 0.1), dout = normal(static_cast<long>(N) * C, rng), w2 = normal(static_cast<long>(C) * H, rng, 0.05);
  std::vector<float> pre(static_cast<size_t>(N) * H), act(pre.size()), dpre(pre.size()), dw2(w2.size()), db2(C),
      sums(C);
  linear_gelu_forward(act.data(), pre.data(), inp.data(), w1.data(), b1.data(), N, C, H);  // a real pre-activation

  std::printf("fused epilogues on the source model's MLP shapes, %d thread%s (%s time), fastest of 100 calls, "
              "cache-resident; sgemm %s\n",
              threads, threads == 1 ? "" : "s", cpu_time ? "CPU" : "wall", sgemm_isa_name(sgemm_isa()));
  std::printf("%-16s %-16s %9s %13s %8s %16s\n", "epilogue", "GEMM", "GEMM ms", "+epilogue ms", "adds",
              "separate pass");
  const auto row = [](const char* what, const char* gemm, double plain, double fused, double gemm_alone,
                      double separate) {
    char pass[32] = "-";
    if (separate > 0) std::snprintf(pass, sizeof pass, "%.3f ms = %.0f%%", 1e3 * separate, 100 * separate / gemm_alone);
    std::printf("%-16s %-16s %9.3f %13.3f %7.1f%% %16s\n", what, gemm, 1e3 * gemm_alone,
                1e3 * (gemm_alone + fused - plain), 100 * (fused - plain) / gemm_alone, pass);
  };
  const int calls = 100;
  {  // bias
    const auto t = fastest(
        {[&] { sgemm(false, true, N, H, C, inp.data(), C, w1.data(), C, 0.f, pre.data(), H); },
         [&] { sgemm(false, true, N, H, C, inp.data(), C, w1.data(), C, 0.f, pre.data(), H, {.bias = b1.data()}); }},
        calls, threads);
    row("bias", "2016x512x128 NT", t[0], t[1], t[0], 0);
  }
  {  // GELU forward: against the same product with its bias; the separate pass reads pre from memory
    const auto t = fastest(
        {[&] { linear_forward(pre.data(), inp.data(), w1.data(), b1.data(), N, C, H); },
         [&] { linear_gelu_forward(act.data(), pre.data(), inp.data(), w1.data(), b1.data(), N, C, H); },
         [&] { gelu_forward(act.data(), pre.data(), static_cast<long>(N) * H); }},
        calls, threads);
    row("GELU", "2016x512x128 NT", t[0], t[1], t[0], t[2]);
  }
  {  // GELU derivative: the fused backward against the unfused one's products (the same weight gradients)
    const auto t = fastest(
        {[&] { sgemm(false, false, N, H, C, dout.data(), C, w2.data(), H, 0.f, dpre.data(), H); },
         [&] {
           linear_backward(dpre.data(), dw2.data(), db2.data(), dout.data(), act.data(), w2.data(), N, H, C,
                           GradWrite::Overwrite);
         },
         [&] {
           gelu_linear_backward(dpre.data(), dw2.data(), db2.data(), dout.data(), pre.data(), act.data(), w2.data(),
                                N, H, C);
         },
         [&] { gelu_backward(dpre.data(), dpre.data(), pre.data(), static_cast<long>(N) * H); }},
        calls, threads);
    row("GELU derivative", "2016x512x128 NN", t[1], t[2], t[0], t[3]);
  }
  {  // GELU forward keeping gelu' for the backward (GeluSaved::Derivative), into buffers of its own
    std::vector<float> kept(pre.size()), act_kept(pre.size());
    const auto keeping = [&](GeluForm form) {  // against the same product with its bias
      return fastest(
          {[&] { linear_forward(kept.data(), inp.data(), w1.data(), b1.data(), N, C, H); },
           [&] {
             linear_gelu_forward(act_kept.data(), kept.data(), inp.data(), w1.data(), b1.data(), N, C, H,
                                 GemmPrecision::Fp32, form, /*want_derivative=*/true);
           }},
          calls, threads);
    };
    const auto t = keeping(GeluForm::Erf);
    row("GELU and gelu'", "2016x512x128 NT", t[0], t[1], t[0], 0);
    // and the backward that multiplies by the kept derivative
    const auto b = fastest(
        {[&] { sgemm(false, false, N, H, C, dout.data(), C, w2.data(), H, 0.f, dpre.data(), H); },
         [&] {
           linear_backward(dpre.data(), dw2.data(), db2.data(), dout.data(), act.data(), w2.data(), N, H, C,
                           GradWrite::Overwrite);
         },
         [&] {
           gelu_linear_backward(dpre.data(), dw2.data(), db2.data(), dout.data(), kept.data(), act.data(), w2.data(),
                                N, H, C, GemmPrecision::Fp32, GeluForm::Erf, GeluSaved::Derivative);
         }},
        calls, threads);
    row("times kept gelu'", "2016x512x128 NN", b[1], b[2], b[0], 0);
    const auto h = keeping(GeluForm::Tanh);  // GPT-2's tanh form, keeping its derivative the same way
    row("tanh and gelu'", "2016x512x128 NT", h[0], h[1], h[0], 0);
  }
  {  // the bias gradient's row sums in the weight-gradient product
    const auto t = fastest(
        {[&] { sgemm(true, false, C, H, N, dout.data(), C, act.data(), H, 1.f, dw2.data(), H); },
         [&] {
           sgemm(true, false, C, H, N, dout.data(), C, act.data(), H, 1.f, dw2.data(), H, {.a_row_sums = sums.data()});
         }},
        calls, threads);
    row("row sums", "128x512x2016 TN", t[0], t[1], t[0], 0);
  }
  return 0;
}
