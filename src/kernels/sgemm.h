#pragma once
// blocklab's own single-precision GEMM for the shapes of this workload (tall-skinny: thousands of
// token rows times a few hundred columns), with AVX-512 and AVX2 micro-kernels chosen at run time.
//
//   C (M,N) = op(A) (M,K) @ op(B) (K,N) + beta * C,   row-major, beta in {0, 1}
//
// Classic three-level blocking: B is packed into K-chunks of NR-column panels, A into MR-row panels,
// and an MR x NR register tile accumulates over a K-chunk. Work is split over (row block, column
// block) tiles; every C element is computed by one thread with the same summation order whatever the
// thread count, so results are independent of it.
namespace blocklab::kernels {

enum class SgemmIsa { None, Avx2, Avx512 };

// The best micro-kernel this CPU supports (None: use BLAS). BLOCKLAB_GEMM=blas forces None,
// BLOCKLAB_GEMM=avx2 caps at AVX2.
SgemmIsa sgemm_isa();
const char* sgemm_isa_name(SgemmIsa);

// Returns false (and does nothing) when no micro-kernel is available.
bool sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
           float beta, float* C, int ldc);

}  // namespace blocklab::kernels
