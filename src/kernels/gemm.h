#pragma once
// Thin typed wrapper over BLAS gemm (row-major): C = alpha * op(A) @ op(B) + beta * C,
// op(A) (M,K), op(B) (K,N), C (M,N). float -> sgemm, double -> dgemm (the double path exists so
// that gradients can be checked against finite differences in double precision).
namespace blocklab::kernels {

template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
          int ldb, T beta, T* C, int ldc);

}  // namespace blocklab::kernels
