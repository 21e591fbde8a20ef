// The bf16 GEMM through oneDNN (the AMX path): against a double-precision product of the operands rounded
// to bf16 for every transpose and tile edge, the extras (bias added last, row sums, callbacks covering C
// once), and bit-identical results for any thread count and inside a parallel region. Skips, saying why,
// where the build has no oneDNN.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "gemm_reference.h"
#include "kernels/bf16_gemm.h"
#include "kernels/bf16_onednn.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::kernels;
using blocklab::testing::gemm_reference;
using blocklab::testing::random_floats;
using Case = blocklab::testing::GemmCase;

#define SKIP_WITHOUT_ONEDNN() \
  if (!onednn_available()) GTEST_SKIP() << onednn_description()

class OneDnnBf16Gemm : public ::testing::TestWithParam<Case> {};

TEST_P(OneDnnBf16Gemm, MatchesDoubleProductOfRoundedOperands) {
  SKIP_WITHOUT_ONEDNN();
  const auto [M, N, K] = GetParam();
  Rng rng(M * 131 + N * 7 + K);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.f, 1.f}) {
        const int lda = ta ? M + 3 : K + 1, ldb = tb ? K + 2 : N + 5, ldc = N + 4;  // padded leading dims
        const auto A = random_floats(rng, static_cast<size_t>(ta ? K : M) * lda);
        const auto B = random_floats(rng, static_cast<size_t>(tb ? N : K) * ldb);
        auto C = random_floats(rng, static_cast<size_t>(M) * ldc);
        std::vector<double> expected(C.begin(), C.end()), unrounded(C.begin(), C.end()), scale, unused;
        gemm_reference(ta, tb, M, N, K, A, lda, B, ldb, beta, expected, scale, ldc, bf16_round);
        gemm_reference(ta, tb, M, N, K, A, lda, B, ldb, beta, unrounded, unused, ldc);
        ASSERT_TRUE(onednn_bf16_gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc));
        double worst = 0, worst_unrounded = 0;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            const size_t at = static_cast<size_t>(i) * ldc + j;
            worst = std::max(worst, std::abs(C[at] - expected[at]) / scale[at]);
            worst_unrounded = std::max(worst_unrounded, std::abs(C[at] - unrounded[at]) / scale[at]);
          }
        EXPECT_LT(worst, 1e-5) << "ta " << ta << " tb " << tb << " beta " << beta;
        if (K >= 8) {
          EXPECT_GT(worst_unrounded, 1e-4) << "operands not rounded to bf16: ta " << ta << " tb " << tb;
        }
        for (int i = 0; i < M; ++i)  // padding columns between N and ldc are untouched
          for (int j = N; j < ldc; ++j)
            EXPECT_EQ(static_cast<double>(C[static_cast<size_t>(i) * ldc + j]), expected[static_cast<size_t>(i) * ldc + j]);
      }
}

// Tile edges: 64-row tiles below M = 768 and 96-row ones from it, 512-column tiles above N = 512.
INSTANTIATE_TEST_SUITE_P(Shapes, OneDnnBf16Gemm,
                         ::testing::Values(Case{1, 1, 1}, Case{13, 33, 17}, Case{65, 70, 257}, Case{130, 600, 40},
                                           Case{800, 40, 130}, Case{2, 1030, 9}),
                         [](const auto& info) {
                           return std::to_string(info.param.M) + "x" + std::to_string(info.param.N) + "x" +
                                  std::to_string(info.param.K);
                         });

namespace {
struct Blocks {
  std::vector<int> covered;
  int N;
  bool shapes_ok = true;
};
void count_block(void* context, int i0, int rows, int j0, int cols) {
  auto* b = static_cast<Blocks*>(context);
  if (rows > 96 || j0 % 32 != 0 || (cols % 32 != 0 && j0 + cols != b->N)) b->shapes_ok = false;
  for (int i = i0; i < i0 + rows; ++i)
    for (int j = j0; j < j0 + cols; ++j) {
#pragma omp atomic
      ++b->covered[static_cast<size_t>(i) * b->N + j];
    }
}
}  // namespace

