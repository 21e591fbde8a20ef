// blocklab's own sgemm against a double-precision reference, for every transpose combination, edge
// sizes that exercise partial register tiles and K-chunks, and thread-count independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "gemm_reference.h"
#include "kernels/isa.h"
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
                                           Case{100, 70, 257}, Case{197, 129, 128}, Case{64, 384, 520},
                                           // more than one column block of the AVX-512 walk (over 24 panels of
                                           // 32), a partial last panel
                                           Case{30, 1000, 300},
                                           // A's rows 1024 floats apart (lda = K + 1): rows copied at AVX-512
                                           Case{25, 40, 1023}),
                         [](const auto& info) {
                           return std::to_string(info.param.M) + "x" + std::to_string(info.param.N) + "x" +
                                  std::to_string(info.param.K);
                         });

// Tall (rows split among threads) and wide (columns split; several column blocks per thread at AVX-512) products,
// every transpose of A and B.
TEST(SgemmThreads, ResultIsIndependentOfThreadCount) {
  if (sgemm_isa() == SgemmIsa::None) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU: BLAS is used instead";
  Rng rng(3);
  for (const auto [M, N, K] : {Case{300, 200, 600}, Case{40, 1700, 300}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const auto A = random_floats(rng, static_cast<size_t>(K) * M);
        const auto B = random_floats(rng, static_cast<size_t>(K) * N);
        std::vector<float> one(static_cast<size_t>(M) * N), two(one.size());
        set_num_threads(1);
        sgemm(ta, tb, M, N, K, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.f, one.data(), N);
        set_num_threads(2);
        sgemm(ta, tb, M, N, K, A.data(), ta ? M : K, B.data(), tb ? K : N, 0.f, two.data(), N);
        set_num_threads(0);
        EXPECT_EQ(one, two) << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb;
      }
}

// The bias and the row sums folded into the product equal separate passes bit for bit, for both layouts
// of A, full and partial register tiles, several K-chunks, several column blocks (1600 columns: two per thread
// at AVX-512 with 2 threads, the row sums taken once), and 1 or 2 threads; on_block_done sees every element of
// C once, in blocks of at most kMc = 96 rows starting at multiples of the register tile's width.
TEST(SgemmExtras, BiasAndRowSumsEqualSeparatePassesBitForBit) {
  if (sgemm_isa() == SgemmIsa::None) GTEST_SKIP() << "no AVX2/AVX-512 on this CPU: BLAS is used instead";
  const int tile_width = sgemm_isa() == SgemmIsa::Avx512 ? 32 : sgemm_isa() == SgemmIsa::Avx2 ? 16 : 8;
  Rng rng(11);
  for (const Case shape : {Case{197, 129, 600}, Case{24, 64, 40}, Case{5, 3, 7}, Case{40, 1600, 300}})
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
        blocklab::testing::BlockCount blocks(M, N, 96, tile_width);
        ASSERT_TRUE(sgemm(ta, false, M, N, K, A.data(), lda, B.data(), N, 0.f, folded.data(), N,
                          {.bias = bias.data(),
                           .a_row_sums = sums.data(),
                           .on_block_done = blocklab::testing::BlockCount::callback,
                           .context = &blocks}));
        set_num_threads(0);
        EXPECT_TRUE(blocks.shapes_ok) << M << "x" << N << "x" << K << " ta " << ta << " threads " << threads;
        EXPECT_EQ(std::count(blocks.covered.begin(), blocks.covered.end(), 1), static_cast<long>(blocks.covered.size()))
            << "elements not handed to on_block_done exactly once: " << M << "x" << N << "x" << K << " ta " << ta;
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

// The AVX-512 walk (column blocks, B always packed, A's rows copied where they alias) changes where operands
// are read from, not what any C element sums or in which order: its results equal the AVX2 kernel's bit for
// bit, bias and row sums included (as kernels/isa.h promises for the levels with FMA).
TEST(SgemmLevels, Avx512AndAvx2GiveTheSameBits) {
  if (cpu_isa() != Isa::Avx512) GTEST_SKIP() << "this CPU runs up to " << isa_name(cpu_isa()) << ", not avx512";
  if (std::getenv("BLOCKLAB_GEMM") != nullptr) GTEST_SKIP() << "BLOCKLAB_GEMM picks the GEMM path";
  Rng rng(13);
  for (const Case shape : {Case{40, 1700, 300}, Case{25, 40, 1023}, Case{13, 33, 17}, Case{252, 96, 768}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int M = shape.M, N = shape.N, K = shape.K;  // plain ints: Clang 14's lambdas cannot capture bindings
        const int lda = ta ? M : K + 1, ldb = tb ? K : N;  // K + 1: rows 1024 floats apart in the second shape
        const auto A = random_floats(rng, static_cast<size_t>(ta ? K : M) * lda);
        const auto B = random_floats(rng, static_cast<size_t>(K) * N);
        const auto bias = random_floats(rng, N);
        auto run = [&](Isa level) {
          const Isa before = set_isa(level);
          std::vector<float> C(static_cast<size_t>(M) * N, 0.5f), sums(M, 0.25f);
          EXPECT_TRUE(sgemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, 1.f, C.data(), N,
                            {.bias = bias.data(), .a_row_sums = ta ? sums.data() : nullptr}));
          set_isa(before);
          C.insert(C.end(), sums.begin(), sums.end());
          return C;
        };
        EXPECT_EQ(run(Isa::Avx512), run(Isa::Avx2)) << M << "x" << N << "x" << K << " ta " << ta << " tb " << tb;
      }
}
