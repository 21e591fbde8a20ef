#pragma once
// Register-tiled building blocks of the attention kernels (kernels/attention.cpp, kernels/attention_gqa.cpp),
// for head sizes that are a multiple of kLanes (the common case). Every sum keeps a kLanes-wide
// accumulator in registers across its whole reduction, in a fixed order; a fixed-size inner loop over
// lanes is what the compiler turns into one vector instruction. All functions are forced inline into
// the kernel entry point of the running level (on_isa, kernels/isa.h); the multi-row tiles take the level
// as a template argument and size themselves to its registers.
#include <limits>
#include <type_traits>

#include "kernels/fast_math.h"
#include "kernels/isa.h"
#include "kernels/lane_reduce.h"
#include "kernels/simd.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace blocklab::kernels::attention_tiles {

inline constexpr int kLanes = 16;     // one AVX-512 register of floats; head sizes must be a multiple of it
inline constexpr int kRowBlock = 64;  // positions per register tile (4 registers): one tile covers T <= 64
inline int padded(int n) { return (n + kRowBlock - 1) / kRowBlock * kRowBlock; }

// The scratch part (counted in one head's parts; a group of heads takes that many parts from it) a thread works in:
// that of the first head or group it takes (`first` starts at -1), for all of them. Each head overwrites what it reads
// of its part before reading it, so the numbers are those of a part per head; but one part per thread stays in L1 and
// L2 from head to head, where a fresh part per head was written to lines fetched from memory first (the backward's dz,
// T x T floats, most of all). The first index is unique to its thread, nested or not: no two threads share a part.
inline long thread_scratch_part(long& first, long index) {
  if (first < 0) first = index;
  return first;
}

// The rows of the (batch, head) that follows head h of H under a static schedule over (batch, head), in a tensor
// whose heads are hs columns apart within rows `stride` apart of T rows per batch: the next head's columns, or
// after the last head the first head of the next batch. `at` is head h's first element.
template <typename Pointer>
Pointer next_head(Pointer at, int h, int H, int hs, int T_rows, long stride) {
  return h + 1 < H ? at + hs : at + T_rows * stride - static_cast<long>(h) * hs;
}

#if defined(__x86_64__)
// dst row i (dst_stride apart) = column i of the 8 x 8 floats at src (rows src_stride apart), in 24 shuffles:
// a strided scalar copy costs a load and a store per element, and took a tenth of attention's forward at AVX2.
// Not forced inline (a forced inline into the level-less transpose_head is refused); the level's flattened entry
// point inlines it.
__attribute__((target("avx2"))) inline void transpose_8x8(float* dst, long dst_stride, const float* src,
                                                          long src_stride) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + k * src_stride);
