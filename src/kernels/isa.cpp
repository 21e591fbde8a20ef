#include "kernels/isa.h"

#include <cstdlib>
#include <string_view>

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace blocklab::kernels {

namespace {

// This architecture's level names, lowest first, as BLOCKLAB_ISA spells them
#if defined(__x86_64__)
constexpr const char* kValidNames = "generic, avx2 or avx512";
#elif defined(__aarch64__)
constexpr const char* kValidNames = "generic or neon";
#elif defined(__wasm_simd128__)
constexpr const char* kValidNames = "generic or wasm_simd128";
#else
constexpr const char* kValidNames = "generic";
#endif

bool parse(std::string_view s, Isa* out) {
  for (const Isa level : isa_levels())
    if (s == isa_name(level)) {
      *out = level;
      return true;
    }
  return false;
}

Isa detect_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // __builtin_cpu_supports also checks that the OS saves the ymm / zmm state
  if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#elif defined(__aarch64__)
  return Isa::Neon;  // Advanced SIMD is part of every Armv8-A CPU that runs a standard Linux
#elif defined(__wasm_simd128__)
  return Isa::WasmSimd128;  // the module was compiled for it: an engine without SIMD128 would not load it
#endif
  return Isa::Generic;
}

Isa detect() {
  const Isa cpu = cpu_isa();
  const char* cap = std::getenv("BLOCKLAB_ISA");
  Isa limit = cpu;
  if (cap == nullptr || !parse(cap, &limit)) return cpu;
  return limit < cpu ? limit : cpu;
}

}  // namespace

std::vector<Isa> isa_levels() {
#if defined(__x86_64__)
  return {Isa::Generic, Isa::Avx2, Isa::Avx512};
#elif defined(__aarch64__)
  return {Isa::Generic, Isa::Neon};
#elif defined(__wasm_simd128__)
  return {Isa::Generic, Isa::WasmSimd128};
#else
  return {Isa::Generic};
#endif
}

bool isa_has_fma(Isa level) {
#if defined(__x86_64__)
  return level != Isa::Generic;
#elif defined(__aarch64__)
  (void)level;
  return true;  // fmla is baseline Armv8-A, and -ffp-contract=fast fuses a * b + c at every level
#else
  (void)level;
  return false;
#endif
}

Isa cpu_isa() {
  static const Isa level = detect_cpu();
  return level;
}

namespace isa_detail {
int decide() {
  static const int level = static_cast<int>(detect());
  running.store(level, std::memory_order_relaxed);
  return level;
}
}  // namespace isa_detail

Isa set_isa(Isa level) {
  const Isa before = isa();
  const Isa capped = level < cpu_isa() ? level : cpu_isa();
  isa_detail::running.store(static_cast<int>(capped), std::memory_order_relaxed);
  return before;
}

const char* isa_name(Isa level) {
  switch (level) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Neon: return "neon";
    case Isa::WasmSimd128: return "wasm_simd128";
    case Isa::Generic: break;
  }
  return "generic";
}

std::string check_isa_setting() {
  const char* cap = std::getenv("BLOCKLAB_ISA");
  Isa level;
  if (cap == nullptr || parse(cap, &level)) return "";
  return "BLOCKLAB_ISA=" + std::string(cap) + " is not an instruction-set level of this CPU's architecture (" +
         kValidNames + ")";
}

std::string isa_description() {
  const Isa cpu = cpu_isa(), running = isa();
  std::string text = std::string(isa_name(running)) + " (CPU: " + isa_name(cpu);
  if (running != cpu) text += std::string(", capped by BLOCKLAB_ISA=") + std::getenv("BLOCKLAB_ISA");
  return text + ")";
}

std::string cpu_features() {
  std::string list;
  auto add = [&list](bool present, const char* name) {
    if (!present) return;
    if (!list.empty()) list += ' ';
    list += name;
  };
#if defined(__x86_64__)
  __builtin_cpu_init();
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
#elif defined(__wasm_simd128__)
  add(true, "simd128");
#elif defined(__aarch64__) && defined(__linux__)
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  add((hwcap & HWCAP_ASIMD) != 0, "asimd");
  add((hwcap & HWCAP_ASIMDDP) != 0, "asimddp");
  add((hwcap2 & HWCAP2_BF16) != 0, "bf16");
  add((hwcap2 & HWCAP2_I8MM) != 0, "i8mm");
  add((hwcap & HWCAP_SVE) != 0, "sve");
#endif
  return list.empty() ? "none" : list;
}

}  // namespace blocklab::kernels
