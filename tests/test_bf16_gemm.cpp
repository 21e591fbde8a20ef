// The bf16 mixed-precision GEMM: against a double-precision product of the operands rounded to bf16, for
// every transpose combination and edge sizes (partial register tiles, K-chunks, odd K); its extras (bias,
// row sums, per-block callbacks); thread-count independence; the rounding itself.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gemm_reference.h"
#include "kernels/bf16_gemm.h"
#include "kernels/peak.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::kernels;
using blocklab::testing::BlockCount;
using blocklab::testing::random_floats;
using Case = blocklab::testing::GemmCase;

namespace {

bool have_bf16() { return bf16_isa() != Bf16Isa::None; }
#define SKIP_WITHOUT_BF16() \
  if (!have_bf16()) GTEST_SKIP() << "bf16 GEMM not available: " << bf16_isa_description()

}  // namespace

TEST(Bf16Round, NearestEvenLikeTheCpu) {
  EXPECT_EQ(bf16_round(1.0f), 1.0f);
  EXPECT_EQ(bf16_round(1.0f + 0x1p-8f), 1.0f);                   // tie: to even (down)
  EXPECT_EQ(bf16_round(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);     // tie: to even (up)
  EXPECT_EQ(bf16_round(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);  // above the tie: up
  EXPECT_EQ(bf16_round(-2.5f), -2.5f);
  EXPECT_EQ(bf16_round(3.4e38f), std::numeric_limits<float>::infinity());  // past the largest bf16 (3.39e38)
  EXPECT_TRUE(std::isnan(bf16_round(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(bf16_round(1e-40f), 0.0f);  // denormal: zero, as vcvtne2ps2bf16 gives
  EXPECT_TRUE(std::signbit(bf16_round(-1e-40f)));
  // every bf16 value rounds to itself; relative rounding error at most half an ulp of 8 bits, 2^-8
  Rng rng(3);
  for (int i = 0; i < 10000; ++i) {
    const float x = static_cast<float>(rng.normal() * std::exp(10 * rng.normal()));
    const float r = bf16_round(x);
    EXPECT_EQ(bf16_round(r), r);
    EXPECT_LE(std::abs(r - x), std::abs(x) * 0x1p-8f) << x;
  }
}

// The streamed rounding (non-temporal stores after a plain head up to 32-byte alignment) gives round_to_bf16's bits
// at every alignment and length, specials included; where the CPU has no AVX512-BF16 it is round_to_bf16 itself.
TEST(Bf16Round, StreamedEqualsPlainAtEveryAlignment) {
  Rng rng(5);
  std::vector<float> x(300);
  for (float& v : x) v = static_cast<float>(rng.normal() * std::exp(5 * rng.normal()));
  x[7] = std::numeric_limits<float>::quiet_NaN(), x[40] = 1e-40f, x[41] = -3.4e38f;
  for (int offset = 0; offset < 17; ++offset)
    for (long n : {0L, 1L, 15L, 16L, 17L, 40L, 250L}) {
      std::vector<uint16_t> plain(320, 1), streamed(320, 1);
      round_to_bf16(x.data() + offset, plain.data() + offset, n);
      round_to_bf16_streamed(x.data() + offset, streamed.data() + offset, n);
      EXPECT_EQ(streamed, plain) << "offset " << offset << ", n " << n;
    }
}

class Bf16Gemm : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16Gemm, MatchesDoubleProductOfRoundedOperands) {
  SKIP_WITHOUT_BF16();
  blocklab::testing::expect_matches_reference(
      GetParam(), [](auto... args) { return bf16_gemm(args...); }, bf16_round);
}

// 30x1100x520 and 100x530x520: several column blocks (the latter with two row blocks and two K-chunks in each).
INSTANTIATE_TEST_SUITE_P(Shapes, Bf16Gemm,
                         ::testing::Values(Case{1, 1, 1}, Case{12, 32, 8}, Case{13, 33, 17}, Case{5, 7, 300},
                                           Case{100, 70, 257}, Case{197, 129, 128}, Case{64, 384, 520},
                                           Case{2, 40, 511}, Case{30, 1100, 520}, Case{100, 530, 520}),
                         [](const auto& info) {
                           return std::to_string(info.param.M) + "x" + std::to_string(info.param.N) + "x" +
                                  std::to_string(info.param.K);
                         });

// The bias is added in float after the product, the row sums of op(A) are the float values summed in k
// order (equal to sgemm's bit for bit), and every C element reaches the callback exactly once.
// N = 1100: the columns go in several blocks (each block's packed B stays in L2), whose row sums count once.
TEST(Bf16Gemm, BiasRowSumsAndBlockCallbacks) {
  SKIP_WITHOUT_BF16();
  const int M = 77, K = 300;
  Rng rng(9);
  for (int N : {70, 1100})
  for (int ta = 0; ta < 2; ++ta) {
    const auto A = random_floats(rng, static_cast<size_t>(M) * K), B = random_floats(rng, static_cast<size_t>(K) * N);
    const auto bias = random_floats(rng, N);
    const int lda = ta ? M : K;
    std::vector<float> plain(static_cast<size_t>(M) * N), with_bias(plain.size());
    ASSERT_TRUE(bf16_gemm(ta, false, M, N, K, A.data(), lda, B.data(), N, 0.f, plain.data(), N));
    BlockCount blocks(M, N);
    std::vector<float> sums(M, 0.5f), sums_sgemm(M, 0.5f);
    SgemmExtras extras{.bias = bias.data(), .a_row_sums = sums.data(), .on_block_done = BlockCount::callback, .context = &blocks};
    ASSERT_TRUE(bf16_gemm(ta, false, M, N, K, A.data(), lda, B.data(), N, 0.f, with_bias.data(), N, extras));
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        const size_t at = static_cast<size_t>(i) * N + j;
        EXPECT_EQ(with_bias[at], plain[at] + bias[j]);
        EXPECT_EQ(blocks.covered[at], 1);
      }
    if (ta) {  // row sums are taken where op(A) is packed transposed (a linear layer's bias gradient)
      std::vector<float> unused(plain.size());
      ASSERT_TRUE(sgemm(true, false, M, N, K, A.data(), lda, B.data(), N, 0.f, unused.data(), N,
                        {.a_row_sums = sums_sgemm.data()}));
      EXPECT_EQ(sums, sums_sgemm);
      double s = 0.5;
      for (int k = 0; k < K; ++k) s += A[static_cast<size_t>(k) * lda];
      EXPECT_NEAR(sums[0], s, 1e-4);
    }
  }
}

TEST(Bf16Gemm, ResultsDoNotDependOnTheThreadCount) {
  SKIP_WITHOUT_BF16();
  Rng rng(5);
  // tall (rows split across threads), wide (columns split), and a transposed A with row sums
  for (const Case c : {Case{500, 130, 300}, Case{30, 700, 260}, Case{384, 128, 2016}}) {
    for (int ta = 0; ta < 2; ++ta) {
      const auto A = random_floats(rng, static_cast<size_t>(c.M) * c.K);
      const auto B = random_floats(rng, static_cast<size_t>(c.K) * c.N);
      auto run = [&](int threads) {
        set_num_threads(threads);
        std::vector<float> C(static_cast<size_t>(c.M) * c.N, 1.f), sums(c.M, 0.f);
        EXPECT_TRUE(bf16_gemm(ta, true, c.M, c.N, c.K, A.data(), ta ? c.M : c.K, B.data(), c.K, 1.f, C.data(), c.N,
                              {.a_row_sums = sums.data()}));
        C.insert(C.end(), sums.begin(), sums.end());
        return C;
      };
      const auto one = run(1);
      EXPECT_EQ(one, run(2)) << c.M << "x" << c.N << "x" << c.K << " ta " << ta;
      EXPECT_EQ(one, run(3)) << c.M << "x" << c.N << "x" << c.K << " ta " << ta;
    }
  }
  set_num_threads(0);
}

// Without the bf16 kernel (no AVX512-BF16, or BLOCKLAB_GEMM=fp32), bf16_gemm declines and sgemm_in runs
// the float product; the description names the reason.
TEST(Bf16Gemm, FallsBackToFloatWithAReason) {
  const std::string description = bf16_isa_description();
  if (have_bf16()) {
    // AMX-BF16 with oneDNN in the build runs oneDNN's kernels (Intel Xeon from Sapphire Rapids on)
    const char* prefix = bf16_isa() == Bf16Isa::NeonBf16 ? "neon_bf16 ("
                         : bf16_isa() == Bf16Isa::OneDnn ? "onednn: "
                                                          : "avx512_bf16 (";
    EXPECT_EQ(description.rfind(prefix, 0), 0u) << description;
  } else {
    EXPECT_EQ(description.rfind("fp32 (", 0), 0u) << description;
    float a = 1.5f, b = 2.0f, c = 0.f;
    EXPECT_FALSE(bf16_gemm(false, false, 1, 1, 1, &a, 1, &b, 1, 0.f, &c, 1));
  }
#if defined(__x86_64__)
  EXPECT_NE(description.find(cpu_has_amx_bf16() ? "AMX-BF16 present" : "no AMX on this CPU"), std::string::npos)
      << description;
#endif
  // a value bf16 cannot hold: the float path keeps it, the bf16 path rounds it
  float a = 1.0f + 0x1p-10f, b = 1.0f, c = 0.f;
  ASSERT_TRUE(sgemm_in(GemmPrecision::Fp32, false, false, 1, 1, 1, &a, 1, &b, 1, 0.f, &c, 1));
  EXPECT_EQ(c, a);
  if (sgemm_isa() != SgemmIsa::None) {
    ASSERT_TRUE(sgemm_in(GemmPrecision::Bf16, false, false, 1, 1, 1, &a, 1, &b, 1, 0.f, &c, 1));
    EXPECT_EQ(c, have_bf16() ? 1.0f : a);
  }
}

// The bf16 peak's loop computes what it times: every lane of every chain adds two products of 2^-7 * 2^-7 per
// step, exactly representable, so after s steps the stored sum of the chains is chains * 2s * 2^-14 in each lane.
TEST(Bf16Peak, DotLoopAddsTwoProductsPerLaneAndChain) {
  alignas(64) float sink[16];
  const long macs = bf16_dot_loop(0, sink);
  if (macs == 0) {
    EXPECT_STREQ(bf16_dot_instruction(), "");
    EXPECT_EQ(measure_bf16_peak(1, 0.01).gflops, 0.0);
    GTEST_SKIP() << "no bf16 dot instruction on this CPU (" << bf16_isa_description() << ")";
  }
  const int chains = bf16_dot_chains();
  const int lanes = static_cast<int>(macs / chains / 2);
  EXPECT_EQ(lanes, std::string(bf16_dot_instruction()) == "vdpbf16ps" ? 16 : 4);
  for (long steps : {1L, 7L, 100L}) {
    ASSERT_EQ(bf16_dot_loop(steps, sink), macs);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(sink[i], static_cast<float>(chains * 2 * steps) * 0x1p-14f) << steps;
  }
  const FmaPeak peak = measure_bf16_peak(1, 0.01);
  EXPECT_EQ(peak.products, 2);
  EXPECT_EQ(peak.lanes, lanes);
  EXPECT_EQ(peak.chains, chains);
  EXPECT_GT(peak.gflops, 0.0);
}
