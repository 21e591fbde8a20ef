#pragma once
// A 16 x 16 transpose of 32-bit values in AVX-512 registers, for the GEMMs' packing of transposed operands
// (kernels/sgemm.cpp: floats; kernels/bf16_gemm.cpp: pairs of bf16 as 32-bit words).
#if defined(__x86_64__)
#include <immintrin.h>

namespace blocklab::kernels {

// r[0..16) := its transpose (r[j] lane k becomes r[k] lane j): 4 x 4 transposes of floats within each 128-bit
// lane (two rounds of unpacks), then a 4 x 4 transpose of the lanes themselves (two rounds of lane shuffles).
__attribute__((target("avx512f"))) inline void transpose16(__m512 (&r)[16]) {
  // The zero-masked forms with every lane on are the plain instructions; the plain intrinsics' undefined
  // pass-through operand draws GCC 12's -Wmaybe-uninitialized.
  constexpr __mmask16 kAll = 0xFFFF;
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(kAll, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(kAll, r[i], r[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {  // rows g .. g+3: r[g + c] lane L holds their column 4L + c
    const __m512d lo01 = _mm512_castps_pd(t[g]), hi01 = _mm512_castps_pd(t[g + 1]);
    const __m512d lo23 = _mm512_castps_pd(t[g + 2]), hi23 = _mm512_castps_pd(t[g + 3]);
    r[g] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xFF, lo01, lo23));
    r[g + 1] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xFF, lo01, lo23));
    r[g + 2] = _mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xFF, hi01, hi23));
    r[g + 3] = _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xFF, hi01, hi23));
  }
  for (int c = 0; c < 4; ++c) {  // lane L of r[4g + c] goes to lane g of row 4L + c
    const __m512 x0 = _mm512_maskz_shuffle_f32x4(kAll, r[c], r[4 + c], 0x44);
    const __m512 x1 = _mm512_maskz_shuffle_f32x4(kAll, r[c], r[4 + c], 0xEE);
    const __m512 x2 = _mm512_maskz_shuffle_f32x4(kAll, r[8 + c], r[12 + c], 0x44);
    const __m512 x3 = _mm512_maskz_shuffle_f32x4(kAll, r[8 + c], r[12 + c], 0xEE);
    t[c] = _mm512_maskz_shuffle_f32x4(kAll, x0, x2, 0x88);
    t[4 + c] = _mm512_maskz_shuffle_f32x4(kAll, x0, x2, 0xDD);
    t[8 + c] = _mm512_maskz_shuffle_f32x4(kAll, x1, x3, 0x88);
    t[12 + c] = _mm512_maskz_shuffle_f32x4(kAll, x1, x3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

}  // namespace blocklab::kernels
#endif