#pragma GCC unroll 4
  for (int k = 0; k < 8; k += 2) {  // pairs of rows interleaved: (a0 b0 a1 b1 | a4 b4 a5 b5), (a2 b2 a3 b3 | ...)
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
#pragma GCC unroll 2
  for (int k = 0; k < 8; k += 4) {  // four rows' columns c and c + 4 in each register: (a0 b0 c0 d0 | a4 b4 c4 d4), ...
    r[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
    r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {  // the halves of rows 0-3 and 4-7 joined
    _mm256_storeu_ps(dst + c * dst_stride, _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
    _mm256_storeu_ps(dst + (c + 4) * dst_stride, _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
  }
}
#endif

#if defined(__x86_64__)
// lane_reduce's tree over 16 float lanes (one AVX-512 register, or two AVX2 registers: lanes 0-7, 8-15), in its
// order: lanes l + 8 into l, then l + 4, l + 2, l + 1. Max as lane_max takes it: b > a ? b : a, a the lower lane
// (maxps(b, a) returns a when they are unordered or equal). Not forced inline (see transpose_8x8); the entry
// points take the lanes by address, as a function compiled without AVX may not pass AVX registers (Clang refuses,
// GCC warns of the ABI), and the level's flattened entry point inlines them, the lanes staying in registers.
__attribute__((target("avx2,fma"))) inline float tree_sum_halves(__m256 lo, __m256 hi) {
  const __m256 x = _mm256_add_ps(lo, hi);                                                     // l += l + 8
  __m128 y = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));              // l += l + 4
  y = _mm_add_ps(y, _mm_movehl_ps(y, y));                                                     // l += l + 2
  return _mm_cvtss_f32(_mm_add_ps(y, _mm_shuffle_ps(y, y, 0x1)));                              // l += l + 1
}
__attribute__((target("avx2,fma"))) inline float tree_max_halves(__m256 lo, __m256 hi) {
  const __m256 x = _mm256_max_ps(hi, lo);
  __m128 y = _mm_max_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  y = _mm_max_ps(_mm_movehl_ps(y, y), y);
  return _mm_cvtss_f32(_mm_max_ps(_mm_shuffle_ps(y, y, 0x1), y));
}
__attribute__((target("avx2,fma"))) inline float tree_sum_avx2(const float* lanes) {
  return tree_sum_halves(_mm256_loadu_ps(lanes), _mm256_loadu_ps(lanes + 8));
}
__attribute__((target("avx2,fma"))) inline float tree_max_avx2(const float* lanes) {
  return tree_max_halves(_mm256_loadu_ps(lanes), _mm256_loadu_ps(lanes + 8));
}
// At AVX-512 the lanes are one register: its halves (the zero-masked extract with every lane on is the plain
// instruction; the plain intrinsics, _mm512_castps512_ps256 included, pass GCC 12 an undefined operand that draws
// -Wmaybe-uninitialized).
__attribute__((target("avx512f"))) inline float tree_sum_avx512(const float* lanes) {
  const __m512d x = _mm512_castps_pd(_mm512_loadu_ps(lanes));
  return tree_sum_halves(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, x, 0)),
                         _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, x, 1)));
}
__attribute__((target("avx512f"))) inline float tree_max_avx512(const float* lanes) {
  const __m512d x = _mm512_castps_pd(_mm512_loadu_ps(lanes));
  return tree_max_halves(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, x, 0)),
                         _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, x, 1)));
}
// the first `count` of the 16 values at x to p, or p's first `count` to x with the other lanes 0 (neither touches
// memory past them), count < 16
__attribute__((target("avx512f"))) inline void store_first_avx512(float* p, const float* x, int count) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1), _mm512_loadu_ps(x));
}
__attribute__((target("avx512f"))) inline void load_first_avx512(float* x, const float* p, int count) {
  _mm512_storeu_ps(x, _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), p));
}
#endif

// Softmax rows in registers. kReduceLanes lanes (lane_reduce.h) are NA = kReduceLanes / W vectors of the level's
// W floats; block b of kReduceLanes positions adds position b + l to lane l, as lane_sum does, and the lanes are
// then combined by lane_reduce's pairwise tree (in registers at AVX2 and AVX-512). A row is the same at every
// level: only the register width differs. (lane_sum and lane_max, compiled for a row of any length, kept their
// 16 lanes on the stack and ran up to 15 positions one at a time: the softmax took 45% of attention's forward at
// T = 63, cache-resident.)
template <Isa I>
struct SoftmaxLanes {
  static constexpr int VB = kVectorBytes<I>;
  using V = simd::Vec<float, VB>;
  static constexpr int W = simd::kWidth<float, VB>, NA = kReduceLanes / W;
  static_assert(NA * W == kReduceLanes);
  // position index of each lane of the first vector, as floats
  static BLOCKLAB_ALWAYS_INLINE V iota() {
    V v{};
#pragma GCC unroll 16
    for (int l = 0; l < W; ++l) v[l] = static_cast<float>(l);
    return v;
  }
  // the first `count` lanes of x to p, count < W
  static BLOCKLAB_ALWAYS_INLINE void store_first(float* p, const V& x, int count) {
#if defined(__x86_64__)
    if constexpr (I == Isa::Avx512) {
      store_first_avx512(p, reinterpret_cast<const float*>(&x), count);
      return;
    }
#endif
    for (int l = 0; l < count; ++l) p[l] = x[l];
  }
  // p[0:count) in the first lanes, 0 in the others, count < W
  static BLOCKLAB_ALWAYS_INLINE V load_first(const float* p, int count) {
    V x{};
#if defined(__x86_64__)
    if constexpr (I == Isa::Avx512) {
      load_first_avx512(reinterpret_cast<float*>(&x), p, count);
      return x;
    }
#endif
    for (int l = 0; l < count; ++l) x[l] = p[l];
    return x;
  }
  // lane_reduce's tree over the lanes in memory, for the levels without shuffles here (lanes[l] = combine(lanes[l],
  // lanes[l + w]))
  template <typename Combine>
  static BLOCKLAB_ALWAYS_INLINE float tree_in_memory(const V (&acc)[NA], Combine combine) {
    float lanes[kReduceLanes];
    for (int j = 0; j < NA; ++j) simd::store<float, VB>(lanes + j * W, acc[j]);
    for (int w = kReduceLanes / 2; w > 0; w /= 2)
      for (int l = 0; l < w; ++l) lanes[l] = combine(lanes[l], lanes[l + w]);
    return lanes[0];
  }
  static BLOCKLAB_ALWAYS_INLINE float tree_sum(const V (&acc)[NA]) {
#if defined(__x86_64__)
    if constexpr (I == Isa::Avx512)
      return tree_sum_avx512(reinterpret_cast<const float*>(&acc[0]));
    else if constexpr (I == Isa::Avx2)
      return tree_sum_avx2(reinterpret_cast<const float*>(&acc[0]));  // acc[0], acc[1]: lanes 0-7, 8-15
#endif
    return tree_in_memory(acc, [](float a, float b) { return a + b; });
  }
  static BLOCKLAB_ALWAYS_INLINE float tree_max(const V (&acc)[NA]) {
#if defined(__x86_64__)
    if constexpr (I == Isa::Avx512)
      return tree_max_avx512(reinterpret_cast<const float*>(&acc[0]));
    else if constexpr (I == Isa::Avx2)
      return tree_max_avx2(reinterpret_cast<const float*>(&acc[0]));
#endif
    return tree_in_memory(acc, [](float a, float b) { return b > a ? b : a; });
  }
};

