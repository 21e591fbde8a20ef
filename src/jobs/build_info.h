#pragma once
// What this build of blocklab has, as every front end reports it (`blocklab --version`, the Python package, the
// browser page): the kernels' instruction-set levels and which optional parts were built in.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace blocklab::jobs {

inline constexpr const char* kVersion = "0.1.0";  // the project's (CMakeLists.txt, pyproject.toml)

// One optional part of the core: OpenBLAS, oneDNN, MPI, the text task (utf8proc, PCRE2), TOML (toml++).
struct OptionalPart {
  std::string name;     // "OpenBLAS"
  bool present = false;
  std::string serves;   // what it is used for, e.g. "double-precision products"
  std::string without;  // what happens without it, e.g. "the portable GEMM instead"
};
std::vector<OptionalPart> optional_parts();

// "optional parts: OpenBLAS yes (double-precision products), oneDNN no (bf16 on AMX), ..."
std::string describe_optional_parts();
// "instruction set: avx512 (CPU) [CPU features: ...]; kernels: sgemm avx512, bf16 GEMM ..., ..."
std::string describe_kernels();

// All of it as one object, for the Python package's build_info() and the page:
//   {"version", "isa" (the running level), "isa_levels" (this architecture's), "cpu_features", "kernels" (the
//    line above), "optional_parts": [{"name", "present", "serves", "without"}]}
nlohmann::json build_info();

}  // namespace blocklab::jobs
