#include "kernels/adam.h"

#include <algorithm>
#include <cmath>

#include "kernels/isa.h"
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
void adam_update(T* p, T* g, T* m, T* v, long n, const AdamCoefficients<T>& c, T grad_scale, bool zero_grads) {
  BLOCKLAB_PROFILE("adam_update");
#pragma omp parallel for schedule(static)
  for (long start = 0; start < n; start += kChunk)
    on_isa([&](auto) {
      const long len = std::min(kChunk, n - start);
      if (zero_grads)
        adam_chunk<T, true>(p + start, g + start, m + start, v + start, len, c, grad_scale);
      else
        adam_chunk<T, false>(p + start, g + start, m + start, v + start, len, c, grad_scale);
    });
}

template <typename T>
double sum_of_squares(const T* x, long n) {
  constexpr int kLanes = 16;
  double lane[kLanes] = {};
  long i = 0;
  on_isa([&](auto) {
    // the lanes in a local array (registers) for the loop: summed in place through the captured array, each
    // addition waited on the store before it, and a 124M-float gradient took 109 ms at 1 thread (4.5 GB/s)
    double acc[kLanes];
    for (int l = 0; l < kLanes; ++l) acc[l] = lane[l];
    long j = i;
    for (; j + kLanes <= n; j += kLanes)
#pragma GCC unroll 16
      for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(x[j + l]) * static_cast<double>(x[j + l]);
    for (int l = 0; l < kLanes; ++l) lane[l] = acc[l];
    i = j;
  });
  for (int l = 0; i < n; ++i, ++l) lane[l] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  for (int width = kLanes / 2; width > 0; width /= 2)  // pairwise: lane l += lane l + width
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  return lane[0];
}

template void adam_update<float>(float*, float*, float*, float*, long, const AdamCoefficients<float>&, float, bool);
template void adam_update<double>(double*, double*, double*, double*, long, const AdamCoefficients<double>&, double,
                                  bool);
template double sum_of_squares<float>(const float*, long);
template double sum_of_squares<double>(const double*, long);

}  // namespace blocklab::kernels
