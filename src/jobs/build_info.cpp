#include "jobs/build_info.h"

#include "kernels/bf16_gemm.h"
#include "kernels/bf16_onednn.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "kernels/sgemm.h"
#include "text/unicode.h"
#include "train/run_config.h"
#include "util/mpi.h"

namespace blocklab::jobs {

std::vector<OptionalPart> optional_parts() {
  return {
      {"OpenBLAS", kernels::have_blas(), "double-precision products", "the portable GEMM instead"},
      {"oneDNN", kernels::onednn_available(), "bf16 on AMX", "fp32 GEMMs for bf16 on AMX CPUs"},
      {"MPI", mpi::built_with_mpi(), "sweep run --mpi, data-parallel train", "one process"},
      {"text", text::have_text(), "the text task, tokenizers: utf8proc, PCRE2", "copy and reverse tasks only"},
      {"TOML", have_toml(), "config files: toml++", "keys as flags or JSON"},
  };
}

std::string describe_optional_parts() {
  std::string out = "optional parts:";
  bool first = true;
  for (const OptionalPart& part : optional_parts()) {
    out += (first ? " " : ", ") + part.name + (part.present ? " yes (" + part.serves : " no (" + part.without) + ")";
    first = false;
  }
  return out;
}

std::string describe_kernels() {
  const char* level = kernels::isa_name(kernels::isa());
  return std::string("instruction set: ") + kernels::isa_description() + " [CPU features: " +
         kernels::cpu_features() + "]; kernels: sgemm " + kernels::sgemm_isa_name(kernels::sgemm_isa()) +
         ", bf16 GEMM " + kernels::bf16_isa_description() + ", attention / norms / activations / RoPE " + level +
         ", Adam / cross-entropy / embeddings generic (memory-bound loops)";
}

nlohmann::json build_info() {
  nlohmann::json parts = nlohmann::json::array(), levels = nlohmann::json::array();
  for (const OptionalPart& p : optional_parts())
    parts.push_back({{"name", p.name}, {"present", p.present}, {"serves", p.serves}, {"without", p.without}});
  for (kernels::Isa level : kernels::isa_levels()) levels.push_back(kernels::isa_name(level));
  return {{"version", kVersion},
          {"isa", kernels::isa_name(kernels::isa())},
          {"isa_levels", levels},
          {"cpu_features", kernels::cpu_features()},
          {"kernels", describe_kernels()},
          {"optional_parts", parts}};
}

}  // namespace blocklab::jobs
