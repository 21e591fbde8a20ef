#include "kernels/sgemm.h"

#include "kernels/fast_math.h"
#include "kernels/gemm_partition.h"
#include "kernels/gemm_prefetch.h"
#include "kernels/isa.h"
#include "util/openmp.h"
#include "util/profiler.h"
#include "kernels/transpose16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#elif defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace blocklab::kernels {

namespace {

constexpr int kKc = 256;  // K-chunk: an MR x KC panel of A and a KC x NR panel of B stay in L1/L2
constexpr int kMc = 96;   // rows of A packed at a time (a multiple of both MR values)
// The AVX-512 kernel's column blocks: at most 24 panels of 32 columns, so that a block of packed B (KC x 768
// floats, 768 KB) stays in a 1 MB L2 while every row panel of A passes over it (see run).
constexpr int kL2Panels = 24;

// ---------------------------------------------------------------------------------------------------
// Packing. Panels are zero-padded to full MR/NR so micro-kernels never branch on edges.

#if defined(__x86_64__)
// One panel (rows <= 12, zero-padded to 12) of a transposed A (stored (K, M): contiguous floats per k) for
// the AVX-512 kernel: each k's floats moved with one masked load and store and added to the running row
// sums with one vector add. Lane r does exactly what the scalar `sums[r] += src[r]` does, in the same k
// order, so the sums are the same bit for bit; the scalar loop, which the compiler leaves unvectorised
// (it cannot tell the source from the destination), cost the weight-gradient GEMMs ~20% of their time.
__attribute__((target("avx512f"))) void pack_a_transposed_panel12(float* dst, const float* A, long lda, int rows,
                                                                  int kc, float* row_sums) {
  const auto m = static_cast<__mmask16>((1u << rows) - 1);
  __m512 sums = row_sums == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, row_sums);
  for (int k = 0; k < kc; ++k) {
    const __m512 v = _mm512_maskz_loadu_ps(m, A + k * lda);
    _mm512_mask_storeu_ps(dst + k * 12, 0x0FFF, v);  // lanes rows .. 11 are the padding zeros
    sums = _mm512_add_ps(sums, v);
  }
  if (row_sums != nullptr) _mm512_mask_storeu_ps(row_sums, m, sums);
}

// The same for the AVX2 kernel's panels (rows <= 6, zero-padded to 6): each k's floats in one masked load and
// an 8-float store, whose last two floats the next k overwrites (the panel's last k writes two floats past
// it, into the next panel, packed after it, or into the buffer's spare end). The scalar form, 6 floats per k
// in a 4-and-2 split, cost the weight-gradient GEMMs several percent at AVX2.
__attribute__((target("avx2"))) void pack_a_transposed_panel6(float* dst, const float* A, long lda, int rows, int kc,
                                                              float* row_sums) {
  alignas(32) static constexpr int kLaneOn[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLaneOn + 8 - rows));  // lanes < rows
  __m256 sums = row_sums == nullptr ? _mm256_setzero_ps() : _mm256_maskload_ps(row_sums, m);
  for (int k = 0; k < kc; ++k) {
    const __m256 v = _mm256_maskload_ps(A + k * lda, m);
    _mm256_storeu_ps(dst + k * 6, v);  // lanes rows .. 5 are the padding zeros
    sums = _mm256_add_ps(sums, v);
  }
  if (row_sums != nullptr) _mm256_maskstore_ps(row_sums, m, sums);
}
#endif

// Ap[p][k][r] = op(A)[i0 + p*MR + r][k0 + k]. With row_sums, also row_sums[i - i0] += op(A)[i][k0 + k]
// in k order (the caller keeps the sums across K-chunks).
template <int MR>
BLOCKLAB_ALWAYS_INLINE void pack_a(float* Ap, const float* A, int lda, bool trans, int i0, int rows, int k0, int kc,
                                  float* row_sums) {
  for (int p = 0; p * MR < rows; ++p) {
    float* dst = Ap + static_cast<long>(p) * MR * kc;
    const int r_end = std::min(MR, rows - p * MR);
#if defined(__x86_64__)
    if constexpr (MR == 12) {  // the AVX-512 kernel's panels
      if (trans && isa() == Isa::Avx512) {
        pack_a_transposed_panel12(dst, A + static_cast<long>(k0) * lda + i0 + p * MR, lda, r_end, kc,
                                  row_sums == nullptr ? nullptr : row_sums + p * MR);
        continue;
      }
    }
    if constexpr (MR == 6) {  // the AVX2 kernel's panels
      if (trans && isa() >= Isa::Avx2) {
        pack_a_transposed_panel6(dst, A + static_cast<long>(k0) * lda + i0 + p * MR, lda, r_end, kc,
                                 row_sums == nullptr ? nullptr : row_sums + p * MR);
        continue;
      }
    }
#endif
    if (trans && r_end == MR) {  // A stored (K, M), a full panel: MR contiguous floats per k
      float sums[MR];  // the running sums in registers, in the same k order as a plain loop
      for (int r = 0; r < MR; ++r) sums[r] = row_sums == nullptr ? 0.f : row_sums[p * MR + r];
      for (int k = 0; k < kc; ++k) {
        const float* src = A + static_cast<long>(k0 + k) * lda + i0 + p * MR;
        float* d = dst + k * MR;
        for (int r = 0; r < MR; ++r) d[r] = src[r];  // fixed trip count: vector moves
        if (row_sums != nullptr)
          for (int r = 0; r < MR; ++r) sums[r] += src[r];
      }
      if (row_sums != nullptr)
        for (int r = 0; r < MR; ++r) row_sums[p * MR + r] = sums[r];
      continue;
    }
    float* sums = row_sums == nullptr ? nullptr : row_sums + p * MR;
    for (int k = 0; k < kc; ++k) {
      float* d = dst + k * MR;
      if (trans) {  // op(A)[i][k] = A[k][i], contiguous in i
        const float* src = A + static_cast<long>(k0 + k) * lda + i0 + p * MR;
        for (int r = 0; r < r_end; ++r) d[r] = src[r];
      } else {
        const float* src = A + static_cast<long>(i0 + p * MR) * lda + k0 + k;
        for (int r = 0; r < r_end; ++r) d[r] = src[static_cast<long>(r) * lda];
      }
      if (sums != nullptr)
        for (int r = 0; r < r_end; ++r) sums[r] += d[r];
      for (int r = r_end; r < MR; ++r) d[r] = 0.f;
    }
  }
}