// row[0:len) = softmax(z[0:n)) followed by zeros, 1 <= n <= len. z is scratch with room for n rounded up to
// kReduceLanes; it is overwritten. The max, the exponentials and their lane sum run over whole vectors: the room
// past n is -inf for the max and +0 in the sum. Double precision (the gradient checks) runs the plain lane loops.
template <Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void softmax_row(T* row, int len, T* z, int n) {
  if constexpr (std::is_same_v<T, float>) {
    using L = SoftmaxLanes<I>;
    using V = typename L::V;
    constexpr int W = L::W, NA = L::NA, VB = L::VB;
    const int whole = (n + kReduceLanes - 1) / kReduceLanes * kReduceLanes;
    const V iota = L::iota(), minus_inf = V{} - std::numeric_limits<float>::infinity();
    const float count = static_cast<float>(n);
    V acc[NA];
#pragma GCC unroll 4
    for (int j = 0; j < NA; ++j) acc[j] = minus_inf;
    for (int b = 0; b < whole; b += kReduceLanes)
#pragma GCC unroll 4
      for (int j = 0; j < NA; ++j) {
        V x = simd::load<float, VB>(z + b + j * W);
        x = iota + static_cast<float>(b + j * W) < count ? x : minus_inf;  // past the window: no candidate
        acc[j] = x > acc[j] ? x : acc[j];
      }
    const V maxval = V{} + L::tree_max(acc);
#pragma GCC unroll 4
    for (int j = 0; j < NA; ++j) acc[j] = V{};
    for (int b = 0; b < whole; b += kReduceLanes)
#pragma GCC unroll 4
      for (int j = 0; j < NA; ++j) {
        float* zb = z + b + j * W;
        const V e = exp_approx_of(simd::load<float, VB>(zb) - maxval);
        const V kept = iota + static_cast<float>(b + j * W) < count ? e : V{};  // past the window: +0
        simd::store<float, VB>(zb, kept);
        acc[j] += kept;
      }
    const V inv = V{} + 1.0f / L::tree_sum(acc);
    // whole vectors of the row, then its last part; z is +0 from n to `whole`, and the row is 0 past it
    int s = 0;
    for (; s + W <= len; s += W)
      simd::store<float, VB>(row + s, s < whole ? simd::load<float, VB>(z + s) * inv : V{});
    if (s < len) L::store_first(row + s, s < whole ? simd::load<float, VB>(z + s) * inv : V{}, len - s);
  } else {
    const T maxval = lane_max(z, n);
    for (int s = 0; s < n; ++s) row[s] = fast_exp(z[s] - maxval);
    const T inv = T(1) / lane_sum(row, n);
    for (int s = 0; s < n; ++s) row[s] *= inv;
    for (int s = n; s < len; ++s) row[s] = 0;
  }
}

