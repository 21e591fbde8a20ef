// Every instruction-set level this CPU can run (kernels/isa.h), in one process: each kernel family at each
// level against double precision, 1 and 2 threads identical, and the levels with FMA (AVX2, AVX-512; on
// AArch64 both levels) identical to each other bit for bit, since their sums run in the same order. Levels
// above the CPU's are skipped with the reason.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gemm_reference.h"
#include "gradcheck.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/isa.h"
#include "kernels/linear_gelu.h"
#include "kernels/norm.h"
#include "kernels/peak.h"
#include "kernels/sgemm.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::kernels;
using blocklab::testing::random_floats;
using Case = blocklab::testing::GemmCase;

namespace {

// The float outputs of one run of a kernel family, concatenated.
using Outputs = std::vector<float>;

// Runs `run` at `level` with `threads` threads, restoring both afterwards.
Outputs at_level(Isa level, int threads, const std::function<Outputs()>& run) {
  const Isa before = set_isa(level);
  set_num_threads(threads);
  Outputs out = run();
  set_num_threads(0);
  set_isa(before);
  return out;
}

// The step's GEMM shapes in small: partial register tiles at every level (4 x 8, 6 x 16, 12 x 32), two K-chunks.
Outputs sgemm_family() {
  Rng rng(7);
  Outputs all;
  for (const auto [M, N, K] : {Case{101, 70, 300}, Case{13, 33, 17}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const auto A = random_floats(rng, static_cast<size_t>(M) * K), B = random_floats(rng, static_cast<size_t>(K) * N);
        const auto bias = random_floats(rng, N);
        std::vector<float> C(static_cast<size_t>(M) * N), sums(M, 0.f);
        EXPECT_TRUE(sgemm(ta, tb, M, N, K, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.f, C.data(), N,
                          {.bias = bias.data(), .a_row_sums = ta ? sums.data() : nullptr}));
        all.insert(all.end(), C.begin(), C.end());
        all.insert(all.end(), sums.begin(), sums.end());
      }
  return all;
}

// Causal attention forward and backward, head sizes 16 and 32 (the tiled paths), T 70 (more than one
// 64-position tile) and 7 (partial query groups).
Outputs attention_family() {
  Outputs all;
  for (const auto [B, Tn, C, H] : {std::array{2, 70, 32, 2}, std::array{3, 7, 128, 4}}) {
    Rng rng(static_cast<uint64_t>(Tn * C));
    const auto qkv = random_floats(rng, static_cast<size_t>(B) * Tn * 3 * C);
    const auto dout = random_floats(rng, static_cast<size_t>(B) * Tn * C);
    std::vector<float> out(static_cast<size_t>(B) * Tn * C), att(static_cast<size_t>(B) * H * Tn * Tn),
        scratch(attention_scratch_size(B, Tn, C, H)), dqkv(qkv.size(), 0.f);
    attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), B, Tn, C, H);
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, H);
    all.insert(all.end(), out.begin(), out.end());
    all.insert(all.end(), dqkv.begin(), dqkv.end());
  }
  return all;
}

// LayerNorm, RMSNorm, GELU and the GELU fused into its GEMMs, forward and backward.
Outputs rowwise_family() {
  Rng rng(9);
  const int N = 37, C = 96;
  const auto x = random_floats(rng, static_cast<size_t>(N) * C), g = random_floats(rng, static_cast<size_t>(N) * C);
  const auto w = random_floats(rng, C), b = random_floats(rng, C);
  std::vector<float> y(x.size()), mean(N), rstd(N), dx(x.size(), 0.f), dw(C, 0.f), db(C, 0.f);
  Outputs all;
  auto keep = [&all](const std::vector<float>& v) { all.insert(all.end(), v.begin(), v.end()); };
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  keep(y), keep(dx), keep(dw), keep(db);
  std::fill(dx.begin(), dx.end(), 0.f), std::fill(dw.begin(), dw.end(), 0.f);
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
  keep(y), keep(dx), keep(dw);
  std::fill(dx.begin(), dx.end(), 0.f);
  gelu_forward(y.data(), x.data(), static_cast<long>(x.size()));
  gelu_backward(dx.data(), g.data(), x.data(), static_cast<long>(x.size()));
  keep(y), keep(dx);
  const int OC = 4 * C;
  const auto weight = random_floats(rng, static_cast<size_t>(OC) * C), bias = random_floats(rng, OC);
  std::vector<float> act(static_cast<size_t>(N) * OC), pre(act.size());
  linear_gelu_forward(act.data(), pre.data(), x.data(), weight.data(), bias.data(), N, C, OC, GemmPrecision::Fp32);
  keep(act);
  return all;
}

struct Family {
  const char* name;
  Outputs (*run)();
  double tolerance;   // the largest |level - top level| / (1 + |top level|) allowed, one of them without FMA
  double fma_levels;  // the same between two levels with FMA (0: bit for bit)
};
// Attention's softmax exponentials are vectorised differently at 8 and 16 lanes, which moves a probability by
// an ulp or two (measured: 345 of 28672 outputs differ, by at most 6e-8 relative); the other families agree
// bit for bit.
const Family kFamilies[] = {{"sgemm", sgemm_family, 1e-5, 0},
                            {"attention", attention_family, 1e-4, 1e-6},
                            {"norms and GELU", rowwise_family, 1e-4, 0}};