TEST(OneDnnBf16Gemm, BiasRowSumsAndBlockCallbacks) {
  SKIP_WITHOUT_ONEDNN();
  const int M = 200, N = 600, K = 70;
  Rng rng(9);
  for (int ta = 0; ta < 2; ++ta) {
    const auto A = random_floats(rng, static_cast<size_t>(M) * K), B = random_floats(rng, static_cast<size_t>(K) * N);
    const auto bias = random_floats(rng, N);
    const int lda = ta ? M : K;
    std::vector<float> plain(static_cast<size_t>(M) * N), with_bias(plain.size());
    ASSERT_TRUE(onednn_bf16_gemm(ta, false, M, N, K, A.data(), lda, B.data(), N, 0.f, plain.data(), N));
    Blocks blocks{std::vector<int>(plain.size(), 0), N};
    std::vector<float> sums(M, 0.5f);
    SgemmExtras extras{.bias = bias.data(), .a_row_sums = sums.data(), .on_block_done = count_block, .context = &blocks};
    ASSERT_TRUE(onednn_bf16_gemm(ta, false, M, N, K, A.data(), lda, B.data(), N, 0.f, with_bias.data(), N, extras));
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        const size_t at = static_cast<size_t>(i) * N + j;
        ASSERT_EQ(with_bias[at], plain[at] + bias[j]) << i << "," << j;  // added after the product, in float
        ASSERT_EQ(blocks.covered[at], 1) << i << "," << j;
      }
    EXPECT_TRUE(blocks.shapes_ok) << "a block of more than 96 rows, or not starting at a multiple of 32 columns";
    for (int i = 0; i < M; ++i) {
      float s = 0.f;
      for (int k = 0; k < K; ++k) s += ta ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
      EXPECT_EQ(sums[i], 0.5f + s) << "row " << i;
    }
  }
}

TEST(OneDnnBf16Gemm, ResultsDoNotDependOnTheThreadCount) {
  SKIP_WITHOUT_ONEDNN();
  Rng rng(5);
  for (const Case c : {Case{500, 130, 300}, Case{128, 512, 2016}, Case{2016, 384, 128}}) {
    for (int ta = 0; ta < 2; ++ta) {
      const auto A = random_floats(rng, static_cast<size_t>(c.M) * c.K);
      const auto B = random_floats(rng, static_cast<size_t>(c.K) * c.N);
      const int lda = ta ? c.M : c.K;
      auto product = [&](int threads) {
        set_num_threads(threads);
        std::vector<float> C(static_cast<size_t>(c.M) * c.N);
        EXPECT_TRUE(onednn_bf16_gemm(ta, false, c.M, c.N, c.K, A.data(), lda, B.data(), c.N, 0.f, C.data(), c.N));
        return C;
      };
      const auto one = product(1);
      EXPECT_EQ(one, product(2)) << c.M << "x" << c.N << "x" << c.K;
      EXPECT_EQ(one, product(3)) << c.M << "x" << c.N << "x" << c.K;
      std::vector<float> nested(one.size());
      set_num_threads(2);
#pragma omp parallel num_threads(2)
      {
        if (omp_get_thread_num() == 0)
          onednn_bf16_gemm(ta, false, c.M, c.N, c.K, A.data(), lda, B.data(), c.N, 0.f, nested.data(), c.N);
      }
      EXPECT_EQ(one, nested) << "called inside a parallel region";
    }
  }
  set_num_threads(0);
}

// Where the CPU has AVX512-BF16, blocklab's own kernel and oneDNN multiply the same rounded operands: the
// results differ only by the order of the float sums.
TEST(OneDnnBf16Gemm, AgreesWithBlocklabsKernel) {
  SKIP_WITHOUT_ONEDNN();
  if (bf16_isa() != Bf16Isa::Avx512Bf16) GTEST_SKIP() << "blocklab's bf16 kernel does not run here: " << bf16_isa_description();
  const int M = 2016, N = 128, K = 512;
  Rng rng(3);
  const auto A = random_floats(rng, static_cast<size_t>(M) * K), B = random_floats(rng, static_cast<size_t>(N) * K);
  std::vector<float> ours(static_cast<size_t>(M) * N), theirs(ours.size());
  ASSERT_TRUE(bf16_gemm(false, true, M, N, K, A.data(), K, B.data(), K, 0.f, ours.data(), N));
  ASSERT_TRUE(onednn_bf16_gemm(false, true, M, N, K, A.data(), K, B.data(), K, 0.f, theirs.data(), N));
  double worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - theirs[i]));
  EXPECT_LT(worst, 1e-3) << "largest difference (entries are sums of 512 products of N(0,1) values, ~22 in size)";
}
