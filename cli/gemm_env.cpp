// BLOCKLAB_GEMM (src/kernels/sgemm.h, bf16_gemm.h) forces a GEMM path. The library falls back where a
// forced path cannot run; the CLI refuses such a setting before a command starts, as it refuses other bad
// input: a value no path has, or a path this CPU (or BLOCKLAB_ISA's cap) cannot run, named with what the
// CPU lacks.
#include <cstdlib>
#include <string>

#include "commands.h"
#include "kernels/bf16_gemm.h"
#include "kernels/bf16_onednn.h"
#include "kernels/isa.h"

namespace blocklab::cli {

std::string gemm_env_problem() {
  const char* v = std::getenv("BLOCKLAB_GEMM");
  if (v == nullptr || *v == '\0') return "";
  const std::string choice = v;
  const std::string head = "BLOCKLAB_GEMM=" + choice + ": ";
  const std::string tail = " (unset BLOCKLAB_GEMM to let blocklab choose)";
  if (choice == "blas" || choice == "fp32") return "";
  using kernels::Isa;
#if defined(__x86_64__)
  const bool avx2 = kernels::cpu_isa() >= Isa::Avx2, avx512 = kernels::cpu_isa() >= Isa::Avx512;
#else
  const bool avx2 = false, avx512 = false;  // x86 paths: refused on other architectures
#endif
  const bool avx512_bf16 = kernels::cpu_has_avx512_bf16();
  // the level needed is there, but BLOCKLAB_ISA caps the kernels below it
  auto capped = [&](Isa needs) {
    return kernels::isa() < needs
               ? head + "BLOCKLAB_ISA=" + std::getenv("BLOCKLAB_ISA") + " caps the kernels below it" + tail
               : "";
  };
  if (choice == "avx2") return avx2 ? capped(Isa::Avx2) : head + "this CPU has no AVX2 and FMA" + tail;
  if (choice == "avx512") return avx512 ? capped(Isa::Avx512) : head + "this CPU has no AVX-512 (AVX512F)" + tail;
  if (choice == "avx512_bf16") return avx512_bf16 ? capped(Isa::Avx512) : head + "this CPU has no AVX512-BF16" + tail;
  if (choice == "onednn") {
    std::string why;
    return kernels::onednn_bf16_available(&why) ? "" : head + why + tail;
  }
  return head + "not a GEMM path (blas, fp32, avx2, avx512, avx512_bf16 or onednn)";
}

}  // namespace blocklab::cli