#if defined(__x86_64__)
// One panel (cols <= 32, zero-padded to 32) of a transposed B (stored (N, K); B points at op(B)[k0][j0]) for the
// AVX-512 kernel, 16 columns by 16 k at a time through registers: dst[k * 32 + j] = B[j * ldb + k], 16 loads, 64
// shuffles and 16 stores per 256 floats where the scalar form takes a load and a store per float. Every forward
// product (x @ W^T) packs all of its weight this way once per K-chunk and column block.
__attribute__((target("avx512f"))) void pack_b_transposed_panel32(float* dst, const float* B, long ldb, int cols,
                                                                  int kc) {
  for (int jj = 0; jj < 32; jj += 16) {
    const int n = std::clamp(cols - jj, 0, 16);
    for (int k = 0; k < kc; k += 16) {
      const int kn = std::min(16, kc - k);
      const auto m = static_cast<__mmask16>(kn == 16 ? 0xFFFF : (1u << kn) - 1);
      __m512 r[16];
      for (int j = 0; j < 16; ++j)
        r[j] = j < n ? _mm512_maskz_loadu_ps(m, B + static_cast<long>(jj + j) * ldb + k) : _mm512_setzero_ps();
      transpose16(r);
      for (int t = 0; t < kn; ++t) _mm512_storeu_ps(dst + static_cast<long>(k + t) * 32 + jj, r[t]);
    }
  }
}
#endif

// Bp[q][k][j] = op(B)[k0 + k][q*NR + j]
template <int NR>
BLOCKLAB_ALWAYS_INLINE void pack_b_panel(float* dst, const float* B, int ldb, bool trans, int j0, int cols, int k0, int kc) {
#if defined(__x86_64__)
  if constexpr (NR == 32) {  // the AVX-512 kernel's panels
    if (trans && isa() == Isa::Avx512) {
      pack_b_transposed_panel32(dst, B + static_cast<long>(j0) * ldb + k0, ldb, cols, kc);
      return;
    }
  }
#endif
  if (trans) {  // B stored (N, K): op(B)[k][j] = B[j][k]
    for (int j = 0; j < cols; ++j) {
      const float* src = B + static_cast<long>(j0 + j) * ldb + k0;
      for (int k = 0; k < kc; ++k) dst[k * NR + j] = src[k];
    }
    for (int j = cols; j < NR; ++j)
      for (int k = 0; k < kc; ++k) dst[k * NR + j] = 0.f;
  } else {
    for (int k = 0; k < kc; ++k) {
      const float* src = B + static_cast<long>(k0 + k) * ldb + j0;
      float* d = dst + k * NR;
      if (cols == NR) {
        for (int j = 0; j < NR; ++j) d[j] = src[j];  // fixed trip count: a couple of vector moves
      } else {
        for (int j = 0; j < cols; ++j) d[j] = src[j];
        for (int j = cols; j < NR; ++j) d[j] = 0.f;
      }
    }
  }
}

// The panels of columns j0 .. j0 + cols of a not-transposed B, one k row at a time (each row read as one
// contiguous run): Bp[q][k][j] = B[k0 + k][j0 + q*NR + j], the last panel zero-padded.
template <int NR>
BLOCKLAB_ALWAYS_INLINE void pack_b_rows(float* dst, const float* B, int ldb, int j0, int cols, int k0, int kc) {
  const int full = cols / NR, rest = cols % NR;
  for (int k = 0; k < kc; ++k) {
    const float* src = B + static_cast<long>(k0 + k) * ldb + j0;
    for (int q = 0; q < full; ++q) {
      float* d = dst + (static_cast<long>(q) * kc + k) * NR;
      for (int j = 0; j < NR; ++j) d[j] = src[q * NR + j];
    }
    if (rest != 0) {
      float* d = dst + (static_cast<long>(full) * kc + k) * NR;
      for (int j = 0; j < rest; ++j) d[j] = src[full * NR + j];
      for (int j = rest; j < NR; ++j) d[j] = 0.f;
    }
  }
}

