#include "kernels/gemm.h"

#include <algorithm>
#include <vector>

#ifndef BLOCKLAB_HAVE_OPENBLAS
#define BLOCKLAB_HAVE_OPENBLAS 0  // set by CMake on this file where OpenBLAS is found
#endif
#if BLOCKLAB_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "kernels/sgemm.h"

namespace blocklab::kernels {

template <typename T>
void portable_gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
                   int ldb, T beta, T* C, int ldc) {
#pragma omp parallel
  {
    std::vector<T> a_row(static_cast<size_t>(K)), c_row(static_cast<size_t>(N));
#pragma omp for schedule(static)
    for (int i = 0; i < M; ++i) {
      // op(A)'s row i, contiguous
      for (int k = 0; k < K; ++k)
        a_row[k] = trans_a ? A[static_cast<long>(k) * lda + i] : A[static_cast<long>(i) * lda + k];
      if (trans_b) {  // op(B)[k][j] = B[j][k]: a dot product of two contiguous rows per element
        for (int j = 0; j < N; ++j) {
          const T* b = B + static_cast<long>(j) * ldb;
          T sum = 0;
          for (int k = 0; k < K; ++k) sum += a_row[k] * b[k];
          c_row[j] = sum;
        }
      } else {  // rows of B scaled and added: every c_row[j] still sums over k in order
        std::fill(c_row.begin(), c_row.end(), T(0));
        for (int k = 0; k < K; ++k) {
          const T a = a_row[k];
          const T* b = B + static_cast<long>(k) * ldb;
          for (int j = 0; j < N; ++j) c_row[j] += a * b[j];
        }
      }
      T* c = C + static_cast<long>(i) * ldc;
      for (int j = 0; j < N; ++j) c[j] = beta == T(0) ? alpha * c_row[j] : alpha * c_row[j] + beta * c[j];
    }
  }
}

template <>
void gemm<float>(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  if (alpha == 1.f && sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc)) return;
#if BLOCKLAB_HAVE_OPENBLAS
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  portable_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
                  const double* B, int ldb, double beta, double* C, int ldc) {
#if BLOCKLAB_HAVE_OPENBLAS
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  portable_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

bool have_blas() { return BLOCKLAB_HAVE_OPENBLAS != 0; }

template void portable_gemm<float>(bool, bool, int, int, int, float, const float*, int, const float*, int, float,
                                   float*, int);
template void portable_gemm<double>(bool, bool, int, int, int, double, const double*, int, const double*, int,
                                    double, double*, int);

}  // namespace blocklab::kernels
