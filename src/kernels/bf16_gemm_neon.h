#pragma once
// The AArch64 half of the bf16 GEMM (bf16_gemm.cpp runs the driver): operands packed as bf16 pairs along k,
// as on x86, and a BFDOT micro-kernel (Armv8.6-A FEAT_BF16: two bf16 products into each float lane) on
// 12 x 8 register tiles. Compiled with the bf16 extension (bf16_gemm_neon.cpp); call only where the CPU
// has it (cpu_has_neon_bf16()).
#include <cstdint>

namespace blocklab::kernels::neon_bf16 {

// Register tile 12 x 8 floats (24 accumulators), K-chunks of 512 (256 bf16 pairs), row blocks of 96.
constexpr int kMr = 12, kNr = 8, kKc = 512, kMc = 96;
constexpr int kPairsPerChunk = kKc / 2;
static_assert(kKc % 2 == 0 && kMc % kMr == 0);

// A not transposed: Ab[r][kp] for rows i0 .. i0+rows over k0 .. k0+kc (kPairsPerChunk words a row); rows up to
// the next multiple of kMr are zero.
void pack_a_rows(uint32_t* Ab, const float* A, int lda, int i0, int rows, int k0, int kc);
// A transposed (stored (K, M)): kMr-row panels Ap[p][kp][r]; with row_sums, also row_sums[i - i0] +=
// op(A)[i][k] in k order, in float.
void pack_a_panels(uint32_t* Ap, const float* A, int lda, int i0, int rows, int k0, int kc, float* row_sums);
// One kNr-column panel of op(B): Bp[kp][j], zero beyond cols.
void pack_b_panel(uint32_t* dst, const float* B, int ldb, bool trans, int j0, int cols, int k0, int kc);
// The peak loop (bf16_dot_loop): kDotChains independent BFDOT chains of 4 float lanes for `steps` steps; returns
// the multiply-adds per step.
constexpr int kDotChains = 24;
long dot_loop(long steps, float* sink);
// C[0:mr, 0:nr] = (accumulate ? C : 0) + A @ B over kpc pairs, then + bias[0:nr] where not null. A is a
// packed panel (pair (r, kp) at A[kp * kMr + r]) or rows of pairs (at A[r * lda + kp]).
void kernel_panel(int kpc, const uint32_t* A, const uint32_t* Bp, float* C, int ldc, int mr, int nr, bool accumulate,
                  const float* bias);
void kernel_rows(int kpc, const uint32_t* A, long lda, const uint32_t* Bp, float* C, int ldc, int mr, int nr,
                 bool accumulate, const float* bias);

}  // namespace blocklab::kernels::neon_bf16
