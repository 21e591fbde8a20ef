// BLOCKLAB_GEMM (src/kernels/sgemm.h, bf16_gemm.h) forces a GEMM path. The library falls back where a
// forced path cannot run; the CLI refuses such a setting before a command starts, as it refuses other bad
// input: a value no path has, or a path this CPU (or BLOCKLAB_ISA's cap) cannot run, named with what the
// CPU lacks.
#include <cstdlib>
#include <string>

#include "commands.h"
#include "kernels/bf16_onednn.h"

namespace blocklab::cli {

namespace {

// BLOCKLAB_ISA's cap on the kernels' instruction set: 0 generic, 1 AVX2, 2 AVX-512 or no cap (unset or a
// value this check does not know; the library reports those).
int isa_cap_level() {
  const char* v = std::getenv("BLOCKLAB_ISA");
  const std::string cap = v == nullptr ? "" : v;
  if (cap == "generic") return 0;
  if (cap == "avx2") return 1;
  return 2;
}

}  // namespace

std::string gemm_env_problem() {
  const char* v = std::getenv("BLOCKLAB_GEMM");
  if (v == nullptr || *v == '\0') return "";
  const std::string choice = v;
  const std::string head = "BLOCKLAB_GEMM=" + choice + ": ";
  const std::string tail = " (unset BLOCKLAB_GEMM to let blocklab choose)";
  if (choice == "blas" || choice == "fp32") return "";
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx512_bf16 = avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("avx512bf16");
  const char* cap = std::getenv("BLOCKLAB_ISA");
  auto capped = [&](int needs) {
    return isa_cap_level() < needs ? head + "BLOCKLAB_ISA=" + cap + " caps the kernels below it" + tail : "";
  };
  if (choice == "avx2") return avx2 ? capped(1) : head + "this CPU has no AVX2 and FMA" + tail;
  if (choice == "avx512") return avx512 ? capped(2) : head + "this CPU has no AVX-512 (AVX512F)" + tail;
  if (choice == "avx512_bf16") return avx512_bf16 ? capped(2) : head + "this CPU has no AVX512-BF16" + tail;
  if (choice == "onednn") {
    std::string why;
    return kernels::onednn_bf16_available(&why) ? "" : head + why + tail;
  }
  return head + "not a GEMM path (blas, fp32, avx2, avx512, avx512_bf16 or onednn)";
}

}  // namespace blocklab::cli