// Rows i0 .. i0 + rows of a not-transposed A, K-chunk k0 .. k0 + kc, copied as they are to dst (row r at
// dst + r * ld), and zero rows up to `padded`: the AVX-512 kernel's rows "in place" where A's own stride
// would crowd L1 sets.
BLOCKLAB_ALWAYS_INLINE void copy_a_rows(float* dst, long ld, const float* A, int lda, int i0, int padded, int rows,
                                        int k0, int kc) {
  for (int r = 0; r < padded; ++r) {
    float* d = dst + r * ld;
    if (r < rows)
      std::memcpy(d, A + static_cast<long>(i0 + r) * lda + k0, sizeof(float) * kc);
    else
      std::fill(d, d + kc, 0.f);
  }
}

// ---------------------------------------------------------------------------------------------------
// Micro-kernels: C[0:mr, 0:nr] = (accumulate ? C : 0) + A (MR x kc) @ B (kc x NR), then + bias[0:nr]
// when bias is not null. A is either a packed panel (kDirectA false: element (r, k) at A[k * MR + r]) or
// MR full rows read in place from a row-major op(A) (kDirectA true: element (r, k) at A[r * lda + k]),
// which spares packing when op(A) is not transposed: each row is a contiguous stream over k. Row k of B
// is at Bp + k * ldbp: a packed panel (ldbp = NR) or a not-transposed B read in place (ldbp = ldb).

template <int MR, int NR>
void store_tile(float* C, int ldc, const float* tile, int mr, int nr, bool accumulate, const float* bias) {
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) {
      float& c = C[static_cast<long>(r) * ldc + j];
      c = accumulate ? c + tile[r * NR + j] : tile[r * NR + j];
      if (bias != nullptr) c += bias[j];
    }
}

#if defined(__x86_64__)
constexpr int kMr512 = 12, kNr512 = 32;

template <bool kDirectA>
__attribute__((target("avx512f"))) void kernel_avx512(int kc, const float* A, long lda, const float* Bp, long ldbp,
                                                      float* C, int ldc, int mr, int nr, bool accumulate,
                                                      const float* bias) {
  __m512 acc[kMr512][2];
  for (int r = 0; r < kMr512; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  prefetch_tile(C, ldc, mr);  // read (accumulate) or written at the end
  for (int k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(Bp + k * ldbp);
    const __m512 b1 = _mm512_loadu_ps(Bp + k * ldbp + 16);
#pragma GCC unroll 12
    for (int r = 0; r < kMr512; ++r) {
      const __m512 av = _mm512_set1_ps(kDirectA ? A[r * lda + k] : A[k * kMr512 + r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  if (nr == kNr512) {
    const __m512 bias0 = bias == nullptr ? _mm512_setzero_ps() : _mm512_loadu_ps(bias);
    const __m512 bias1 = bias == nullptr ? _mm512_setzero_ps() : _mm512_loadu_ps(bias + 16);
    for (int r = 0; r < mr; ++r) {
      float* c = C + static_cast<long>(r) * ldc;
      if (accumulate) {
        acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_loadu_ps(c));
        acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_loadu_ps(c + 16));
      }
      if (bias != nullptr) {
        acc[r][0] = _mm512_add_ps(acc[r][0], bias0);
        acc[r][1] = _mm512_add_ps(acc[r][1], bias1);
      }
      _mm512_storeu_ps(c, acc[r][0]);
      _mm512_storeu_ps(c + 16, acc[r][1]);
    }
  } else {
    const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
    const __mmask16 m1 = static_cast<__mmask16>(nr <= 16 ? 0 : nr >= 32 ? 0xFFFF : (1u << (nr - 16)) - 1);
    const __m512 bias0 = bias == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, bias);
    const __m512 bias1 = bias == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, bias + 16);
    for (int r = 0; r < mr; ++r) {
      float* c = C + static_cast<long>(r) * ldc;
      if (accumulate) {
        acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, c));
        acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, c + 16));
      }
      if (bias != nullptr) {
        acc[r][0] = _mm512_add_ps(acc[r][0], bias0);
        acc[r][1] = _mm512_add_ps(acc[r][1], bias1);
      }
      _mm512_mask_storeu_ps(c, m0, acc[r][0]);
      _mm512_mask_storeu_ps(c + 16, m1, acc[r][1]);
    }
  }
}

constexpr int kMr256 = 6, kNr256 = 16;

