#pragma once
// The instruction-set level every hot kernel runs at, chosen once at run time: the best level this CPU
// supports, capped by the environment variable BLOCKLAB_ISA, so that a machine with the widest level runs,
// tests and measures every lower path too. The levels of each architecture:
//
//   x86-64   generic  baseline x86-64 (SSE2): 16 vector registers of 4 floats, no FMA
//            avx2     AVX2 + FMA (Haswell and later, AMD Zen 1-3): 16 registers of 8 floats
//            avx512   AVX-512F: 32 registers of 16 floats
//   AArch64  generic  the portable kernels (GCC vector extensions), compiled for baseline Armv8-A
//            neon     the NEON (Advanced SIMD) kernels: 32 registers of 4 floats, FMA by element
//   wasm32   generic        the portable kernels, compiled with SIMD128 (the browser build: -msimd128)
//            wasm_simd128   the kernels written for WebAssembly SIMD128 (vectors of 4 floats, no FMA; the
//                           engine maps them to the CPU's 128-bit registers)
//
// (Armv8-A has NEON and FMA in its baseline, so on ARM `generic` runs the same instructions as `neon` for
// every kernel written once for all levels; the levels differ in the kernels written per level: the sgemm
// micro-kernel and the register tiles sized for 32 registers. WebAssembly is the same: a module is compiled
// with SIMD128 or not, and the levels differ in the sgemm micro-kernel. On other architectures only `generic`
// exists.)
//
// A kernel body is written once, as a template over the level (its vector width and register tiles come
// from the level), and called through on_isa(): for each level there is one entry point compiled for
// that level's instructions (a target-attributed function that inlines the whole body), and on_isa picks
// the running level's. Nothing depends on the compiler's function multiversioning, so GCC and Clang build
// the same code and BLOCKLAB_ISA can cap it.
#include <atomic>
#include <string>
#include <vector>

#include "kernels/simd.h"

namespace blocklab::kernels {

// Ordered within an architecture (a higher value is a wider level); x86 and ARM levels never meet.
enum class Isa { Generic = 0, Avx2 = 1, Avx512 = 2, Neon = 3, WasmSimd128 = 4 };

// The levels of the architecture this binary is built for, lowest first: generic, avx2, avx512 on x86-64;
// generic, neon on AArch64; generic, wasm_simd128 on wasm32 with SIMD128; generic elsewhere.
std::vector<Isa> isa_levels();

// The best level this CPU supports (CPUID, and the OS saving the wider registers).
Isa cpu_isa();

namespace isa_detail {
inline std::atomic<int> running{-1};  // the level in use; -1 until the first call of isa()
int decide();                         // cpu_isa() capped by BLOCKLAB_ISA, stored in `running`
}  // namespace isa_detail

// The running level: cpu_isa(), capped by BLOCKLAB_ISA. Decided at the first call; an unknown
// BLOCKLAB_ISA value is reported by check_isa_setting and otherwise ignored.
inline Isa isa() {
  const int level = isa_detail::running.load(std::memory_order_relaxed);
  return static_cast<Isa>(level >= 0 ? level : isa_detail::decide());
}
// Sets the running level (at most cpu_isa(): a higher one is capped) and returns the one before. For tests
// and benchmarks that compare levels in one process; not while kernels run on other threads.
Isa set_isa(Isa level);
const char* isa_name(Isa);
// Whether a level's float arithmetic fuses a * b + c into one rounding (FMA): every level but x86's generic and
// WebAssembly's two (SIMD128 has no FMA).
bool isa_has_fma(Isa);
// Empty when BLOCKLAB_ISA is unset or valid; otherwise a one-line message naming the bad value and
// the valid ones (the CLI refuses to start on it).
std::string check_isa_setting();
// "avx2 (CPU: avx512, capped by BLOCKLAB_ISA=avx2)" or "avx512 (CPU)"
std::string isa_description();
// The CPU's vector features that blocklab looks at, as the OS reports them, e.g. "avx2 fma avx512f
// avx512bf16" (CPUID) or "asimd asimddp bf16 i8mm sve" (AArch64: getauxval(AT_HWCAP / AT_HWCAP2)).
std::string cpu_features();

// The width of one vector register at each level, in bytes.
template <Isa I>
inline constexpr int kVectorBytes = I == Isa::Avx512 ? 64 : I == Isa::Avx2 ? 32 : 16;
// The number of vector registers at each level (register tiles are sized by it).
template <Isa I>
inline constexpr int kVectorRegisters = I == Isa::Avx512 || I == Isa::Neon ? 32 : 16;

template <Isa I>
struct IsaTag {
  static constexpr Isa value = I;
};

#if defined(__x86_64__)
#define BLOCKLAB_TARGET_AVX512 __attribute__((target("avx512f")))
#define BLOCKLAB_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define BLOCKLAB_TARGET_AVX512
#define BLOCKLAB_TARGET_AVX2
#endif
#define BLOCKLAB_FLATTEN __attribute__((flatten))

namespace isa_detail {
// One entry point per level: f(IsaTag<I>{}) with everything it calls inlined and compiled for level I.
// Kernel bodies are BLOCKLAB_ALWAYS_INLINE as well, so that they are inlined here with any compiler.
template <typename F>
BLOCKLAB_TARGET_AVX512 BLOCKLAB_FLATTEN void run_avx512(F& f) {
  f(IsaTag<Isa::Avx512>{});
}
template <typename F>
BLOCKLAB_TARGET_AVX2 BLOCKLAB_FLATTEN void run_avx2(F& f) {
  f(IsaTag<Isa::Avx2>{});
}
template <typename F>
BLOCKLAB_FLATTEN void run_neon(F& f) {  // NEON is in AArch64's baseline: no target attribute
  f(IsaTag<Isa::Neon>{});
}
template <typename F>
BLOCKLAB_FLATTEN void run_wasm_simd128(F& f) {  // the whole module is compiled with SIMD128
  f(IsaTag<Isa::WasmSimd128>{});
}
template <typename F>
BLOCKLAB_FLATTEN void run_generic(F& f) {
  f(IsaTag<Isa::Generic>{});
}
}  // namespace isa_detail

// Runs f(IsaTag<I>{}) for the running level I, compiled for that level:
//   on_isa([&](auto isa) { layernorm_row<isa.value>(...); });
template <typename F>
BLOCKLAB_ALWAYS_INLINE void on_isa(F&& f) {
  // only this architecture's levels are instantiated
  switch (isa()) {
#if defined(__x86_64__)
    case Isa::Avx512: isa_detail::run_avx512(f); return;
    case Isa::Avx2: isa_detail::run_avx2(f); return;
#elif defined(__aarch64__)
    case Isa::Neon: isa_detail::run_neon(f); return;
#elif defined(__wasm_simd128__)
    case Isa::WasmSimd128: isa_detail::run_wasm_simd128(f); return;
#endif
    default: break;
  }
  isa_detail::run_generic(f);
}

}  // namespace blocklab::kernels