// The softmax's backward for one row: dz[s] = p[s] (dp[s] - sum_s' p[s'] dp[s']) * scale for s < n, 1 <= n <= len;
// p has len values, dp room for n rounded up to kReduceLanes (what lies past n is not read: it may be garbage).
// The inner sum in lane_dot's order, over whole vectors up to the row's end.
template <Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void softmax_backward_row(T* dz, const T* p, const T* dp, int n, int len, T scale) {
  if constexpr (std::is_same_v<T, float>) {
    using L = SoftmaxLanes<I>;
    using V = typename L::V;
    constexpr int W = L::W, NA = L::NA, VB = L::VB;
    const int whole = (n + kReduceLanes - 1) / kReduceLanes * kReduceLanes;
    const int m = whole < len ? whole : len;  // p is read no further than its row
    const V iota = L::iota();
    const float count = static_cast<float>(n);
    V acc[NA];
#pragma GCC unroll 4
    for (int j = 0; j < NA; ++j) acc[j] = V{};
    int b = 0;
    for (; b + kReduceLanes <= m; b += kReduceLanes)
#pragma GCC unroll 4
      for (int j = 0; j < NA; ++j) {
        const V term = simd::load<float, VB>(p + b + j * W) * simd::load<float, VB>(dp + b + j * W);
        acc[j] += iota + static_cast<float>(b + j * W) < count ? term : V{};
      }
    float inner;
    if (b < n) {  // the row's last block runs past its end: its terms one at a time, each into its lane
      float lanes[kReduceLanes];
      for (int j = 0; j < NA; ++j) simd::store<float, VB>(lanes + j * W, acc[j]);
      for (int l = 0; b + l < n; ++l) lanes[l] += p[b + l] * dp[b + l];
      for (int w = kReduceLanes / 2; w > 0; w /= 2)
        for (int l = 0; l < w; ++l) lanes[l] += lanes[l + w];
      inner = lanes[0];
    } else {
      inner = L::tree_sum(acc);
    }
    const V vinner = V{} + inner, vscale = V{} + scale;
    int s = 0;
    for (; s + W <= n; s += W)
      simd::store<float, VB>(dz + s, simd::load<float, VB>(p + s) * (simd::load<float, VB>(dp + s) - vinner) * vscale);
    if (s < n)  // p's last row may end here
      L::store_first(dz + s, L::load_first(p + s, n - s) * (simd::load<float, VB>(dp + s) - vinner) * vscale, n - s);
  } else {
    const T inner = lane_dot(p, dp, n);
    for (int s = 0; s < n; ++s) dz[s] = p[s] * (dp[s] - inner) * scale;
  }
}

// xt (hs, Tp) = x^T for the T rows of one head (x rows C3 apart); padding columns zeroed. At AVX2 and AVX-512,
// float blocks of 8 x 8 are moved by transpose_8x8 (the same values: a transpose only moves them).
template <Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void transpose_head(T* xt, const T* x, int Tn, int Tp, int hs, long C3) {
  int s0 = 0;
#if defined(__x86_64__)
  if constexpr ((I == Isa::Avx2 || I == Isa::Avx512) && std::is_same_v<T, float>) {
    const int i8 = hs / 8 * 8;
    for (; s0 + 8 <= Tn; s0 += 8) {
      for (int i = 0; i < i8; i += 8) transpose_8x8(xt + static_cast<long>(i) * Tp + s0, Tp, x + s0 * C3 + i, C3);
      for (int i = i8; i < hs; ++i)
        for (int s = s0; s < s0 + 8; ++s) xt[static_cast<long>(i) * Tp + s] = x[s * C3 + i];
    }
  }
#endif
  for (int i = 0; i < hs; ++i) {
    T* dst = xt + static_cast<long>(i) * Tp;
    for (int s = s0; s < Tn; ++s) dst[s] = x[s * C3 + i];
    for (int s = Tn; s < Tp; ++s) dst[s] = 0;
  }
}

