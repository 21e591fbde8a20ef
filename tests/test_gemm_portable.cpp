// The portable GEMM (kernels/gemm.h), which serves builds without OpenBLAS (the browser's wasm build): the float
// product against the double-precision reference for every transpose; double with any alpha and beta against
// a triple loop, beta = 0 ignoring NaN in C as BLAS does; the same bits for any thread count; and gemm<double>,
// whichever backend this build has, agreeing with it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gemm_reference.h"
#include "gradcheck.h"
#include "kernels/gemm.h"
#include "util/rng.h"
#include "util/threads.h"

namespace {

using namespace blocklab;
using namespace blocklab::kernels;
using Case = blocklab::testing::GemmCase;
using blocklab::testing::random_vector;

class PortableGemm : public ::testing::TestWithParam<Case> {};

TEST_P(PortableGemm, FloatMatchesDoubleReferenceForAllTransposes) {
  blocklab::testing::expect_matches_reference(GetParam(), [](bool ta, bool tb, int M, int N, int K, const float* A,
                                                             int lda, const float* B, int ldb, float beta, float* C,
                                                             int ldc) {
    portable_gemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
    return true;
  });
}

// C = alpha op(A) op(B) + beta C by the definition.
void triple_loop(bool ta, bool tb, int M, int N, int K, double alpha, const std::vector<double>& A, int lda,
                 const std::vector<double>& B, int ldb, double beta, std::vector<double>& C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      double& c = C[i * ldc + j];
      c = beta == 0 ? alpha * s : alpha * s + beta * c;
    }
}

TEST_P(PortableGemm, DoubleWithAnyAlphaAndBetaMatchesTheDefinition) {
  const auto [M, N, K] = GetParam();
  Rng rng(5);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const auto& [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{-0.5, 1.0}, std::pair{2.0, 2.5}}) {
        const int lda = ta ? M + 1 : K + 2, ldb = tb ? K + 3 : N + 1, ldc = N + 2;
        const auto A = random_vector(rng, static_cast<size_t>(ta ? K : M) * lda, 1.0);
        const auto B = random_vector(rng, static_cast<size_t>(tb ? N : K) * ldb, 1.0);
        auto C = random_vector(rng, static_cast<size_t>(M) * ldc, 1.0);
        if (beta == 0) std::fill(C.begin(), C.end(), std::numeric_limits<double>::quiet_NaN());
        auto expected = C;
        triple_loop(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, expected, ldc);
        portable_gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            const double want = expected[i * ldc + j], got = C[i * ldc + j];
            ASSERT_NEAR(got, want, 1e-12 * (1 + std::abs(want)))
                << "ta " << ta << " tb " << tb << " alpha " << alpha << " beta " << beta << " at " << i << "," << j;
          }
        for (int i = 0; i < M; ++i)  // the padding between N and ldc untouched
          for (int j = N; j < ldc; ++j) {
            if (beta == 0)
              EXPECT_TRUE(std::isnan(C[i * ldc + j]));
            else
              EXPECT_EQ(C[i * ldc + j], expected[i * ldc + j]);
          }
      }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PortableGemm,
                         ::testing::Values(Case{1, 1, 1}, Case{13, 33, 17}, Case{5, 7, 300}, Case{64, 96, 40}),
                         [](const auto& info) {
                           return std::to_string(info.param.M) + "x" + std::to_string(info.param.N) + "x" +
                                  std::to_string(info.param.K);
                         });

TEST(PortableGemmThreads, ResultIsIndependentOfThreadCount) {
  Rng rng(3);
  const int M = 150, N = 70, K = 300;
  const auto A = random_vector(rng, static_cast<size_t>(K) * M, 1.0);
  const auto B = random_vector(rng, static_cast<size_t>(N) * K, 1.0);
  std::vector<double> one(static_cast<size_t>(M) * N), two(one.size());
  set_num_threads(1);
  portable_gemm(true, true, M, N, K, 1.0, A.data(), M, B.data(), K, 0.0, one.data(), N);
  set_num_threads(2);
  portable_gemm(true, true, M, N, K, 1.0, A.data(), M, B.data(), K, 0.0, two.data(), N);
  set_num_threads(0);
  EXPECT_EQ(one, two);
}

TEST(Gemm, DoubleAgreesWithThePortableProductWhateverTheBackend) {
  std::printf("gemm<double> runs %s in this build\n", have_blas() ? "OpenBLAS" : "the portable GEMM");
  Rng rng(9);
  const int M = 40, N = 30, K = 50;
  const auto A = random_vector(rng, static_cast<size_t>(M) * K, 1.0);
  const auto B = random_vector(rng, static_cast<size_t>(K) * N, 1.0);
  std::vector<double> via_gemm(static_cast<size_t>(M) * N, 1.0), portable = via_gemm;
  gemm(false, false, M, N, K, 0.5, A.data(), K, B.data(), N, 2.0, via_gemm.data(), N);
  portable_gemm(false, false, M, N, K, 0.5, A.data(), K, B.data(), N, 2.0, portable.data(), N);
  for (size_t i = 0; i < portable.size(); ++i)
    ASSERT_NEAR(via_gemm[i], portable[i], 1e-12 * (1 + std::abs(portable[i])));
}

}  // namespace
