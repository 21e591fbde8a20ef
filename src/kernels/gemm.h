#pragma once
// The general matrix product, row-major: C = alpha * op(A) @ op(B) + beta * C, op(A) (M,K), op(B) (K,N),
// C (M,N). float goes to blocklab's own sgemm (kernels/sgemm.h) where it applies (alpha = 1, beta 0 or 1, a
// micro-kernel for the running level); double, and float where sgemm does not apply, go to BLAS (OpenBLAS) in
// builds that have it and to portable_gemm in builds without it (the browser's wasm build). The double path
// exists so that gradients can be checked against finite differences in double precision.
namespace blocklab::kernels {

template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
          int ldb, T beta, T* C, int ldc);

// The same product in plain C++, for any alpha and beta (beta = 0 ignores C's old values, NaN included, as
// BLAS does). Rows of C in parallel; each element is summed over k in order 0..K-1 whatever the thread count.
template <typename T>
void portable_gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
                   int ldb, T beta, T* C, int ldc);

// Whether this build has BLAS (OpenBLAS) behind gemm.
bool have_blas();

}  // namespace blocklab::kernels
