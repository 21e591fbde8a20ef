#include "kernels/adam.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/bf16_gemm.h"
#include "kernels/isa.h"
#include "kernels/simd.h"
#include "util/error.h"
#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
constexpr long kChunk = 16384;  // elements per parallel work item (64 KiB of each float arena)

template <typename T, bool kZero>
BLOCKLAB_ALWAYS_INLINE void adam_chunk(T* __restrict p, T* __restrict g, T* __restrict m, T* __restrict v, long n,
                                       const AdamCoefficients<T>& c, T grad_scale) {
  const T b1 = c.beta1, b2 = c.beta2, one_minus_b1 = T(1) - c.beta1, one_minus_b2 = T(1) - c.beta2;
  const T step_size = c.step_size, inv_sqrt_bc2 = c.inv_sqrt_bc2, eps = c.eps, decay = c.decay;
  // The four arrays stream from memory once a step. Asking for their lines 2 KiB ahead, a block of 1 KiB at a time
  // (the element loop within each block vectorised as before): GPT-2's 124M parameters 163 -> 154 ms at one thread
  // and 99 -> 93 at two on an AMX Xeon (a harness, medians of 14 alternating calls); the hardware prefetcher alone
  // keeps too few lines in flight for four streams. The same arithmetic and bits.
  constexpr long kBlock = 1024 / sizeof(T), kAhead = 2048 / sizeof(T), kLine = 64 / sizeof(T);
  for (long i0 = 0; i0 < n; i0 += kBlock) {
    for (long l = 0; l < kBlock; l += kLine) {  // past n too: a prefetch never faults
      __builtin_prefetch(p + i0 + kAhead + l, 1);
      __builtin_prefetch(g + i0 + kAhead + l, 1);
      __builtin_prefetch(m + i0 + kAhead + l, 1);
      __builtin_prefetch(v + i0 + kAhead + l, 1);
    }
    const long end = std::min(n, i0 + kBlock);
    for (long i = i0; i < end; ++i) {
      const T gi = g[i] * grad_scale;
      const T mi = b1 * m[i] + one_minus_b1 * gi;
      const T vi = b2 * v[i] + one_minus_b2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
      if constexpr (kZero) g[i] = T(0);
    }
  }
}
}  // namespace

template <typename T>
void adam_update(T* p, T* g, T* m, T* v, long n, const AdamCoefficients<T>& c, T grad_scale, bool zero_grads,
                 uint16_t* p_bf16) {
  BLOCKLAB_PROFILE("adam_update");
  if constexpr (!std::is_same_v<T, float>) BLOCKLAB_CHECK(p_bf16 == nullptr, "adam_update: a bf16 copy of float only");
#pragma omp parallel for schedule(static)
  for (long start = 0; start < n; start += kChunk) {
    const long len = std::min(kChunk, n - start);
    on_isa([&](auto) {
      if (zero_grads)
        adam_chunk<T, true>(p + start, g + start, m + start, v + start, len, c, grad_scale);
      else
        adam_chunk<T, false>(p + start, g + start, m + start, v + start, len, c, grad_scale);
    });
    if constexpr (std::is_same_v<T, float>)
      if (p_bf16 != nullptr) round_to_bf16_streamed(p + start, p_bf16 + start, len);  // p still in L1/L2
  }
}

template <typename T>
void add_squares(double* lanes, const T* x, long n, long first_col) {
  constexpr int kLanes = kSquareLanes;
  constexpr long kPrefetchAhead = 4096 / sizeof(T);
  long i = 0;
  for (; i < n && (first_col + i) % kLanes != 0; ++i)  // up to a column that goes into lane 0
    lanes[(first_col + i) % kLanes] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  on_isa([&](auto) {
    // the lanes in a local array (registers) for the loop: summed in place through the captured array, each
    // addition waited on the store before it, and a 124M-float gradient took 109 ms at 1 thread (4.5 GB/s)
    double acc[kLanes];
    for (int l = 0; l < kLanes; ++l) acc[l] = lanes[l];
    long j = i;
    for (; j + kLanes <= n; j += kLanes) {
      // a gradient is read from memory once: asking for its lines 4 KiB ahead (past n too: a prefetch never
      // faults) took the norm of GPT-2's 124M floats in 4096-float chunks from 65-70 to 48-50 ms at one thread on
      // an AMX Xeon (the hardware prefetcher alone keeps too few lines in flight for one stream); the same sums
      __builtin_prefetch(x + j + kPrefetchAhead);
#pragma GCC unroll 16
      for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(x[j + l]) * static_cast<double>(x[j + l]);
    }
    for (int l = 0; l < kLanes; ++l) lanes[l] = acc[l];
    i = j;
  });
  for (int l = 0; i < n; ++i, ++l) lanes[l] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
}

