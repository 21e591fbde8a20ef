// `blocklab bench` as a user runs it: the timing, MFU and memory lines, the per-kernel profile, and a
// clear error on bad input.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "cli_runner.h"

using blocklab::testing::run_cli;

namespace {
const std::string kTiny = " --layers 2 --width 32 --heads 2 --vocab 8 --copy-len 4 --batch 4 ";

double captured_number(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stod(m[1].str());
}
}  // namespace

TEST(CliBench, PrintsTimingMfuMemoryAndProfile) {
  for (const char* threads : {"1", "2"}) {
    const auto r = run_cli(std::string("bench") + kTiny + "--threads " + threads +
                           " --bench-steps 3 --warmup-steps 1 --profile");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("threads ") + threads), std::string::npos) << r.out;
    EXPECT_GT(captured_number(r.out, R"(step: ([0-9.]+) ms)"), 0.0) << r.out;
    EXPECT_GT(captured_number(r.out, R"(MFU ([0-9.]+)%)"), 0.0) << r.out;
    // the training state of this model: 4 x params + activations, a few hundred KiB; the process is more
    const double state_ratio = captured_number(r.out, R"(peak RSS [0-9.]+ MiB = ([0-9.]+)x)");
    EXPECT_GT(state_ratio, 1.0) << r.out;
    for (const char* kernel : {"linear_forward", "linear_backward", "attention_forward", "attention_backward",
                               "layernorm_backward", "other (zeroing, optimizer)"})
      EXPECT_NE(r.out.find(kernel), std::string::npos) << kernel << "\n" << r.out;
    // with a micro-kernel (not "gemm blas") the MLP's GELU runs inside its GEMMs
    if (r.out.find("gemm blas") == std::string::npos) {
      for (const char* kernel : {"linear_gelu_forward", "gelu_linear_backward"})
        EXPECT_NE(r.out.find(kernel), std::string::npos) << kernel << "\n" << r.out;
    }
  }
}

TEST(CliBench, BadInputIsOneLineAndExit2) {
  const auto r = run_cli(std::string("bench") + kTiny + "--heads 3");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("heads (3) must divide width (32)"), std::string::npos) << r.err;
  const auto steps = run_cli(std::string("bench") + kTiny + "--bench-steps 0");
  EXPECT_EQ(steps.status, 2) << steps.err;
}
