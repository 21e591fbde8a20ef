#include "kernels/peak.h"

#include <algorithm>
#include <chrono>

#include "kernels/bf16_gemm.h"
#include "kernels/isa.h"
#include "kernels/simd.h"
#include "util/openmp.h"
#include "util/profiler.h"

namespace blocklab::kernels {

namespace {


// Accumulators per thread: enough independent chains to cover the FMA latency (4-5 cycles) on two pipes,
// and few enough to stay in the 16 registers of AVX2 / SSE. AArch64 cores have up to four 128-bit FMA pipes
// (Neoverse V1/V2, Apple's) at a latency of 4: 16 chains in flight; with its 32 registers, 24.
#if defined(__aarch64__)
constexpr int kChains = 24;
#else
constexpr int kChains = 12;
#endif

#if defined(__x86_64__)
#define BLOCKLAB_KEEP_IN_REGISTER(v) asm volatile("" : "+v"(v))
#elif defined(__aarch64__)
#define BLOCKLAB_KEEP_IN_REGISTER(v) asm volatile("" : "+w"(v))
#else
#define BLOCKLAB_KEEP_IN_REGISTER(v) asm volatile("" : "+m"(v))
#endif

// steps x kChains multiply-adds of full registers of the level: a = a * m + c, every chain independent.
// Twelve named variables, not an array (GCC keeps an array of vectors in memory and would time stores);
// the asm statement keeps each step's value in a register, so that the loop is neither folded nor turned
// into memory traffic; the result is stored so that nothing is dead.
template <Isa I>
BLOCKLAB_ALWAYS_INLINE void fma_loop(long steps, float* sink) {
  constexpr int VB = kVectorBytes<I>;
  using V = simd::Vec<float, VB>;
  const V m = simd::broadcast<float, VB>(0.999999f), c = simd::broadcast<float, VB>(1e-7f);
  V a0 = c + 1.00f, a1 = c + 1.01f, a2 = c + 1.02f, a3 = c + 1.03f, a4 = c + 1.04f, a5 = c + 1.05f;
  V a6 = c + 1.06f, a7 = c + 1.07f, a8 = c + 1.08f, a9 = c + 1.09f, a10 = c + 1.10f, a11 = c + 1.11f;
#define BLOCKLAB_STEP(a) \
  a = a * m + c;         \
  BLOCKLAB_KEEP_IN_REGISTER(a)
#if defined(__aarch64__)
  V b0 = c + 1.12f, b1 = c + 1.13f, b2 = c + 1.14f, b3 = c + 1.15f, b4 = c + 1.16f, b5 = c + 1.17f;
  V b6 = c + 1.18f, b7 = c + 1.19f, b8 = c + 1.20f, b9 = c + 1.21f, b10 = c + 1.22f, b11 = c + 1.23f;
  static_assert(kChains == 24);
  for (long s = 0; s < steps; ++s) {
    BLOCKLAB_STEP(a0); BLOCKLAB_STEP(a1); BLOCKLAB_STEP(a2); BLOCKLAB_STEP(a3);
    BLOCKLAB_STEP(a4); BLOCKLAB_STEP(a5); BLOCKLAB_STEP(a6); BLOCKLAB_STEP(a7);
    BLOCKLAB_STEP(a8); BLOCKLAB_STEP(a9); BLOCKLAB_STEP(a10); BLOCKLAB_STEP(a11);
    BLOCKLAB_STEP(b0); BLOCKLAB_STEP(b1); BLOCKLAB_STEP(b2); BLOCKLAB_STEP(b3);
    BLOCKLAB_STEP(b4); BLOCKLAB_STEP(b5); BLOCKLAB_STEP(b6); BLOCKLAB_STEP(b7);
    BLOCKLAB_STEP(b8); BLOCKLAB_STEP(b9); BLOCKLAB_STEP(b10); BLOCKLAB_STEP(b11);
  }
  a0 += ((b0 + b1) + (b2 + b3)) + ((b4 + b5) + (b6 + b7)) + ((b8 + b9) + (b10 + b11));
#else
  static_assert(kChains == 12);
  for (long s = 0; s < steps; ++s) {
    BLOCKLAB_STEP(a0); BLOCKLAB_STEP(a1); BLOCKLAB_STEP(a2); BLOCKLAB_STEP(a3);
    BLOCKLAB_STEP(a4); BLOCKLAB_STEP(a5); BLOCKLAB_STEP(a6); BLOCKLAB_STEP(a7);
    BLOCKLAB_STEP(a8); BLOCKLAB_STEP(a9); BLOCKLAB_STEP(a10); BLOCKLAB_STEP(a11);
  }
#endif
#undef BLOCKLAB_STEP
  simd::store<float, VB>(sink, ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11)));
}

// Times loop(steps, sink) -> multiply-adds per step on peak.threads threads: the best of a few runs, by wall and by
// CPU time, in GFLOP/s (two per multiply-add).
template <typename Loop>
void time_peak(FmaPeak& peak, double seconds, Loop loop) {
  constexpr int kRepeats = 5;
  // steps per run: about seconds / kRepeats, from a short timed run on this thread (an emulated CPU runs the
  // loop a hundred times slower than a real one)
  long steps = 1000;
  for (;;) {
    alignas(64) float sink[16];
    const auto start = std::chrono::steady_clock::now();
    loop(steps, sink);
    asm volatile("" : : "r"(sink) : "memory");
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > 0.002 || steps > (1L << 30)) {
      steps = std::max(1000L, static_cast<long>(static_cast<double>(steps) * seconds / kRepeats / elapsed));
      break;
    }
    steps *= 4;
  }
  for (int rep = 0; rep < kRepeats; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_seconds();
    long per_step = 0;
#pragma omp parallel num_threads(peak.threads)
    {
      alignas(64) float sink[16];
      const long n = loop(steps, sink);
      asm volatile("" : : "r"(sink) : "memory");  // the result is observed
#pragma omp master
      per_step = n;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double flops = 2.0 * static_cast<double>(steps) * static_cast<double>(per_step) * peak.threads;
    peak.gflops = std::max(peak.gflops, flops / elapsed / 1e9);
    peak.gflops_cpu = std::max(peak.gflops_cpu, flops / (process_cpu_seconds() - cpu_start) / 1e9);
  }
}

}  // namespace

FmaPeak measure_fma_peak(int threads, double seconds) {
  FmaPeak peak;
  peak.threads = std::max(1, threads);
  peak.chains = kChains;
  on_isa([&](auto level) { peak.lanes = kVectorBytes<level.value> / 4; });
  peak.fused = isa_has_fma(isa());
  time_peak(peak, seconds, [&](long steps, float* sink) {
    on_isa([&](auto level) { fma_loop<level.value>(steps, sink); });
    return static_cast<long>(kChains) * peak.lanes;
  });
  return peak;
}

FmaPeak measure_bf16_peak(int threads, double seconds) {
  FmaPeak peak;
  alignas(64) float probe[16];
  const long macs_per_step = bf16_dot_loop(0, probe);  // 0: no bf16 dot instruction on this CPU
  if (macs_per_step == 0) return peak;
  peak.threads = std::max(1, threads);
  peak.chains = bf16_dot_chains();
  peak.lanes = static_cast<int>(macs_per_step / peak.chains / 2);
  peak.products = 2;
  peak.instruction = bf16_dot_instruction();
  time_peak(peak, seconds, bf16_dot_loop);
  return peak;
}

}  // namespace blocklab::kernels
