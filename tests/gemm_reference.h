#pragma once
// What the GEMM tests share: random operands, the double-precision reference product with the error scale
// each element's rounding errors grow with, and the check of a GEMM against it for every transpose.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "util/rng.h"

namespace blocklab::testing {

struct GemmCase {
  int M, N, K;
};

inline std::vector<float> random_floats(Rng& rng, std::size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// C = op(A) op(B) + beta C in double, every operand element passed through `operand` first (the identity
// for the float GEMM, bf16 rounding for the bf16 one); scale[i,j] = sum_k |a b| + |beta c|, the size float
// accumulation errors scale with.
template <class Operand>
void gemm_reference(bool ta, bool tb, int M, int N, int K, const std::vector<float>& A, int lda,
                    const std::vector<float>& B, int ldb, float beta, std::vector<double>& C, std::vector<double>& scale,
                    int ldc, Operand operand) {
  scale.assign(C.size(), 0.0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0, s_abs = 0;
      for (int k = 0; k < K; ++k) {
        const double a = operand(ta ? A[static_cast<std::size_t>(k) * lda + i] : A[static_cast<std::size_t>(i) * lda + k]);
        const double b = operand(tb ? B[static_cast<std::size_t>(j) * ldb + k] : B[static_cast<std::size_t>(k) * ldb + j]);
        s += a * b;
        s_abs += std::abs(a * b);
      }
      const std::size_t at = static_cast<std::size_t>(i) * ldc + j;
      scale[at] = s_abs + std::abs(beta * C[at]);
      C[at] = s + beta * C[at];
    }
}

inline void gemm_reference(bool ta, bool tb, int M, int N, int K, const std::vector<float>& A, int lda,
                           const std::vector<float>& B, int ldb, float beta, std::vector<double>& C,
                           std::vector<double>& scale, int ldc) {
  gemm_reference(ta, tb, M, N, K, A, lda, B, ldb, beta, C, scale, ldc, [](float x) { return x; });
}

// A GEMM under test, called as sgemm is (without extras); false when it declines the product.
using GemmUnderTest = std::function<bool(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
                                         int ldb, float beta, float* C, int ldc)>;

// Checks `gemm` on an M x N x K product for every transpose combination and beta in {0, 1}, with padded
// leading dimensions, against the double-precision product of the operands passed through `operand`
// (nullptr: the floats themselves; bf16_round for a bf16 GEMM). Each element's error, relative to the size
// its float accumulation errors scale with, stays below 1e-5 (a dropped or doubled term would be ~1/K);
// with rounded operands the result must also differ from the unrounded product by bf16's rounding (so the
// rounding really happened); the padding columns between N and ldc are left untouched. `dense`: leading
// dimensions without padding (C's is N) instead.
inline void expect_matches_reference(const GemmCase& shape, const GemmUnderTest& gemm,
                                     float (*operand)(float) = nullptr, bool dense = false) {
  const auto [M, N, K] = shape;
  Rng rng(static_cast<std::uint64_t>(M) * 131 + N * 7 + K);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.f, 1.f}) {
        const std::string what = "ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " beta " + std::to_string(beta);
        const int pad = dense ? 0 : 1;
        const int lda = (ta ? M : K) + (ta ? 3 : 1) * pad, ldb = (tb ? K : N) + (tb ? 2 : 5) * pad, ldc = N + 4 * pad;
        const auto A = random_floats(rng, static_cast<std::size_t>(ta ? K : M) * lda);
        const auto B = random_floats(rng, static_cast<std::size_t>(tb ? N : K) * ldb);
        auto C = random_floats(rng, static_cast<std::size_t>(M) * ldc);
        std::vector<double> expected(C.begin(), C.end()), unrounded(C.begin(), C.end()), scale, unused;
        if (operand) {
          gemm_reference(ta, tb, M, N, K, A, lda, B, ldb, beta, expected, scale, ldc, operand);
          gemm_reference(ta, tb, M, N, K, A, lda, B, ldb, beta, unrounded, unused, ldc);
        } else {
          gemm_reference(ta, tb, M, N, K, A, lda, B, ldb, beta, expected, scale, ldc);
        }
        ASSERT_TRUE(gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc)) << what;
        double worst = 0, worst_unrounded = 0;
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            const std::size_t at = static_cast<std::size_t>(i) * ldc + j;
            worst = std::max(worst, std::abs(C[at] - expected[at]) / scale[at]);
            if (operand) worst_unrounded = std::max(worst_unrounded, std::abs(C[at] - unrounded[at]) / scale[at]);
          }
        EXPECT_LT(worst, 1e-5) << what;
        if (operand && K >= 8) {
          EXPECT_GT(worst_unrounded, 1e-4) << "operands not rounded: " << what;
        }
        for (int i = 0; i < M; ++i)
          for (int j = N; j < ldc; ++j) {
            const std::size_t at = static_cast<std::size_t>(i) * ldc + j;
            EXPECT_EQ(static_cast<double>(C[at]), expected[at]) << "padding column " << j << " written: " << what;
          }
      }
}

// A per-block callback for the GEMM extras that counts how often each element of an M x N C was handed
// over (each must be exactly once), and notes any block over `max_rows` rows or not starting at a multiple
// of `column_step` columns (0: no shape check). Safe to call from several threads.
struct BlockCount {
  std::vector<int> covered;
  int N;
  int max_rows = 0, column_step = 0;
  bool shapes_ok = true;
  BlockCount(int M, int N_, int max_rows_ = 0, int column_step_ = 0)
      : covered(static_cast<std::size_t>(M) * N_, 0), N(N_), max_rows(max_rows_), column_step(column_step_) {}
  static void callback(void* context, int i0, int rows, int j0, int cols) {
    auto* b = static_cast<BlockCount*>(context);
    if ((b->max_rows && rows > b->max_rows) ||
        (b->column_step && (j0 % b->column_step != 0 || (cols % b->column_step != 0 && j0 + cols != b->N))))
    {
#pragma omp atomic write
      b->shapes_ok = false;
    }
    for (int i = i0; i < i0 + rows; ++i)
      for (int j = j0; j < j0 + cols; ++j) {
#pragma omp atomic
        ++b->covered[static_cast<std::size_t>(i) * b->N + j];
      }
  }
};

}  // namespace blocklab::testing
