#include "kernels/adam.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/bf16_gemm.h"
#include "kernels/isa.h"
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
  for (long i = 0; i < n; ++i) {
    const T gi = g[i] * grad_scale;
    const T mi = b1 * m[i] + one_minus_b1 * gi;
    const T vi = b2 * v[i] + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    if constexpr (kZero) g[i] = T(0);
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
double sum_of_squares(const T* x, long n) {
  constexpr int kLanes = 16;
  constexpr long kPrefetchAhead = 4096 / sizeof(T);
  double lane[kLanes] = {};
  long i = 0;
  on_isa([&](auto) {
    // the lanes in a local array (registers) for the loop: summed in place through the captured array, each
    // addition waited on the store before it, and a 124M-float gradient took 109 ms at 1 thread (4.5 GB/s)
    double acc[kLanes];
    for (int l = 0; l < kLanes; ++l) acc[l] = lane[l];
    long j = i;
    for (; j + kLanes <= n; j += kLanes) {
      // a gradient is read from memory once: asking for its lines 4 KiB ahead (past n too: a prefetch never
      // faults) took the norm of GPT-2's 124M floats in 4096-float chunks from 65-70 to 48-50 ms at one thread on
      // an AMX Xeon (the hardware prefetcher alone keeps too few lines in flight for one stream); the same sums
      __builtin_prefetch(x + j + kPrefetchAhead);
#pragma GCC unroll 16
      for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(x[j + l]) * static_cast<double>(x[j + l]);
    }
    for (int l = 0; l < kLanes; ++l) lane[l] = acc[l];
    i = j;
  });
  for (int l = 0; i < n; ++i, ++l) lane[l] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  for (int width = kLanes / 2; width > 0; width /= 2)  // pairwise: lane l += lane l + width
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

template void adam_update<float>(float*, float*, float*, float*, long, const AdamCoefficients<float>&, float, bool,
                                 uint16_t*);
template void adam_update<double>(double*, double*, double*, double*, long, const AdamCoefficients<double>&, double,
                                  bool, uint16_t*);
template double sum_of_squares<float>(const float*, long);
template double sum_of_squares<double>(const double*, long);

}  // namespace blocklab::kernels