template <bool kDirectA>
__attribute__((target("avx2,fma"))) void kernel_avx2(int kc, const float* A, long lda, const float* Bp, long ldbp,
                                                     float* C, int ldc, int mr, int nr, bool accumulate,
                                                     const float* bias) {
  __m256 acc[kMr256][2];
#pragma GCC unroll 6
  for (int r = 0; r < kMr256; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(Bp + k * ldbp);
    const __m256 b1 = _mm256_loadu_ps(Bp + k * ldbp + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMr256; ++r) {
      const __m256 av = _mm256_broadcast_ss(kDirectA ? A + r * lda + k : A + k * kMr256 + r);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  // The accumulators go through a tile in memory, indexed by constants only: an index known only at run time
  // (r < mr) would make GCC keep the 12 registers in memory, storing each of them on every k (2x slower).
  alignas(32) float tile[kMr256 * kNr256];
#pragma GCC unroll 6
  for (int r = 0; r < kMr256; ++r) {
    _mm256_store_ps(tile + r * kNr256, acc[r][0]);
    _mm256_store_ps(tile + r * kNr256 + 8, acc[r][1]);
  }
  if (nr == kNr256) {
    const __m256 bias0 = bias == nullptr ? _mm256_setzero_ps() : _mm256_loadu_ps(bias);
    const __m256 bias1 = bias == nullptr ? _mm256_setzero_ps() : _mm256_loadu_ps(bias + 8);
    for (int r = 0; r < mr; ++r) {
      float* c = C + static_cast<long>(r) * ldc;
      __m256 c0 = _mm256_load_ps(tile + r * kNr256), c1 = _mm256_load_ps(tile + r * kNr256 + 8);
      if (accumulate) {
        c0 = _mm256_add_ps(c0, _mm256_loadu_ps(c));
        c1 = _mm256_add_ps(c1, _mm256_loadu_ps(c + 8));
      }
      if (bias != nullptr) {
        c0 = _mm256_add_ps(c0, bias0);
        c1 = _mm256_add_ps(c1, bias1);
      }
      _mm256_storeu_ps(c, c0);
      _mm256_storeu_ps(c + 8, c1);
    }
  } else {
    store_tile<kMr256, kNr256>(C, ldc, tile, mr, nr, accumulate, bias);
  }
}
#endif  // __x86_64__

#if defined(__aarch64__)
// The NEON kernel: a 12 x 8 tile in 24 of the 32 vector registers (12 rows, two 4-float vectors of B's
// columns), as the register blocking of BLIS's and OpenBLAS's ARMv8 float kernels (8 x 12 there, in their
// column-major terms). Per k, a packed A panel gives its 12 values in three vector loads and each product
// takes its A value from a lane of them (fmla by element). The loop is 24 fmla, 3 loads (ldp q, ldp q, ldr q)
// and 4 instructions of loop control per k (aarch64-linux-gnu-objdump -d). A is always packed at this level
// (run<..., false>): reading its rows in place (one ld1r per row and k) needs 12 A registers besides the 24
// accumulators and 2 of B, more than the 32 there are, and GCC spilled three accumulators on every k. Every C element's sum runs over k in order, one fused
// multiply-add at a time, as in the x86 FMA kernels: the same bits as AVX2 and AVX-512.
constexpr int kMrNeon = 12, kNrNeon = 8;

// Row R of the tile at one k (a helper, so that the lane index is a template constant for any compiler).
template <int R>
BLOCKLAB_ALWAYS_INLINE void neon_row_packed(float32x4_t (&acc)[kMrNeon][2], float32x4_t b0, float32x4_t b1,
                                            const float32x4_t (&a_vec)[3]) {
  acc[R][0] = vfmaq_laneq_f32(acc[R][0], b0, a_vec[R / 4], R % 4);
  acc[R][1] = vfmaq_laneq_f32(acc[R][1], b1, a_vec[R / 4], R % 4);
}

// A is always a packed panel (lda unused: the signature is the driver's).
void kernel_neon(int kc, const float* A, long /*lda*/, const float* Bp, long ldbp, float* C, int ldc, int mr, int nr,
                 bool accumulate, const float* bias) {
  float32x4_t acc[kMrNeon][2];
#pragma GCC unroll 12
  for (int r = 0; r < kMrNeon; ++r) acc[r][0] = acc[r][1] = vdupq_n_f32(0.f);
  const auto rows = std::make_integer_sequence<int, kMrNeon>{};
  for (int k = 0; k < kc; ++k) {
    const float32x4_t b0 = vld1q_f32(Bp + k * ldbp), b1 = vld1q_f32(Bp + k * ldbp + 4);
    const float* a = A + k * kMrNeon;
    const float32x4_t a_vec[3] = {vld1q_f32(a), vld1q_f32(a + 4), vld1q_f32(a + 8)};
    [&]<int... R>(std::integer_sequence<int, R...>) { (neon_row_packed<R>(acc, b0, b1, a_vec), ...); }(rows);
  }
  // through a tile in memory indexed by constants only, as in the AVX2 kernel (a run-time row index would
  // keep the accumulators in memory)
  alignas(16) float tile[kMrNeon * kNrNeon];
#pragma GCC unroll 12
  for (int r = 0; r < kMrNeon; ++r) {
    vst1q_f32(tile + r * kNrNeon, acc[r][0]);
    vst1q_f32(tile + r * kNrNeon + 4, acc[r][1]);
  }
  if (nr == kNrNeon) {
    const float32x4_t bias0 = bias == nullptr ? vdupq_n_f32(0.f) : vld1q_f32(bias);
    const float32x4_t bias1 = bias == nullptr ? vdupq_n_f32(0.f) : vld1q_f32(bias + 4);
    for (int r = 0; r < mr; ++r) {
      float* c = C + static_cast<long>(r) * ldc;
      float32x4_t c0 = vld1q_f32(tile + r * kNrNeon), c1 = vld1q_f32(tile + r * kNrNeon + 4);
      if (accumulate) {
        c0 = vaddq_f32(vld1q_f32(c), c0);
        c1 = vaddq_f32(vld1q_f32(c + 4), c1);
      }
      if (bias != nullptr) {
        c0 = vaddq_f32(c0, bias0);
        c1 = vaddq_f32(c1, bias1);
      }
      vst1q_f32(c, c0);
      vst1q_f32(c + 4, c1);
    }
  } else {
    store_tile<kMrNeon, kNrNeon>(C, ldc, tile, mr, nr, accumulate, bias);
  }
}
#endif  // __aarch64__
// The baseline kernel, in GCC vector extensions: a 4 x 8 tile of 8 accumulators. On x86-64 without AVX2
// (SSE2, 16 registers of 4 floats, no FMA) each product is rounded before its add; where the baseline has
// FMA (AArch64) the compiler fuses them, and the sums equal the other FMA kernels' bit for bit.
constexpr int kMrGeneric = 4, kNrGeneric = 8;

template <bool kDirectA>
void kernel_generic(int kc, const float* A, long lda, const float* Bp, long ldbp, float* C, int ldc, int mr, int nr,
                    bool accumulate, const float* bias) {
  typedef float V4 __attribute__((vector_size(16)));
  auto load = [](const float* p) {
    V4 v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  V4 acc[kMrGeneric][2] = {};
  for (int k = 0; k < kc; ++k) {
    const V4 b0 = load(Bp + k * ldbp), b1 = load(Bp + k * ldbp + 4);
#pragma GCC unroll 4
    for (int r = 0; r < kMrGeneric; ++r) {
      const V4 av = V4{} + (kDirectA ? A[r * lda + k] : A[k * kMrGeneric + r]);
      acc[r][0] += av * b0;
      acc[r][1] += av * b1;
    }
  }
  alignas(16) float tile[kMrGeneric * kNrGeneric];
  for (int r = 0; r < kMrGeneric; ++r) {
    std::memcpy(tile + r * kNrGeneric, &acc[r][0], sizeof(V4));
    std::memcpy(tile + r * kNrGeneric + 4, &acc[r][1], sizeof(V4));
  }
  store_tile<kMrGeneric, kNrGeneric>(C, ldc, tile, mr, nr, accumulate, bias);
}

#if defined(__wasm_simd128__)
// The WebAssembly SIMD128 kernel: a 6 x 8 tile in 12 accumulators, 2 vectors of B and A's value splatted (15
// of the 16 128-bit registers an x86-64 engine maps them to; the generic kernel's 4 x 8 tile uses 11). SIMD128
// has no FMA: each product is rounded before its add, in k order, as in the generic kernel on x86-64, and the
// two kernels give the same bits.
constexpr int kMrWasm = 6, kNrWasm = 8;

template <bool kDirectA>
void kernel_wasm_simd128(int kc, const float* A, long lda, const float* Bp, long ldbp, float* C, int ldc, int mr,
                         int nr, bool accumulate, const float* bias) {
  v128_t acc[kMrWasm][2];
  for (int r = 0; r < kMrWasm; ++r) acc[r][0] = acc[r][1] = wasm_f32x4_splat(0.f);
  for (int k = 0; k < kc; ++k) {
    const v128_t b0 = wasm_v128_load(Bp + k * ldbp), b1 = wasm_v128_load(Bp + k * ldbp + 4);
#pragma unroll
    for (int r = 0; r < kMrWasm; ++r) {
      const v128_t av = wasm_v128_load32_splat(kDirectA ? A + r * lda + k : A + k * kMrWasm + r);  // one instruction
      acc[r][0] = wasm_f32x4_add(acc[r][0], wasm_f32x4_mul(av, b0));
      acc[r][1] = wasm_f32x4_add(acc[r][1], wasm_f32x4_mul(av, b1));
    }
  }
  alignas(16) float tile[kMrWasm * kNrWasm];
  for (int r = 0; r < kMrWasm; ++r) {
    wasm_v128_store(tile + r * kNrWasm, acc[r][0]);
    wasm_v128_store(tile + r * kNrWasm + 4, acc[r][1]);
  }
  store_tile<kMrWasm, kNrWasm>(C, ldc, tile, mr, nr, accumulate, bias);
}
#endif  // __wasm_simd128__

// ---------------------------------------------------------------------------------------------------
// Driver

float* aligned_buffer(std::vector<float>& v, size_t floats) {
  if (v.size() < floats + 32) v.resize(floats + 32);  // room to align, and for panel6's two floats past the end
  auto addr = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<float*>((addr + 63) & ~static_cast<uintptr_t>(63));
}

// The most lines of `rows` rows of `span` bytes, `ld` floats apart, that fall in one set of a 32 KB 8-way L1 (64
// sets of 64-byte lines, 4 KB per way: Zen 4, Intel since Skylake). 12 rows of A at a stride of 3072 floats (12
// KB) all land in the same 16 sets, more lines than the 8 ways hold.
int rows_share_l1_sets(long ld, int rows, long span) {
  int count[64] = {};
  for (int r = 0; r < rows; ++r) {
    const long first = r * ld * 4 / 64, last = (r * ld * 4 + span - 1) / 64;
    for (long line = first; line <= std::min(last, first + 63); ++line) ++count[line % 64];
  }
  return *std::max_element(count, count + 64);
}

// The driver. Each thread walks its rectangle of C (gemm_partition.h) in column blocks; within a block, K-chunk by
// K-chunk in order, and within a chunk row block by row block (at most kMc rows). Every C element thus gets its
// chunk sums added in K order, each chunk's sum taken from zero by the kernel: the same order at every level and
// for any thread count or blocking.
//
// kReadAInPlace: the direct kernel may read full row panels of a not-transposed A in place (false: A is always
// packed, for a kernel whose in-place form needs more registers than there are).
//
// kPlain: with A not transposed, what of the next row block is prefetched (gemm_prefetch.h): the x86 kernels gained
// from its rows of A, the AVX2 kernel, which does not fetch its own tile of C, also from its rows of C.
//
// kL2Blocks (the AVX-512 kernel, whose KC x 32 panel of B fills a 32 KB L1 on its own): column blocks of at most
// kL2Panels panels, whose B is always packed (one contiguous block that stays in L2), and per row block the
// panels of A outside, those of B inside: each 12-row panel of A (12 KB) stays in L1 while the block's B panels
// stream past it from L2. A not transposed is read in place unless its rows would share L1 sets (then its rows
// are copied, as they are, to a stride that does not alias). The narrower kernels keep one column block (all of
// the thread's columns) and the opposite order: their B panel (16 KB at AVX2) stays in L1 while the row block's
// A panels pass, and a not-transposed B is read in place.
//
// On the GPT-2 124M step's products (252 rows; Zen 4, 1 thread) the AVX-512 walk took them from 58-95 GFLOP/s to
// 90-105: the B panel, read in place at a stride of 3072 or 768 floats or packed for all of N up front (up to
// 50 MB for the vocabulary's 50257 columns), came from L2 or beyond for every row panel.
template <int MR, int NR, bool kReadAInPlace = true, bool kL2Blocks = false,
          PlainPrefetch kPlain = PlainPrefetch::None, typename Kernel>
void run(Kernel packed_kernel, Kernel direct_kernel, bool trans_a, bool trans_b, int M, int N, int K, const float* A,
         int lda, const float* B, int ldb, float beta, float* C, int ldc, const SgemmExtras& extras) {
  // Called inside a parallel region (one caller per thread), the product runs on the calling thread.
  const bool nested = omp_in_parallel() != 0;
  const GemmPartition partition(M, N, MR, NR, nested ? 1 : omp_get_max_threads(), extras.c_row_squares != nullptr);

#pragma omp parallel if (!nested)
  {
    // Buffers per thread, grown once and reused: no allocation in steady state.
    static thread_local std::vector<float> a_storage, b_storage, sums_storage;
    static thread_local std::vector<double> squares_storage;
    const ThreadRect rect = partition.rect(omp_get_thread_num(), omp_get_num_threads());
    const int q_lo = rect.q_lo, q_hi = rect.q_hi, i_begin = rect.i_begin, i_end = rect.i_end;
    if (!rect.empty()) {
      // column blocks of equal shares of the thread's panels
      const int panels = q_hi - q_lo;
      const int n_blocks = kL2Blocks ? (panels + kL2Panels - 1) / kL2Panels : 1;
      const auto block_of = [&](int b) {
        return BlockAt{q_lo + static_cast<int>(static_cast<long>(panels) * b / n_blocks),
                       q_lo + static_cast<int>(static_cast<long>(panels) * (b + 1) / n_blocks), i_begin, 0};
      };
      constexpr int kCopyLd = kKc + 16;  // copied rows of A: 1088 floats apart, not a multiple of 4 KB
      float* Ap = aligned_buffer(a_storage, static_cast<size_t>(kMc) * (kL2Blocks ? kCopyLd : kKc));
      float* Bp = aligned_buffer(b_storage, static_cast<size_t>((panels + n_blocks - 1) / n_blocks) * NR * kKc);
      const ThreadRowSums sums(extras, rect, sums_storage);
      const ThreadRowSquares squares(extras, rect, N, squares_storage);
      // A not transposed (and no row sums wanted): full MR-row panels are read in place; only a last partial
      // panel is packed (zero-padded). With kL2Blocks, where a panel's rows would crowd L1 sets (more than 6 of a
      // set's 8 lines), all its rows are copied instead (copy_a).
      const bool plain_a = kReadAInPlace && !trans_a && !sums.wanted();
      const bool copy_a = kL2Blocks && plain_a && rows_share_l1_sets(lda, MR, 4L * kKc) > 6;
      const bool direct_a = plain_a && !copy_a;
      // B not transposed: full NR-column panels are read in place (each k row of a panel is contiguous) by the
      // narrower kernels; a last partial panel, and every panel of a transposed B, is packed. So are the narrower
      // kernels' panels (a panel row under two cache lines) when this thread's rows pass over each panel 8 times
      // or more: a 64-byte row per k at the stride of B's rows conflicts in L1, and the step's NN products with
      // 2016 rows ran 10% slower at AVX2 in place; with a few hundred rows, packing costs more than it saves.
      const bool pack_narrow = NR * sizeof(float) < 128 && i_end - i_begin >= 8 * kMc;
      const auto direct_b = [&](int q) { return !kL2Blocks && !pack_narrow && !trans_b && (q + 1) * NR <= N; };
      for (int cb = 0; cb < n_blocks; ++cb) {
        const int qa = block_of(cb).qa, qb = block_of(cb).qb;
        for (int k0 = 0; k0 < K; k0 += kKc) {
          const int kc = std::min(kKc, K - k0);
          const bool accumulate = k0 > 0 || beta != 0.f;
          const bool last_chunk = k0 + kc == K;
          on_isa([&](auto) {
            if (kL2Blocks && !trans_b) {  // the block's panels k row by k row: B's rows read as long runs
              pack_b_rows<NR>(Bp, B, ldb, qa * NR, std::min(qb * NR, N) - qa * NR, k0, kc);
              return;
            }
            for (int q = qa; q < qb; ++q)
              if (!direct_b(q))
                pack_b_panel<NR>(Bp + static_cast<long>(q - qa) * NR * kc, B, ldb, trans_b, q * NR,
                                 std::min(NR, N - q * NR), k0, kc);
          });
          for (int i0 = i_begin; i0 < i_end; i0 += kMc) {  // row blocks whose packed A stays in L2
            const int rows = std::min(kMc, i_end - i0);
            const int full_panels = rows / MR;
            on_isa([&](auto) {
              if (copy_a)
                copy_a_rows(Ap, kCopyLd, A, lda, i0, (rows + MR - 1) / MR * MR, rows, k0, kc);
              else if (!direct_a)  // the row sums on the first column block only
                pack_a<MR>(Ap, A, lda, trans_a, i0, rows, k0, kc, cb == 0 ? sums.at(i0) : nullptr);
              else if (rows % MR != 0)
                pack_a<MR>(Ap, A, lda, false, i0 + full_panels * MR, rows % MR, k0, kc, nullptr);
            });
            const BlockAt at{qa, qb, i0, k0};
            const BlockAt next = next_block<kKc, kMc>(at, i_begin, i_end, K, [&] {
              return cb + 1 < n_blocks ? block_of(cb + 1) : BlockAt{};
            });
            Prefetcher prefetch;
            plan_prefetch<MR, NR, kKc, kMc>(prefetch, at, next, i_end, rows, last_chunk, trans_a, trans_b, kPlain, N,
                                            K, A, lda, B, ldb, C, ldc, extras);
            const auto tile = [&](int p, int q) {
              const int mr = std::min(MR, rows - p * MR);
              const int j0 = q * NR, nr = std::min(NR, N - j0);
              const float* bias = last_chunk && extras.bias != nullptr ? extras.bias + j0 : nullptr;
              // row k of the panel at b_panel + k * b_stride
              const float* b_panel =
                  direct_b(q) ? B + static_cast<long>(k0) * ldb + j0 : Bp + static_cast<long>(q - qa) * NR * kc;
              const long b_stride = direct_b(q) ? ldb : NR;
              float* c = C + static_cast<long>(i0 + p * MR) * ldc + j0;
              if (copy_a)
                direct_kernel(kc, Ap + static_cast<long>(p) * MR * kCopyLd, kCopyLd, b_panel, b_stride, c, ldc, mr, nr,
                              accumulate, bias);
              else if (direct_a && p < full_panels)
                direct_kernel(kc, A + static_cast<long>(i0 + p * MR) * lda + k0, lda, b_panel, b_stride, c, ldc, mr,
                              nr, accumulate, bias);
              else
                packed_kernel(kc, direct_a ? Ap : Ap + static_cast<long>(p) * MR * kc, 0, b_panel, b_stride, c, ldc,
                              mr, nr, accumulate, bias);
              prefetch.step();
            };
            const int row_panels = (rows + MR - 1) / MR;
            if (kL2Blocks) {  // a panel of A stays in L1 while the block's B panels pass
              for (int p = 0; p < row_panels; ++p)
                for (int q = qa; q < qb; ++q) tile(p, q);
            } else {  // a panel of B stays in L1 while the row block's A panels pass
              for (int q = qa; q < qb; ++q)
                for (int p = 0; p < row_panels; ++p) tile(p, q);
            }
            if (last_chunk) {
              const int j_begin = qa * NR, j_end = std::min(qb * NR, N);
              if (extras.on_block_done != nullptr)
                extras.on_block_done(extras.context, i0, rows, j_begin, j_end - j_begin);
              squares.add_block(C, ldc, i0, rows, j_begin, j_end - j_begin);
            }
          }
        }
      }
      sums.add_to_output();
    }
  }
}

// The running instruction-set level (BLOCKLAB_ISA caps it); BLOCKLAB_GEMM=blas takes BLAS instead, =avx2 caps
// the GEMM alone at AVX2.
SgemmIsa detect_isa() {
  static const std::string choice = [] {
    const char* forced = std::getenv("BLOCKLAB_GEMM");
    return std::string(forced == nullptr ? "" : forced);
  }();
  if (choice == "blas") return SgemmIsa::None;
  switch (isa()) {
    case Isa::Avx512: return choice == "avx2" ? SgemmIsa::Avx2 : SgemmIsa::Avx512;
    case Isa::Avx2: return SgemmIsa::Avx2;
    case Isa::Neon: return SgemmIsa::Neon;
    case Isa::WasmSimd128: return SgemmIsa::WasmSimd128;
    case Isa::Generic: break;
  }
  return SgemmIsa::Generic;
}

}  // namespace

SgemmIsa sgemm_isa() { return detect_isa(); }

const char* sgemm_isa_name(SgemmIsa isa) {
  switch (isa) {
    case SgemmIsa::Avx512: return "avx512";
    case SgemmIsa::Avx2: return "avx2";
    case SgemmIsa::Neon: return "neon";
    case SgemmIsa::WasmSimd128: return "wasm_simd128";
    case SgemmIsa::Generic: return "generic";
    case SgemmIsa::None: break;
  }
  return "blas";
}

bool sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
           float beta, float* C, int ldc, const SgemmExtras& extras) {
  if (beta != 0.f && beta != 1.f) return false;
  if (extras.a_bf16 != nullptr || extras.b_bf16 != nullptr || extras.on_product_block != nullptr) return false;
  const SgemmIsa level = sgemm_isa();
  if (level == SgemmIsa::None) return false;
  if (M <= 0 || N <= 0) return true;
  if (K <= 0) {  // an empty product: C = beta C (+ bias); the row sums are empty sums
    for (int i = 0; i < M; ++i) {
      float* c = C + static_cast<long>(i) * ldc;
      if (beta == 0.f) std::fill(c, c + N, 0.f);
      if (extras.bias != nullptr)
        for (int j = 0; j < N; ++j) c[j] += extras.bias[j];
    }
    if (extras.on_block_done != nullptr) extras.on_block_done(extras.context, 0, M, 0, N);
    if (extras.c_row_squares != nullptr) row_sums_of_squares(C, M, N, ldc, extras.c_row_squares);
    return true;
  }
  // bench --profile: each call's time by shape
  const ScopedGemmTimer report(omp_in_parallel() ? nullptr : Profiler::active(), trans_a, trans_b, M, N, K);
  switch (level) {
#if defined(__x86_64__)
    case SgemmIsa::Avx512:
      run<kMr512, kNr512, true, true, PlainPrefetch::ARows>(kernel_avx512<false>, kernel_avx512<true>, trans_a, trans_b,
                                                            M, N, K, A, lda, B, ldb, beta, C, ldc, extras);
      return true;
    case SgemmIsa::Avx2:
      run<kMr256, kNr256, true, false, PlainPrefetch::ARowsAndC>(kernel_avx2<false>, kernel_avx2<true>, trans_a,
                                                                 trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc,
                                                                 extras);
      return true;
#elif defined(__aarch64__)
    case SgemmIsa::Neon:
      // A always packed: the direct kernel is never called
      run<kMrNeon, kNrNeon, false>(kernel_neon, kernel_neon, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc,
                                   extras);
      return true;
#elif defined(__wasm_simd128__)
    case SgemmIsa::WasmSimd128:
      run<kMrWasm, kNrWasm>(kernel_wasm_simd128<false>, kernel_wasm_simd128<true>, trans_a, trans_b, M, N, K, A, lda,
                            B, ldb, beta, C, ldc, extras);
      return true;
#endif
    case SgemmIsa::Generic:
      run<kMrGeneric, kNrGeneric>(kernel_generic<false>, kernel_generic<true>, trans_a, trans_b, M, N, K, A, lda, B, ldb,
                                  beta, C, ldc, extras);
      return true;
    default: break;  // None, or another architecture's level
  }
  return false;
}

}  // namespace blocklab::kernels