#if defined(__x86_64__)
// add_squares_rows' loop over whole groups of 16 columns for four float rows at AVX-512, each 8 floats converted to
// double by one instruction from memory: GCC's code for the same loop in vector extensions converted each 8 through
// two 128-bit halves and shuffles (tuned for 256-bit vectors), and ran at 0.15 ns a float with the rows in L2.
BLOCKLAB_TARGET_AVX512 void add_squares_4rows_avx512(double* lanes, const float* x, long ldx, long j_begin,
                                                     long j_end) {
  __m512d lo[4], hi[4];
  for (int q = 0; q < 4; ++q) lo[q] = _mm512_loadu_pd(lanes + 16 * q), hi[q] = _mm512_loadu_pd(lanes + 16 * q + 8);
  // (_mm512_cvtps_pd leaves its merge source undefined, which GCC 12 warns about: an explicit zero, every lane set)
  const __m512d zero = _mm512_setzero_pd();
  for (long j = j_begin; j < j_end; j += 16)
    for (int q = 0; q < 4; ++q) {
      const __m512d a = _mm512_mask_cvtps_pd(zero, 0xff, _mm256_loadu_ps(x + q * ldx + j));
      const __m512d b = _mm512_mask_cvtps_pd(zero, 0xff, _mm256_loadu_ps(x + q * ldx + j + 8));
      lo[q] = _mm512_fmadd_pd(a, a, lo[q]);  // a * a is exact: the one rounding is the addition's
      hi[q] = _mm512_fmadd_pd(b, b, hi[q]);
    }
  for (int q = 0; q < 4; ++q) _mm512_storeu_pd(lanes + 16 * q, lo[q]), _mm512_storeu_pd(lanes + 16 * q + 8, hi[q]);
}
#endif

template <typename T>
void add_squares_rows(double* lanes, const T* x, long ldx, int rows, long n, long first_col) {
  constexpr int kLanes = kSquareLanes, kRows = 4;
  const long head = std::min(n, (kLanes - first_col % kLanes) % kLanes);  // columns before one that goes into lane 0
  const long body = head + (n - head) / kLanes * kLanes;
  int r = 0;
  for (; r + kRows <= rows; r += kRows) {
    double* l = lanes + static_cast<long>(r) * kLanes;
    const T* xr = x + r * ldx;
    if (head > 0)  // the columns before lane 0, and after the last whole 16, as add_squares takes them
      for (int q = 0; q < kRows; ++q) add_squares(l + q * kLanes, xr + q * ldx, head, first_col);
    bool done = false;
#if defined(__x86_64__)
    if constexpr (std::is_same_v<T, float>)
      if (isa() == Isa::Avx512) add_squares_4rows_avx512(l, xr, ldx, head, body), done = true;
#endif
    if (!done) on_isa([&](auto) {
      // four rows at once: eight independent chains of vector additions where one row has two (its 16 lanes: 8
      // doubles each), each row's lanes taking its columns in the same order as add_squares (a float's square is
      // exact in double, so a fused multiply-add rounds as the addition alone)
      using Lanes = simd::Vec<double>;
      Lanes lo[kRows], hi[kRows];
      for (int q = 0; q < kRows; ++q)
        lo[q] = simd::load<double>(l + q * kLanes), hi[q] = simd::load<double>(l + q * kLanes + 8);
      for (long j = head; j < body; j += kLanes)
        for (int q = 0; q < kRows; ++q) {
          const T* v = xr + q * ldx + j;
          const Lanes a = __builtin_convertvector(simd::load<T, 8 * sizeof(T)>(v), Lanes);
          const Lanes b = __builtin_convertvector(simd::load<T, 8 * sizeof(T)>(v + 8), Lanes);
          lo[q] += a * a;
          hi[q] += b * b;
        }
      for (int q = 0; q < kRows; ++q) simd::store(l + q * kLanes, lo[q]), simd::store(l + q * kLanes + 8, hi[q]);
    });
    if (body < n)
      for (int q = 0; q < kRows; ++q) add_squares(l + q * kLanes, xr + q * ldx + body, n - body, first_col + body);
  }
  for (; r < rows; ++r) add_squares(lanes + static_cast<long>(r) * kLanes, x + r * ldx, n, first_col);
}

double lanes_total(double* lanes) {
  for (int width = kSquareLanes / 2; width > 0; width /= 2)  // pairwise: lane l += lane l + width
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  return lanes[0];
}

template <typename T>
double sum_of_squares(const T* x, long n) {
  double lanes[kSquareLanes] = {};
  add_squares(lanes, x, n, 0);
  return lanes_total(lanes);
}

template <typename T>
void row_sums_of_squares(const T* x, long rows, long cols, long ld, double* out, [[maybe_unused]] bool parallel) {
  constexpr int kRows = 4;
#pragma omp parallel for schedule(static) if (parallel)
  for (long r = 0; r < rows; r += kRows) {
    const int n = static_cast<int>(std::min<long>(kRows, rows - r));
    double lanes[kRows * kSquareLanes] = {};
    add_squares_rows(lanes, x + r * ld, ld, n, cols, 0);
    for (int q = 0; q < n; ++q) out[r + q] = lanes_total(lanes + q * kSquareLanes);
  }
}

template void adam_update<float>(float*, float*, float*, float*, long, const AdamCoefficients<float>&, float, bool,
                                 uint16_t*);
template void adam_update<double>(double*, double*, double*, double*, long, const AdamCoefficients<double>&, double,
                                  bool, uint16_t*);
template double sum_of_squares<float>(const float*, long);
template double sum_of_squares<double>(const double*, long);
template void add_squares<float>(double*, const float*, long, long);
template void add_squares<double>(double*, const double*, long, long);
template void add_squares_rows<float>(double*, const float*, long, int, long, long);
template void add_squares_rows<double>(double*, const double*, long, int, long, long);
template void row_sums_of_squares<float>(const float*, long, long, long, double*, bool);
template void row_sums_of_squares<double>(const double*, long, long, long, double*, bool);

}  // namespace blocklab::kernels