// row[0:n] = sum_i a[i] * xt[i][0:n]  (a: hs values). A tile of W positions keeps W / kLanes
// independent accumulator registers, which hide the FMA latency; the causal window n grows with the
// query row, so the tile is only as wide as the window needs (positions past n read zero padding).
// row must have room for n rounded up to kLanes: the entries past n receive zeros.
// VB: the bytes of one vector register of the running level (kVectorBytes<I>). At a level narrower than 64-byte
// vectors GCC splits them into pieces and builds each broadcast through the stack, several times slower than
// the level's own registers. The sums do not depend on VB.
template <int W, typename T, int VB>
BLOCKLAB_ALWAYS_INLINE void row_times_transposed_tile(T* row, const T* a, const T* xt, int Tp, int hs, T scale) {
  using namespace simd;
  using V = Vec<T, VB>;
  constexpr int L = kWidth<T, VB>, NV = W / L;
  V acc[NV];
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) acc[v] = V{};
  for (int i = 0; i < hs; ++i) {
    const V ai = broadcast<T, VB>(a[i] * scale);
    const T* x = xt + static_cast<long>(i) * Tp;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[v] += ai * load<T, VB>(x + v * L);
  }
  // The whole tile is stored: row has room up to the padded length, and the entries past `valid`
  // are products with xt's zero padding.
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) store<T, VB>(row + v * L, acc[v]);
}

template <Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void row_times_transposed(T* row, const T* a, const T* xt, int n, int Tp, int hs, T scale) {
  constexpr int VB = kVectorBytes<I>;
  for (int sb = 0; sb < n; sb += kRowBlock) {
    const int valid = n - sb < kRowBlock ? n - sb : kRowBlock;
    const T* x = xt + sb;
    if (valid > 3 * kLanes)
      row_times_transposed_tile<4 * kLanes, T, VB>(row + sb, a, x, Tp, hs, scale);
    else if (valid > 2 * kLanes)
      row_times_transposed_tile<3 * kLanes, T, VB>(row + sb, a, x, Tp, hs, scale);
    else if (valid > kLanes)
      row_times_transposed_tile<2 * kLanes, T, VB>(row + sb, a, x, Tp, hs, scale);
    else
      row_times_transposed_tile<kLanes, T, VB>(row + sb, a, x, Tp, hs, scale);
  }
}

// The same for kQueryRows rows of `a` at once (a_stride apart; rows past `rows` repeat the last one and
// land in out rows that the caller ignores): out row r, out_stride apart, = sum_i a_r[i] * xt[i][0:n], each
// row's sums the same, element for element and in the same order, as row_times_transposed's. The rows share
// each load of xt and run R x W / kLanes independent accumulator chains instead of W / kLanes: a narrow
// causal window (the first query rows) no longer waits on one chain's FMA latency.
inline constexpr int kQueryRows = 4;

// a: the rows already multiplied by the scale (each value broadcast straight from memory).
template <int W, int R, typename T, int VB = 64>
BLOCKLAB_ALWAYS_INLINE void rows_times_transposed_tile(T* out, long out_stride, const T* const* a, const T* xt, int Tp,
                                                       int hs) {
  using namespace simd;
  using V = Vec<T, VB>;
  constexpr int L = kWidth<T, VB>, NV = W / L;
  V acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = V{};
  for (int i = 0; i < hs; ++i) {
    const T* x = xt + static_cast<long>(i) * Tp;
    V xv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) xv[v] = load<T, VB>(x + v * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V ai = broadcast_from<T, VB>(a[r] + i);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] += ai * xv[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) store<T, VB>(out + r * out_stride + v * L, acc[r][v]);
}

