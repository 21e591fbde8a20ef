// blocklab's own sgemm against a double-precision reference, for every transpose combination, edge
// sizes that exercise partial register tiles and K-chunks, and thread-count independence.
#include <gtest/gtest.h>

#include <cmath>

#include "gemm_reference.h"
#include "kernels/sgemm.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::kernels;

using blocklab::testing::random_floats;
using Case = blocklab::testing::GemmCase;

class Sgemm : public ::testing::TestWithParam<Case> {};

TEST_P(Sgemm, MatchesDoubleReferenceForAllTransposes) {
  if (sgemm_isa() == SgemmIsa::None) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU: BLAS is used instead";
  blocklab::testing::expect_matches_reference(GetParam(), [](auto... args) { return sgemm(args...); });
}

INSTANTIATE_TEST_SUITE_P(Shapes, Sgemm,
                         ::testing::Values(Case{1, 1, 1}, Case{12, 32, 8}, Case{13, 33, 17}, Case{5, 7, 300},
                                           Case{100, 70, 257}, Case{197, 129, 128}, Case{64, 384, 520}),
                         [](const auto& info) {
                           return std::to_string(info.param.M) + "x" + std::to_string(info.param.N) + "x" +
                                  std::to_string(info.param.K);
                         });

TEST(SgemmThreads, ResultIsIndependentOfThreadCount) {
  if (sgemm_isa() == SgemmIsa::None) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU: BLAS is used instead";
  Rng rng(3);
  const int M = 300, N = 200, K = 600;
  const auto A = random_floats(rng, static_cast<size_t>(K) * M);
  const auto B = random_floats(rng, static_cast<size_t>(K) * N);
  std::vector<float> one(static_cast<size_t>(M) * N), two(one.size());
  set_num_threads(1);
  sgemm(true, false, M, N, K, A.data(), M, B.data(), N, 0.f, one.data(), N);
  set_num_threads(2);
  sgemm(true, false, M, N, K, A.data(), M, B.data(), N, 0.f, two.data(), N);
  set_num_threads(0);
  EXPECT_EQ(one, two);
}

// The bias and the row sums folded into the product equal separate passes bit for bit, for both layouts
// of A, full and partial register tiles, several K-chunks, and 1 or 2 threads.
TEST(SgemmExtras, BiasAndRowSumsEqualSeparatePassesBitForBit) {
  if (sgemm_isa() == SgemmIsa::None) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU: BLAS is used instead";
  Rng rng(11);
  for (const Case shape : {Case{197, 129, 600}, Case{24, 64, 40}, Case{5, 3, 7}})
    for (int ta = 0; ta < 2; ++ta)
      for (int threads : {1, 2}) {
        const auto [M, N, K] = shape;
        const int lda = ta ? M : K;
        const auto A = random_floats(rng, static_cast<size_t>(M) * K);
        const auto B = random_floats(rng, static_cast<size_t>(K) * N);
        const auto bias = random_floats(rng, N);
        const auto sums_before = random_floats(rng, M);
        set_num_threads(threads);
        std::vector<float> plain(static_cast<size_t>(M) * N), folded(plain.size());
        std::vector<float> sums = sums_before;
        ASSERT_TRUE(sgemm(ta, false, M, N, K, A.data(), lda, B.data(), N, 0.f, plain.data(), N));
        ASSERT_TRUE(sgemm(ta, false, M, N, K, A.data(), lda, B.data(), N, 0.f, folded.data(), N,
                          {.bias = bias.data(), .a_row_sums = sums.data()}));
        set_num_threads(0);
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) plain[static_cast<size_t>(i) * N + j] += bias[j];
        EXPECT_EQ(plain, folded) << M << "x" << N << "x" << K << " ta " << ta << " threads " << threads;
        for (int i = 0; i < M; ++i) {
          float s = 0.f;  // in k order from zero, then added: the order the fold promises
          for (int k = 0; k < K; ++k) s += ta ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
          ASSERT_EQ(sums_before[i] + s, sums[i]) << "row " << i << " of " << M << "x" << N << "x" << K << " ta " << ta;
        }
      }
}
