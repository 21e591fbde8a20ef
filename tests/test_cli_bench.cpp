// `blocklab bench` as a user runs it: the timing, MFU and memory lines, the per-kernel profile, and a
// clear error on bad input.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "kernels/bf16_gemm.h"
#include "kernels/bf16_onednn.h"
#include "kernels/isa.h"

namespace fs = std::filesystem;
namespace kernels = blocklab::kernels;
using blocklab::testing::expect_refused;
using blocklab::testing::fresh_dir;
using blocklab::testing::read_text;
using blocklab::testing::run_cli;
using blocklab::testing::run_cli_env;

namespace {
const std::string kTiny = " --layers 2 --width 32 --heads 2 --vocab 8 --copy-len 4 --batch 4 ";

double captured_number(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return -1;
  return std::stod(m[1].str());
}

std::string captured_text(const std::string& text, const std::string& pattern) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(pattern)) ? m[1].str() : std::string();
}
}  // namespace

TEST(CliBench, PrintsTimingMfuMemoryAndProfile) {
  for (const char* threads : {"1", "2"}) {
    const auto r = run_cli(std::string("bench") + kTiny + "--threads " + threads +
                           " --bench-steps 3 --warmup-steps 1 --profile");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("threads ") + threads), std::string::npos) << r.out;
    EXPECT_GT(captured_number(r.out, R"(step: ([0-9.]+) ms)"), 0.0) << r.out;
    // MFU against the machine's multiply-add peak at the running level, the sgemm's own rate beside it
    // the peak loop's chains (kernels/peak.cpp): 12 on x86-64 at every level, 24 on AArch64 (32 registers)
#if defined(__aarch64__)
    const std::string chains = "24";
#else
    const std::string chains = "12";
#endif
    EXPECT_GT(captured_number(r.out, R"(machine peak \(\w+: )" + chains +
                                         R"( independent .*, [12] threads?\): [0-9.]+ GFLOP/s -> MFU ([0-9.]+)%)"),
              0.0) << r.out;
    EXPECT_GT(captured_number(r.out, R"(sgemm peak \([0-9x]+, [12] threads?, cache-resident\): ([0-9.]+) GFLOP/s)"), 0.0)
        << r.out;
    EXPECT_NE(r.out.find("instruction set: "), std::string::npos) << r.out;
    EXPECT_GT(captured_number(r.out, R"(process CPU time per step \(all threads\): ([0-9.]+) ms)"), 0.0) << r.out;
    if (std::string(threads) == "1") {  // the MFU by CPU time, a one-thread figure
      EXPECT_GT(captured_number(r.out, R"(by CPU time: step [0-9.]+ ms, machine peak [0-9.]+ GFLOP/s -> MFU ([0-9.]+)%)"),
                0.0) << r.out;
    }
    // the training state of this model: 4 x params + activations, a few hundred KiB; the process is more
    const double state_ratio = captured_number(r.out, R"(peak RSS [0-9.]+ MiB = ([0-9.]+)x)");
    EXPECT_GT(state_ratio, 1.0) << r.out;
    for (const char* kernel : {"linear_forward", "linear_backward", "attention_forward", "attention_backward",
                               "layernorm_backward", "other (zeroing, optimizer)"})
      EXPECT_NE(r.out.find(kernel), std::string::npos) << kernel << "\n" << r.out;
    // with a micro-kernel (not "gemm blas") the MLP's GELU runs inside its GEMMs, and the GEMMs are listed by
    // shape: this model's fc1 forward is (4 sequences x 7 tokens) x (4 x 32) x 32, its weight transposed, once per block
    if (r.out.find("gemm blas") == std::string::npos) {
      for (const char* kernel : {"linear_gelu_forward", "gelu_linear_backward"})
        EXPECT_NE(r.out.find(kernel), std::string::npos) << kernel << "\n" << r.out;
      EXPECT_GT(captured_number(r.out, R"(28x128x32 NT +2 +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9.]+))"), 0.0) << r.out;
      EXPECT_GT(captured_number(r.out, R"(all sgemm calls +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9.]+))"), 0.0) << r.out;
    }
  }
}