// out rows r < rows (out_stride apart, each with room for n rounded up to kLanes) = a_r . xt over the
// window n of the last row, a_r = a + r * a_stride; rows <= kQueryRows. Every tile keeps 8 accumulator
// registers of the level I: with AVX-512 (32 registers) up to 64 positions of two rows or 32 of four; with
// AVX2 and SSE (16 registers) 2 registers' width (16 or 8 positions) of the four rows, with NEON (32 registers
// of 4 floats) 4 registers' width (16 positions). The sums are the same
// at every level, element for element: each runs over i in order.
// scaled: room for kQueryRows * hs values, overwritten with the rows times the scale (the products the sums
// take, computed once instead of once per tile).
template <Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void rows_times_transposed(T* out, long out_stride, const T* a, long a_stride, int rows,
                                                  const T* xt, int n, int Tp, int hs, T scale, T* scaled) {
  const T* a_rows[kQueryRows];
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < hs; ++i) scaled[r * hs + i] = a[r * a_stride + i] * scale;
  for (int r = 0; r < kQueryRows; ++r) a_rows[r] = scaled + (r < rows ? r : rows - 1) * hs;
  if constexpr (I != Isa::Avx512) {
    // two registers' width with 16 registers (8 accumulators), four with NEON's 32 (16 accumulators)
    constexpr int VB = kVectorBytes<I>, W = kVectorRegisters<I> / 8 * simd::kWidth<T, VB>;
    for (int sb = 0; sb < n; sb += W)
      rows_times_transposed_tile<W, kQueryRows, T, VB>(out + sb, out_stride, a_rows, xt + sb, Tp, hs);
    return;
  }
  for (int sb = 0; sb < n; sb += kRowBlock) {
    const int valid = n - sb < kRowBlock ? n - sb : kRowBlock;
    const T* x = xt + sb;
    T* o = out + sb;
    // 8 accumulator registers (two rows at a time for the wide tiles, four for the narrow)
    if (valid > 3 * kLanes) {
      rows_times_transposed_tile<4 * kLanes, 2>(o, out_stride, a_rows, x, Tp, hs);
      if (rows > 2) rows_times_transposed_tile<4 * kLanes, 2>(o + 2 * out_stride, out_stride, a_rows + 2, x, Tp, hs);
    } else if (valid > 2 * kLanes) {
      rows_times_transposed_tile<3 * kLanes, 2>(o, out_stride, a_rows, x, Tp, hs);
      if (rows > 2) rows_times_transposed_tile<3 * kLanes, 2>(o + 2 * out_stride, out_stride, a_rows + 2, x, Tp, hs);
    } else if (valid > kLanes) {
      rows_times_transposed_tile<2 * kLanes, 4>(o, out_stride, a_rows, x, Tp, hs);
    } else {
      rows_times_transposed_tile<kLanes, 4>(o, out_stride, a_rows, x, Tp, hs);
    }
  }
}

// out[0:W] (+)= sum_{s<n} w[s * w_stride] * x_s[0:W], x rows `stride` apart. Even and odd s go to
// separate accumulators (then added), so two dependency chains run side by side.
template <int W, typename T, int VB>
BLOCKLAB_ALWAYS_INLINE void weighted_rows_block(T* out, const T* w, long w_stride, const T* x, int n, long stride, bool accumulate) {
  using namespace simd;
  using V = Vec<T, VB>;
  constexpr int L = kWidth<T, VB>, NV = W / L;
  V even[NV], odd[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) even[v] = odd[v] = V{};
  int s = 0;
  for (; s + 1 < n; s += 2) {
    const V w0 = broadcast_from<T, VB>(w + s * w_stride), w1 = broadcast_from<T, VB>(w + (s + 1) * w_stride);
    const T* x0 = x + s * stride;
    const T* x1 = x0 + stride;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      even[v] += w0 * load<T, VB>(x0 + v * L);
      odd[v] += w1 * load<T, VB>(x1 + v * L);
    }
  }
  if (s < n) {
    const V w0 = broadcast_from<T, VB>(w + s * w_stride);
    const T* x0 = x + s * stride;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) even[v] += w0 * load<T, VB>(x0 + v * L);
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const V sum = even[v] + odd[v];
    store<T, VB>(out + v * L, accumulate ? load<T, VB>(out + v * L) + sum : sum);
  }
}

// out[0:hs] (+)= sum_{s<n} w[s * w_stride] * x_s[0:hs], in blocks of 32 then 16 with AVX-512 (two registers,
// then one), of four registers of the level I otherwise (8 accumulators of 16 registers). Each element's sum
// is the same in any block.
template <Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void weighted_rows(T* out, const T* w, long w_stride, const T* x, int n, int hs, long stride, bool accumulate) {
  constexpr int VB = kVectorBytes<I>, W = VB == 64 ? 2 * kLanes : 4 * simd::kWidth<T, VB>;
  int ib = 0;
  for (; ib + W <= hs; ib += W) weighted_rows_block<W, T, VB>(out + ib, w, w_stride, x + ib, n, stride, accumulate);
  for (; ib < hs; ib += kLanes) weighted_rows_block<kLanes, T, VB>(out + ib, w, w_stride, x + ib, n, stride, accumulate);
}

