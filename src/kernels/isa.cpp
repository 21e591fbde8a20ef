#include "kernels/isa.h"

#include <cstdlib>
#include <string_view>

namespace blocklab::kernels {

namespace {

bool parse(std::string_view s, Isa* out) {
  if (s == "generic") *out = Isa::Generic;
  else if (s == "avx2") *out = Isa::Avx2;
  else if (s == "avx512") *out = Isa::Avx512;
  else return false;
  return true;
}

Isa detect_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // __builtin_cpu_supports also checks that the OS saves the ymm / zmm state
  if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
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
    case Isa::Generic: break;
  }
  return "generic";
}

std::string check_isa_setting() {
  const char* cap = std::getenv("BLOCKLAB_ISA");
  Isa level;
  if (cap == nullptr || parse(cap, &level)) return "";
  return "BLOCKLAB_ISA=" + std::string(cap) + " is not an instruction-set level (generic, avx2 or avx512)";
}

std::string isa_description() {
  const Isa cpu = cpu_isa(), running = isa();
  std::string text = std::string(isa_name(running)) + " (CPU: " + isa_name(cpu);
  if (running != cpu) text += std::string(", capped by BLOCKLAB_ISA=") + std::getenv("BLOCKLAB_ISA");
  return text + ")";
}

}  // namespace blocklab::kernels
