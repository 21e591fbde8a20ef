#pragma once
// What the GEMM tests share: random operands and the double-precision reference product with the error
// scale each element's rounding errors grow with.
#include <cmath>
#include <cstddef>
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

}  // namespace blocklab::testing