// The same sums for kQueryRows rows at once, sharing each load of x: out_r[0:hs] (+)= sum over
// t in [first[r], end[r]) of w_r[(t - first[r]) * w_stride] * x_t[0:hs], x_t = x + t * stride. Row r's terms
// go, in increasing t, to the even or odd accumulator by the parity of t - first[r], exactly as
// weighted_rows_block puts them (local index s = t - first[r]), then even + odd: each row's result is
// weighted_rows's, bit for bit. The windows may differ in both ends (query rows: first 0, end t + 1; key rows:
// first s, end T); the stretch where all rows are active runs R x 2 x W / kLanes accumulator chains.
// Terms s in [from, to) of one row (local indices; weight w[s * w_stride], row x + s * stride) into its even
// and odd accumulators. Every product is written next to the add it feeds (a product shared by two
// branches would be hoisted and then not fused with its add, which changes the bits).
template <int NV, typename T, int VB>
BLOCKLAB_ALWAYS_INLINE void weighted_span(simd::Vec<T, VB> (&even)[NV], simd::Vec<T, VB> (&odd)[NV], const T* w, long w_stride,
                                          const T* x, long stride, int from, int to) {
  using namespace simd;
  constexpr int L = kWidth<T, VB>;
  using V = Vec<T, VB>;
  int s = from;
  if (s < to && (s & 1) != 0) {
    const V w1 = broadcast_from<T, VB>(w + s * w_stride);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) odd[v] += w1 * load<T, VB>(x + s * stride + v * L);
    ++s;
  }
  for (; s + 1 < to; s += 2) {
    const V w0 = broadcast_from<T, VB>(w + s * w_stride), w1 = broadcast_from<T, VB>(w + (s + 1) * w_stride);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      even[v] += w0 * load<T, VB>(x + s * stride + v * L);
      odd[v] += w1 * load<T, VB>(x + (s + 1) * stride + v * L);
    }
  }
  if (s < to) {
    const V w0 = broadcast_from<T, VB>(w + s * w_stride);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) even[v] += w0 * load<T, VB>(x + s * stride + v * L);
  }
}

template <int W, int R, typename T, int VB = 64>
BLOCKLAB_ALWAYS_INLINE void weighted_rows_multi_block(T* const* out, const T* const* w, long w_stride, const T* x,
                                                      long stride, const int* first, const int* end, bool accumulate) {
  using namespace simd;
  constexpr int L = kWidth<T, VB>, NV = W / L;
  using V = Vec<T, VB>;
  V even[R][NV], odd[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) even[r][v] = odd[r][v] = V{};
  int lo = first[0], hi = end[0];
  for (int r = 1; r < R; ++r) {
    lo = first[r] > lo ? first[r] : lo;
    hi = end[r] < hi ? end[r] : hi;
  }
  if (hi < lo) hi = lo;
  // rows that start before the shared stretch
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    weighted_span<NV, T, VB>(even[r], odd[r], w[r], w_stride, x + first[r] * stride, stride, 0, lo - first[r]);
  // the shared stretch, two positions at a time: a row whose local index at lo is odd has its roles swapped
  bool swapped[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    swapped[r] = ((lo - first[r]) & 1) != 0;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const V e = even[r][v], o = odd[r][v];
      even[r][v] = swapped[r] ? o : e;
      odd[r][v] = swapped[r] ? e : o;
    }
  }
  int t = lo;
  // each row's weight pointer, advanced by two positions a step (read from w[] and first[] on every step,
  // GCC spent more instructions on the addresses than on the multiply-adds)
  const T* wr[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) wr[r] = w[r] + static_cast<long>(lo - first[r]) * w_stride;
  const T* x0 = x + static_cast<long>(lo) * stride;
  for (; t + 1 < hi; t += 2, x0 += 2 * stride) {
    const T* x1 = x0 + stride;
    V xv0[NV], xv1[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      xv0[v] = load<T, VB>(x0 + v * L);
      xv1[v] = load<T, VB>(x1 + v * L);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const V w0 = broadcast_from<T, VB>(wr[r]), w1 = broadcast_from<T, VB>(wr[r] + w_stride);
      wr[r] += 2 * w_stride;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        even[r][v] += w0 * xv0[v];
        odd[r][v] += w1 * xv1[v];
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const V e = even[r][v], o = odd[r][v];
      even[r][v] = swapped[r] ? o : e;
      odd[r][v] = swapped[r] ? e : o;
    }
  // what is left of each row after the shared stretch
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    weighted_span<NV, T, VB>(even[r], odd[r], w[r], w_stride, x + first[r] * stride, stride, t - first[r], end[r] - first[r]);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const V sum = even[r][v] + odd[r][v];
      store<T, VB>(out[r] + v * L, accumulate ? load<T, VB>(out[r] + v * L) + sum : sum);
    }
}