// --precision bf16 names the path that ran and times fp32 steps of the same model in between; without a
// bf16 kernel (here forced with BLOCKLAB_GEMM=fp32) it says so and runs fp32.
TEST(CliBench, Bf16NamesThePathAndTheRatioToFp32) {
  const char* outer = std::getenv("BLOCKLAB_GEMM");  // the test run's own setting, restored below
  const std::string saved = outer == nullptr ? "" : outer;
  for (const bool forced : {false, true}) {
    if (forced)
      ::setenv("BLOCKLAB_GEMM", "fp32", 1);
    else
      ::unsetenv("BLOCKLAB_GEMM");
    const auto r =
        run_cli(std::string("bench") + kTiny + "--threads 1 --bench-steps 2 --warmup-steps 1 --precision bf16 --profile");
    if (outer != nullptr)
      ::setenv("BLOCKLAB_GEMM", saved.c_str(), 1);
    else
      ::unsetenv("BLOCKLAB_GEMM");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_GT(captured_number(r.out, R"(step: ([0-9.]+) ms)"), 0.0) << r.out;
    EXPECT_GT(captured_number(r.out, R"(fp32 step: ([0-9.]+) ms)"), 0.0) << r.out;
    EXPECT_GT(captured_number(r.out, R"(bf16 ([0-9.]+)x faster than fp32)"), 0.0) << r.out;
    // MFU against the bf16 dot instruction's peak where bf16 products run on it, else against the FMA peak
    const bool bf16_ran = !forced && kernels::bf16_isa() != kernels::Bf16Isa::None;
    EXPECT_GT(captured_number(r.out, bf16_ran ? R"(machine peak .*: [0-9.]+ GFLOP/s -> the step runs at ([0-9.]+)%)"
                                              : R"(machine peak .*: [0-9.]+ GFLOP/s -> MFU ([0-9.]+)%)"),
              0.0)
        << r.out;
    if (bf16_ran)
      EXPECT_GT(captured_number(r.out, R"(bf16 peak \((?:vdpbf16ps|bfdot): .*\): [0-9.]+ GFLOP/s -> bf16 MFU ([0-9.]+)%)"),
                0.0)
          << r.out;
    else
      EXPECT_EQ(r.out.find("bf16 MFU"), std::string::npos) << r.out;
    EXPECT_GT(captured_number(r.out, R"(bf16 gemm peak \(.*\): ([0-9.]+) GFLOP/s)"), 0.0) << r.out;
    // the profile's GEMMs by shape are the bf16 GEMM's calls where it ran, sgemm's otherwise
    if (r.out.find("gemm blas") == std::string::npos) {
      EXPECT_GT(captured_number(r.out, bf16_ran ? R"(all bf16 GEMM calls +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9.]+))"
                                                : R"(all sgemm calls +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9.]+))"),
                0.0)
          << r.out;
      EXPECT_GT(captured_number(r.out, R"(28x128x32 NT +2 +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9.]+))"), 0.0) << r.out;
    }
    const std::string path = captured_text(r.out, R"(precision bf16: ([^;\n]+);)");
    if (forced) {
      EXPECT_EQ(path.rfind("fp32 (BLOCKLAB_GEMM=fp32", 0), 0u) << r.out;
      EXPECT_NE(r.err.find("GEMMs run in fp32"), std::string::npos) << r.err;  // the one-line notice
    } else {
      // what CPUID allows: oneDNN where AMX is (and the build has oneDNN, and BLOCKLAB_ISA leaves AVX-512 on),
      // else the own kernel or fp32
      if (kernels::cpu_has_amx_bf16() && kernels::onednn_available() && kernels::isa() == kernels::Isa::Avx512)
        EXPECT_EQ(path.rfind("onednn: ", 0), 0u) << r.out;
      else
        EXPECT_TRUE(path.rfind("avx512_bf16 (", 0) == 0 || path.rfind("neon_bf16 (", 0) == 0 ||
                    path.rfind("fp32 (", 0) == 0)
            << r.out;
    }
  }
}

