#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/fast_math.h"
#include "kernels/isa.h"
#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
int count_selected(const uint8_t* mask, int N) {
  int count = 0;
  for (int n = 0; n < N; ++n) count += mask[n] != 0;
  return count;
}

struct RowSoftmax {
  double max, sum;  // the row's largest logit, and sum_v exp(z_v - max)
};

// One float row: e[v] = exp(z[v] - max) into out; 16 lanes for the max and the sum (lane v % 16), combined
// pairwise, so that the order is fixed whatever the level. in_place: out is z itself, said to the compiler so
// that it vectorises the loops (for two pointers that may overlap GCC checks at run time, and falls back to
// scalar code where they do: 4x slower on GPT-2's head).
template <bool in_place>
BLOCKLAB_ALWAYS_INLINE RowSoftmax exp_row(float* out, const float* logits, int V) {
  const float* z = in_place ? out : logits;
  constexpr int kLanes = 16;
  float lane_max[kLanes], lane_sum[kLanes] = {};
  for (int l = 0; l < kLanes; ++l) lane_max[l] = l < V ? z[l] : z[0];
  int v = 0;
  for (; v + kLanes <= V; v += kLanes)
#pragma GCC unroll 16
    for (int l = 0; l < kLanes; ++l) lane_max[l] = z[v + l] > lane_max[l] ? z[v + l] : lane_max[l];
  for (int l = 0; v < V; ++v, ++l) lane_max[l] = z[v] > lane_max[l] ? z[v] : lane_max[l];
  float maxval = lane_max[0];
  for (int l = 1; l < kLanes; ++l) maxval = lane_max[l] > maxval ? lane_max[l] : maxval;
  for (v = 0; v + kLanes <= V; v += kLanes)
#pragma GCC unroll 16
    for (int l = 0; l < kLanes; ++l) {
      const float e = exp_approx(z[v + l] - maxval);
      out[v + l] = e;
      lane_sum[l] += e;
    }
  for (int l = 0; v < V; ++v, ++l) {
    const float e = exp_approx(z[v] - maxval);
    out[v] = e;
    lane_sum[l] += e;
  }
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int l = 0; l < width; ++l) lane_sum[l] += lane_sum[l + width];
  return {maxval, lane_sum[0]};
}

// A double row: libm's exp, summed in order (the gradient checks' precision).
RowSoftmax exp_row(double* out, const double* z, int V) {
  double maxval = z[0];
  for (int v = 1; v < V; ++v) maxval = z[v] > maxval ? z[v] : maxval;
  double sum = 0;
  for (int v = 0; v < V; ++v) {
    out[v] = std::exp(z[v] - maxval);
    sum += out[v];
  }
  return {maxval, sum};
}


// One selected row: dz = (softmax(z) - onehot(y)) * inv_count; returns -log softmax(z)[y].
// dz may be z itself (the gradient written over the logits): z[y] is read first.
template <typename T>
T row_loss(T* dz, const T* z, int32_t y, int V, T inv_count) {
  const T z_y = z[y];
  RowSoftmax r{};
  if constexpr (std::is_same_v<T, float>) {
    on_isa([&](auto) {
      r = dz == z ? exp_row<true>(dz, z, V) : exp_row<false>(dz, z, V);
      const float scale = inv_count / static_cast<float>(r.sum);
      for (int v = 0; v < V; ++v) dz[v] *= scale;
    });
  } else {
    r = exp_row(dz, z, V);
    const T scale = inv_count / static_cast<T>(r.sum);
    for (int v = 0; v < V; ++v) dz[v] *= scale;
  }
  dz[y] -= inv_count;
  // -log softmax(z)[y] = log(sum) + max - z[y], exact even where p[y] underflows
  return static_cast<T>(std::log(static_cast<T>(r.sum)) + static_cast<T>(r.max) - z_y);
}
}  // namespace

template <typename T>
T cross_entropy_forward(T* dlogits, T* losses, const T* logits, const int32_t* targets, const uint8_t* mask, int N,
                        int V) {
  BLOCKLAB_PROFILE("cross_entropy_forward");
  // loss = (1/count) sum_selected -log p[n, y_n]  =>  dz[n] = (p[n] - onehot(y_n)) / count
  const int count = count_selected(mask, N);
  const T inv_count = T(1) / count;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* z = logits + static_cast<long>(n) * V;
    T* dz = dlogits + static_cast<long>(n) * V;
    if (!mask[n]) {
      std::fill(dz, dz + V, T(0));
      losses[n] = T(0);
      continue;
    }
    losses[n] = row_loss(dz, z, targets[n], V, inv_count);
  }
  T total = 0;
  for (int n = 0; n < N; ++n) total += losses[n];
  return total / count;
}

template <typename T>
void cross_entropy_rows(T* dlogits, T* losses, const T* logits, const int32_t* targets, int rows, int V, int count) {
  BLOCKLAB_PROFILE("cross_entropy_forward");
  const T inv_count = T(1) / count;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < rows; ++n)
    losses[n] = row_loss(dlogits + static_cast<long>(n) * V, logits + static_cast<long>(n) * V, targets[n], V,
                         inv_count);
}

template float cross_entropy_forward<float>(float*, float*, const float*, const int32_t*, const uint8_t*, int, int);
template double cross_entropy_forward<double>(double*, double*, const double*, const int32_t*, const uint8_t*, int,
                                              int);
template void cross_entropy_rows<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void cross_entropy_rows<double>(double*, double*, const double*, const int32_t*, int, int, int);

}  // namespace blocklab::kernels