// out[r][0:hs] (+)= sum_{t in [first[r], end[r])} w[r][(t - first[r]) * w_stride] * x_t[0:hs] for kQueryRows rows,
// each bit for bit as weighted_rows(out[r], w[r], w_stride, x + first[r] * stride, end[r] - first[r], ...)
// Tiles of the level I: with AVX-512 all four rows over 32 (then 16) columns, 16 accumulator registers of
// 32; with AVX2 and SSE two rows at a time over two registers' width (16 or 8 floats), 8 of 16. Either way
// each row's sums are the same.
template <Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void weighted_rows_multi(T* const* out, const T* const* w, long w_stride, const T* x,
                                                const int* first, const int* end, int hs, long stride,
                                                bool accumulate) {
  if constexpr (I != Isa::Avx512) {
    constexpr int VB = kVectorBytes<I>, W = 2 * simd::kWidth<T, VB>, R = 2;
    for (int r0 = 0; r0 < kQueryRows; r0 += R)
      for (int ib = 0; ib < hs; ib += W) {
        T* o[R];
        for (int r = 0; r < R; ++r) o[r] = out[r0 + r] + ib;
        weighted_rows_multi_block<W, R, T, VB>(o, w + r0, w_stride, x + ib, stride, first + r0, end + r0, accumulate);
      }
    return;
  }
  constexpr int R = kQueryRows;
  int ib = 0;
  for (; ib + 2 * kLanes <= hs; ib += 2 * kLanes) {
    T* o[R];
    for (int r = 0; r < R; ++r) o[r] = out[r] + ib;
    weighted_rows_multi_block<2 * kLanes, R>(o, w, w_stride, x + ib, stride, first, end, accumulate);
  }
  for (; ib < hs; ib += kLanes) {
    T* o[R];
    for (int r = 0; r < R; ++r) o[r] = out[r] + ib;
    weighted_rows_multi_block<kLanes, R>(o, w, w_stride, x + ib, stride, first, end, accumulate);
  }
}

// The causal query rows t0 .. t0+rows-1 (rows <= kQueryRows): out_t (+)= sum_{s <= t} w[t][s] x_s, w's rows Tn
// apart, out's out_stride apart, x's stride apart. A full group shares each load of x (weighted_rows_multi);
// a shorter last group takes one row at a time. Either way each row is bit for bit weighted_rows'.
template <Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void causal_weighted_query_rows(T* out, long out_stride, const T* w, int Tn, int t0, int rows,
                                                       const T* x, int hs, long stride, bool accumulate) {
  if (rows == kQueryRows) {
    T* o[kQueryRows];
    const T* wr[kQueryRows];
    int first[kQueryRows], end[kQueryRows];
    for (int r = 0; r < kQueryRows; ++r) {
      o[r] = out + (t0 + r) * out_stride;
      wr[r] = w + static_cast<long>(t0 + r) * Tn;
      first[r] = 0;
      end[r] = t0 + r + 1;
    }
    weighted_rows_multi<I>(o, wr, 1, x, first, end, hs, stride, accumulate);
  } else {
    for (int t = t0; t < t0 + rows; ++t)
      weighted_rows<I>(out + t * out_stride, w + static_cast<long>(t) * Tn, 1, x, t + 1, hs, stride, accumulate);
  }
}

}  // namespace blocklab::kernels::attention_tiles
