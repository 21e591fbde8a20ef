// blocklab's own sgemm against a double-precision reference, for every transpose combination, edge
// sizes that exercise partial register tiles and K-chunks, and thread-count independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "gemm_reference.h"
#include "kernels/adam.h"
#include "kernels/bf16_gemm.h"
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

// A row's sum of squares taken in pieces of whole 8-column groups (a GEMM's column blocks) is sum_of_squares of the
// row bit for bit, whatever the pieces.
TEST(SumOfSquares, PiecesOfARowGiveTheWholeRowsBits) {
  Rng rng(17);
  const auto row = random_floats(rng, 1003);
  const double whole = sum_of_squares(row.data(), 1003);
  for (const int piece : {8, 24, 40, 768, 1003}) {
    double lanes[kSquareLanes] = {};
    for (int j0 = 0; j0 < 1003; j0 += piece) add_squares(lanes, row.data() + j0, std::min(piece, 1003 - j0), j0);
    EXPECT_EQ(lanes_total(lanes), whole) << "pieces of " << piece;
  }
  // several rows at once (add_squares_rows: four at a time, then one by one), in pieces likewise
  const int rows = 7, cols = 143;
  std::vector<double> lanes(rows * kSquareLanes);
  for (const int piece : {8, 40, 143}) {
    std::fill(lanes.begin(), lanes.end(), 0.0);
    for (int j0 = 0; j0 < cols; j0 += piece)
      add_squares_rows(lanes.data(), row.data() + j0, cols, rows, std::min(piece, cols - j0), j0);
    for (int r = 0; r < rows; ++r)
      EXPECT_EQ(lanes_total(lanes.data() + r * kSquareLanes), sum_of_squares(row.data() + r * cols, cols))
          << "row " << r << ", pieces of " << piece;
  }
  double exact = 0;
  for (const float x : row) exact += static_cast<double>(x) * x;
  EXPECT_NEAR(whole, exact, 1e-13 * exact);
}

// SgemmExtras::c_row_squares: each row's sum of squares of C as the call leaves it, bit for bit sum_of_squares of the
// row, with C itself unchanged by the request (the threads split rows only then): fp32 and bf16, both layouts of A,
// beta 0 and 1, rows in several column blocks (1700 columns: three blocks at AVX-512) and two K-chunks (K = 260), an
// empty K, 1 and 2 threads. (Small shapes: this test also runs under QEMU.)
TEST(SgemmExtras, RowSquaresAreEachRowsSumOfSquares) {
  Rng rng(19);
  for (const GemmPrecision precision : {GemmPrecision::Fp32, GemmPrecision::Bf16})
    for (const Case shape : {Case{24, 1700, 260}, Case{197, 129, 40}, Case{5, 3, 7}, Case{24, 64, 0}})
      for (int ta = 0; ta < 2; ++ta)
        for (const float beta : {0.f, 1.f})
          for (int threads : {1, 2}) {
            const auto [M, N, K] = shape;
            const int lda = ta ? M : std::max(K, 1);
            const auto A = random_floats(rng, static_cast<size_t>(M) * std::max(K, 1));
            const auto B = random_floats(rng, static_cast<size_t>(std::max(K, 1)) * N);
            const auto C0 = random_floats(rng, static_cast<size_t>(M) * N);
            std::vector<float> plain = C0, taken = C0;
            std::vector<double> squares(M, -1.0);
            set_num_threads(threads);
            const bool ran = sgemm_in(precision, ta, false, M, N, K, A.data(), lda, B.data(), N, beta, plain.data(), N);
            const bool ran_too = sgemm_in(precision, ta, false, M, N, K, A.data(), lda, B.data(), N, beta,
                                          taken.data(), N, {.c_row_squares = squares.data()});
            set_num_threads(0);
            if (!ran) GTEST_SKIP() << "no sgemm micro-kernel here: BLAS runs the products (and sums rows in a pass)";
            const std::string where = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " ta " +
                                      std::to_string(ta) + " beta " + std::to_string(beta) + " threads " +
                                      std::to_string(threads) + (precision == GemmPrecision::Bf16 ? " bf16" : " fp32");
            ASSERT_TRUE(ran_too) << where;
            EXPECT_EQ(plain, taken) << where;
            for (int i = 0; i < M; ++i)
              ASSERT_EQ(squares[i], sum_of_squares(taken.data() + static_cast<size_t>(i) * N, N))
                  << "row " << i << where;
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