// BLOCKLAB_GEMM=onednn runs the bf16 GEMMs in oneDNN (the AMX path) wherever the build has it: bench names
// it, and training gives the same numbers with 1 and 2 threads.
TEST(CliBench, OneDnnPathRunsAndIsThreadCountIndependent) {
  if (std::string why; !kernels::onednn_bf16_available(&why)) GTEST_SKIP() << "no oneDNN bf16 matmul: " << why;
  const auto r = run_cli_env("BLOCKLAB_GEMM=onednn ", std::string("bench") + kTiny +
                                                          "--threads 1 --bench-steps 2 --warmup-steps 1 --precision bf16");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(captured_text(r.out, R"(precision bf16: ([^;\n]+);)").rfind("onednn: oneDNN ", 0), 0u) << r.out;
  const fs::path dir = fresh_dir("cli_bench_onednn");
  for (const int threads : {1, 2}) {
    const auto t = run_cli_env("BLOCKLAB_GEMM=onednn ", "train --layers 2 --width 32 --heads 2 --vocab 8 --copy-len 8 "
                                                        "--batch 8 --steps 12 --precision bf16 --threads " +
                                                            std::to_string(threads) + " --out " +
                                                            (dir / std::to_string(threads)).string());
    ASSERT_EQ(t.status, 0) << t.err;
  }
  EXPECT_EQ(read_text(dir / "1" / "metrics.csv"), read_text(dir / "2" / "metrics.csv"));
}

TEST(CliBench, BadInputIsOneLineAndExit2) {
  const auto r = run_cli(std::string("bench") + kTiny + "--heads 3");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("heads (3) must divide width (32)"), std::string::npos) << r.err;
  const auto steps = run_cli(std::string("bench") + kTiny + "--bench-steps 0");
  EXPECT_EQ(steps.status, 2) << steps.err;
}

// A forced GEMM path this CPU cannot run is refused before the command starts, in one line naming what the
// CPU lacks (exit 2, as other bad input); one it can run runs. On an AVX2-only CPU (or under
// qemu-x86_64 -cpu Haswell) the AVX-512 paths and oneDNN are the refused ones.
TEST(CliBench, ForcedGemmPathTheCpuCannotRunIsRefused) {
  const std::string cap = std::getenv("BLOCKLAB_ISA") == nullptr ? "" : std::getenv("BLOCKLAB_ISA");
  const bool capped = cap == "avx2" || cap == "generic";  // BLOCKLAB_ISA below AVX-512
  const bool cpu_avx512 = kernels::cpu_isa() == kernels::Isa::Avx512;
  const bool cpu_avx512_bf16 = kernels::cpu_has_avx512_bf16();
  std::string onednn_why;
  const bool onednn = kernels::onednn_bf16_available(&onednn_why);
  struct Case {
    std::string path;
    bool runs;
    std::string refusal;  // what the one line says where it does not
  };
  const std::string cap_text = "BLOCKLAB_ISA=" + cap + " caps the kernels below it";
  const std::vector<Case> cases = {
      {"avx512", cpu_avx512 && !capped, cpu_avx512 ? cap_text : "this CPU has no AVX-512 (AVX512F)"},
      {"avx512_bf16", cpu_avx512_bf16 && !capped, cpu_avx512_bf16 ? cap_text : "this CPU has no AVX512-BF16"},
      {"onednn", onednn, onednn_why}};
  for (const Case& c : cases) {
    const auto r = run_cli_env("BLOCKLAB_GEMM=" + c.path + " ", std::string("bench") + kTiny +
                                                                 "--threads 1 --bench-steps 1 --warmup-steps 0 --precision bf16");
    if (c.runs) {
      EXPECT_EQ(r.status, 0) << c.path << "\n" << r.err;
    } else {
      expect_refused(r, "BLOCKLAB_GEMM=" + c.path + ": " + c.refusal, c.path);
      EXPECT_EQ(r.out, "") << c.path;
    }
  }
  expect_refused(run_cli_env("BLOCKLAB_GEMM=avx3 ", std::string("bench") + kTiny), "BLOCKLAB_GEMM=avx3: not a GEMM path");
}

// Without a forced path, --precision bf16 on a CPU without a bf16 kernel runs fp32 and says so in one line.
TEST(CliBench, Bf16WithoutAKernelRunsFp32WithANotice) {
  if (kernels::bf16_isa() != kernels::Bf16Isa::None) GTEST_SKIP() << "this CPU has a bf16 path: " << kernels::bf16_isa_description();
  const auto r = run_cli(std::string("bench") + kTiny + "--threads 1 --bench-steps 1 --warmup-steps 0 --precision bf16");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(captured_text(r.out, R"(precision bf16: ([^;\n]+);)").rfind("fp32 (", 0), 0u) << r.out;
  EXPECT_NE(r.err.find("blocklab: precision bf16: GEMMs run in fp32 ("), std::string::npos) << r.err;
  EXPECT_EQ(blocklab::testing::line_count(r.err), 1) << r.err;
}
