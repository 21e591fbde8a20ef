// The AArch64 bf16 GEMM's packing and micro-kernel (bf16_gemm_neon.h); empty on other architectures.
#if defined(__aarch64__)
#include "kernels/bf16_gemm_neon.h"

#include <arm_neon.h>

#include <algorithm>
#include <utility>

#include "kernels/bf16_gemm.h"
#include "kernels/simd.h"

namespace blocklab::kernels::neon_bf16 {

// The AArch64 kernel: BFDOT (Armv8.6-A FEAT_BF16, also in Armv8.2+ cores that list "bf16": Neoverse V1/V2,
// Graviton 3/4, Grace, Apple M2 and later), which adds two bf16 products into one float lane, as vdpbf16ps
// does on x86: the same packed layout of pairs along k, and the register blocking of the NEON sgemm kernel,
// 12 rows x 8 columns in 24 accumulators (two registers of 4 column pairs), each product taking its A pair
// from a lane of the packed panel (bfdot by element). The packing below is plain C++ (bf16_bits); it is a
// small part of the time, since each packed word feeds 12 or 8 dot products per pass.
//
// This file is compiled with -march=armv8.2-a+bf16 (CMakeLists.txt), as GCC and Clang both need for the
// bf16 intrinsics; bf16_gemm.cpp calls into it only when the CPU has the extension (bf16_isa()).

namespace {

inline uint32_t bf16_pair(float lo, float hi) {
  return static_cast<uint32_t>(bf16_bits(lo)) | static_cast<uint32_t>(bf16_bits(hi)) << 16;
}

template <int R>
BLOCKLAB_ALWAYS_INLINE void row_rows_a(float32x4_t (&acc)[kMr][2], bfloat16x8_t b0, bfloat16x8_t b1, const uint32_t* A,
                                       long lda, int kp) {
  const bfloat16x8_t a = vreinterpretq_bf16_u32(vld1q_dup_u32(A + R * lda + kp));
  acc[R][0] = vbfdotq_f32(acc[R][0], b0, a);
  acc[R][1] = vbfdotq_f32(acc[R][1], b1, a);
}

template <int R>
BLOCKLAB_ALWAYS_INLINE void row_panel_a(float32x4_t (&acc)[kMr][2], bfloat16x8_t b0, bfloat16x8_t b1,
                                        const bfloat16x8_t (&a_vec)[3]) {
  acc[R][0] = vbfdotq_laneq_f32(acc[R][0], b0, a_vec[R / 4], R % 4);
  acc[R][1] = vbfdotq_laneq_f32(acc[R][1], b1, a_vec[R / 4], R % 4);
}

}  // namespace

// Not transposed: Ab[r][kp], as on x86; rows up to the next multiple of MR are zero.
void pack_a_rows(uint32_t* Ab, const float* A, int lda, int i0, int rows, int k0, int kc) {
  const int kpc = (kc + 1) / 2;
  for (int r = 0; r < rows; ++r) {
    const float* src = A + static_cast<long>(i0 + r) * lda + k0;
    uint32_t* dst = Ab + static_cast<long>(r) * kPairsPerChunk;
    for (int kp = 0; kp < kc / 2; ++kp) dst[kp] = bf16_pair(src[2 * kp], src[2 * kp + 1]);
    if (kc % 2 != 0) dst[kpc - 1] = bf16_pair(src[kc - 1], 0.f);
  }
  const int padded = (rows + kMr - 1) / kMr * kMr;
  for (int r = rows; r < padded; ++r) std::fill_n(Ab + static_cast<long>(r) * kPairsPerChunk, kpc, 0u);
}

// Transposed: Ap[p][kp][r], with the row sums in k order in float (the same additions as the x86 packing).
void pack_a_panels(uint32_t* Ap, const float* A, int lda, int i0, int rows, int k0, int kc, float* row_sums) {
  const int kpc = (kc + 1) / 2;
  for (int p = 0; p * kMr < rows; ++p) {
    const int r_end = std::min(kMr, rows - p * kMr);
    uint32_t* dst = Ap + static_cast<long>(p) * kMr * kpc;
    const float* col = A + i0 + p * kMr;
    float sums[kMr] = {};
    if (row_sums != nullptr) std::copy_n(row_sums + p * kMr, r_end, sums);
    for (int kp = 0; kp < kpc; ++kp) {
      const float* x0 = col + static_cast<long>(k0 + 2 * kp) * lda;
      const bool second = 2 * kp + 1 < kc;
      for (int r = 0; r < kMr; ++r) {
        const float v0 = r < r_end ? x0[r] : 0.f, v1 = second && r < r_end ? x0[lda + r] : 0.f;
        dst[static_cast<long>(kp) * kMr + r] = bf16_pair(v0, v1);
        sums[r] += v0;
        if (second) sums[r] += v1;
      }
    }
    if (row_sums != nullptr) std::copy_n(sums, r_end, row_sums + p * kMr);
  }
}

// Bp[kp][j] = (op(B)[k0+2kp][j0+j], op(B)[k0+2kp+1][j0+j]) for one NR-column panel, zero beyond cols.
void pack_b_panel(uint32_t* dst, const float* B, int ldb, bool trans, int j0, int cols, int k0, int kc) {
  const int kpc = (kc + 1) / 2;
  for (int kp = 0; kp < kpc; ++kp) {
    const int k = k0 + 2 * kp;
    const bool second = 2 * kp + 1 < kc;
    uint32_t* d = dst + static_cast<long>(kp) * kNr;
    for (int j = 0; j < kNr; ++j) {
      if (j >= cols) {
        d[j] = 0;
        continue;
      }
      const float* b0 = trans ? B + static_cast<long>(j0 + j) * ldb + k : B + static_cast<long>(k) * ldb + j0 + j;
      const float x0 = *b0, x1 = !second ? 0.f : trans ? b0[1] : b0[ldb];
      d[j] = bf16_pair(x0, x1);
    }
  }
}

template <bool kRowsA>
void kernel(int kpc, const uint32_t* A, long lda, const uint32_t* Bp, float* C, int ldc, int mr, int nr,
            bool accumulate, const float* bias) {
  float32x4_t acc[kMr][2];
  for (int r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = vdupq_n_f32(0.f);
  const auto rows = std::make_integer_sequence<int, kMr>{};
  for (int kp = 0; kp < kpc; ++kp) {
    const bfloat16x8_t b0 = vreinterpretq_bf16_u32(vld1q_u32(Bp + kp * kNr));
    const bfloat16x8_t b1 = vreinterpretq_bf16_u32(vld1q_u32(Bp + kp * kNr + 4));
    if constexpr (kRowsA) {
      [&]<int... R>(std::integer_sequence<int, R...>) { (row_rows_a<R>(acc, b0, b1, A, lda, kp), ...); }(rows);
    } else {
      const uint32_t* a = A + static_cast<long>(kp) * kMr;
      const bfloat16x8_t a_vec[3] = {vreinterpretq_bf16_u32(vld1q_u32(a)), vreinterpretq_bf16_u32(vld1q_u32(a + 4)),
                                     vreinterpretq_bf16_u32(vld1q_u32(a + 8))};
      [&]<int... R>(std::integer_sequence<int, R...>) { (row_panel_a<R>(acc, b0, b1, a_vec), ...); }(rows);
    }
  }
  alignas(16) float tile[kMr * kNr];
  for (int r = 0; r < kMr; ++r) {
    vst1q_f32(tile + r * kNr, acc[r][0]);
    vst1q_f32(tile + r * kNr + 4, acc[r][1]);
  }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) {
      float& c = C[static_cast<long>(r) * ldc + j];
      c = accumulate ? c + tile[r * kNr + j] : tile[r * kNr + j];
      if (bias != nullptr) c += bias[j];
    }
}

void kernel_panel(int kpc, const uint32_t* A, const uint32_t* Bp, float* C, int ldc, int mr, int nr, bool accumulate,
                  const float* bias) {
  kernel<false>(kpc, A, 0, Bp, C, ldc, mr, nr, accumulate, bias);
}
void kernel_rows(int kpc, const uint32_t* A, long lda, const uint32_t* Bp, float* C, int ldc, int mr, int nr,
                 bool accumulate, const float* bias) {
  kernel<true>(kpc, A, lda, Bp, C, ldc, mr, nr, accumulate, bias);
}

long dot_loop(long steps, float* sink) {
  const bfloat16x8_t a = vreinterpretq_bf16_u32(vdupq_n_u32(0x3c003c00u)), b = a;  // pairs of 2^-7
  float32x4_t c[kDotChains];
  for (auto& x : c) x = vdupq_n_f32(0.f);
  for (long s = 0; s < steps; ++s) {
#pragma GCC unroll 24
    for (int i = 0; i < kDotChains; ++i) {
      c[i] = vbfdotq_f32(c[i], a, b);
      asm volatile("" : "+w"(c[i]));
    }
  }
  float32x4_t sum = c[0];
  for (int i = 1; i < kDotChains; ++i) sum = vaddq_f32(sum, c[i]);
  for (int i = 0; i < 4; ++i) vst1q_f32(sink + 4 * i, sum);
  return 8L * kDotChains;  // 4 float lanes, two products each
}

}  // namespace blocklab::kernels::neon_bf16
#endif  // __aarch64__