class IsaLevel : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (GetParam() > cpu_isa())
      GTEST_SKIP() << "this CPU runs up to " << isa_name(cpu_isa()) << ", not " << isa_name(GetParam());
  }
};

// At this level: 1 and 2 threads give the same bits, and the results agree with the CPU's best level (to the
// rounding of the sums: the generic level has no FMA), bit for bit between AVX2 and AVX-512.
TEST_P(IsaLevel, EveryKernelFamilyRunsThreadIndependentAndAgreesWithTheTopLevel) {
  const Isa level = GetParam();
  for (const Family& family : kFamilies) {
    SCOPED_TRACE(std::string(family.name) + " at " + isa_name(level));
    const Outputs one = at_level(level, 1, family.run), two = at_level(level, 2, family.run);
    ASSERT_EQ(one, two) << "1 and 2 threads differ";
    const Outputs top = at_level(cpu_isa(), 1, family.run);
    ASSERT_EQ(one.size(), top.size());
    size_t differ = 0;
    double worst = 0;
    for (size_t i = 0; i < one.size(); ++i)
      if (one[i] != top[i]) {
        ++differ;
        worst = std::max(worst, std::abs(static_cast<double>(one[i]) - top[i]) / (1.0 + std::abs(top[i])));
      }
    const bool both_fused = isa_has_fma(level) && isa_has_fma(cpu_isa());
    if (both_fused && family.fma_levels == 0)
      EXPECT_EQ(differ, 0u) << "the FMA levels' sums run in the same order; worst " << worst;
    else
      EXPECT_LT(worst, both_fused ? family.fma_levels : family.tolerance) << differ << " differ";
  }
}

TEST_P(IsaLevel, SgemmMatchesDoubleReference) {
  const Isa before = set_isa(GetParam());
  if (std::getenv("BLOCKLAB_GEMM") == nullptr) {
    EXPECT_STREQ(sgemm_isa_name(sgemm_isa()), isa_name(GetParam()));
  }
  for (const Case shape : {Case{1, 1, 1}, Case{13, 33, 17}, Case{100, 70, 257}})
    blocklab::testing::expect_matches_reference(shape, [](auto... args) { return sgemm(args...); });
  set_isa(before);
}

// The machine peak at this level: registers of the level's width, a positive rate, fused where FMA exists.
TEST_P(IsaLevel, FmaPeakUsesTheLevelsRegisters) {
  const Isa before = set_isa(GetParam());
  const FmaPeak peak = measure_fma_peak(1, 0.02);
  set_isa(before);
  const int floats_per_register = GetParam() == Isa::Avx512 ? 16 : GetParam() == Isa::Avx2 ? 8 : 4;  // SSE, NEON: 4
  EXPECT_EQ(peak.lanes, floats_per_register);
  EXPECT_EQ(peak.fused, isa_has_fma(GetParam()));
  EXPECT_GT(peak.gflops, 0.0);  // under emulation a few hundredths of a GFLOP/s
}

// this architecture's levels: generic, avx2, avx512 on x86-64; generic, neon on AArch64
INSTANTIATE_TEST_SUITE_P(Levels, IsaLevel, ::testing::ValuesIn(isa_levels()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

TEST(Isa, SettingNamesABadValueAndCapsAtTheCpu) {
  const char* outer = std::getenv("BLOCKLAB_ISA");
  const std::string saved = outer == nullptr ? "" : outer;
  ::setenv("BLOCKLAB_ISA", "avx3", 1);
  const std::string message = check_isa_setting();
  for (const Isa level : isa_levels()) {
    ::setenv("BLOCKLAB_ISA", isa_name(level), 1);
    EXPECT_EQ(check_isa_setting(), "") << isa_name(level);
  }
  // another architecture's level is not one of this CPU's
  ::setenv("BLOCKLAB_ISA", cpu_isa() == Isa::Neon ? "avx2" : "neon", 1);
  const std::string foreign = check_isa_setting();
  if (outer != nullptr)
    ::setenv("BLOCKLAB_ISA", saved.c_str(), 1);
  else
    ::unsetenv("BLOCKLAB_ISA");
  EXPECT_NE(message.find("BLOCKLAB_ISA=avx3"), std::string::npos) << message;
#if defined(__x86_64__)
  EXPECT_NE(message.find("generic, avx2 or avx512"), std::string::npos) << message;
#elif defined(__aarch64__)
  EXPECT_NE(message.find("generic or neon"), std::string::npos) << message;
#endif
  EXPECT_NE(foreign, "") << "a level of another architecture was accepted";
  // a level above the CPU's is capped at the CPU's
  const Isa before = set_isa(isa_levels().back());
  EXPECT_EQ(isa(), cpu_isa());
  set_isa(before);
  EXPECT_LE(isa(), cpu_isa());
}

}  // namespace
