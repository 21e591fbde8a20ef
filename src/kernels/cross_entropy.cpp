#include "kernels/cross_entropy.h"

#include <cmath>

#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
int count_selected(const uint8_t* mask, int N) {
  int count = 0;
  for (int n = 0; n < N; ++n) count += mask[n] != 0;
  return count;
}
}  // namespace

template <typename T>
T cross_entropy_forward(T* probs, T* losses, const T* logits, const int32_t* targets, const uint8_t* mask,
                        int N, int V) {
  BLOCKLAB_PROFILE("cross_entropy_forward");
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* z = logits + static_cast<long>(n) * V;
    T* p = probs + static_cast<long>(n) * V;
    T maxval = z[0];
    for (int v = 1; v < V; ++v) maxval = z[v] > maxval ? z[v] : maxval;
    T sum = 0;
    for (int v = 0; v < V; ++v) {
      p[v] = std::exp(z[v] - maxval);
      sum += p[v];
    }
    for (int v = 0; v < V; ++v) p[v] /= sum;
    // -log softmax(z)[y] = log(sum) + max - z[y], exact even where p[y] underflows
    losses[n] = mask[n] ? std::log(sum) + maxval - z[targets[n]] : T(0);
  }
  T total = 0;
  for (int n = 0; n < N; ++n) total += losses[n];
  return total / count_selected(mask, N);
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* probs, const int32_t* targets, const uint8_t* mask, int N,
                            int V) {
  BLOCKLAB_PROFILE("cross_entropy_backward");
  // forward: loss = (1/count) sum_selected -log p[n, y_n]  =>  dz[n] = (p[n] - onehot(y_n)) / count
  const T inv_count = T(1) / count_selected(mask, N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    if (!mask[n]) continue;
    const T* p = probs + static_cast<long>(n) * V;
    T* dz = dlogits + static_cast<long>(n) * V;
    for (int v = 0; v < V; ++v) dz[v] += p[v] * inv_count;
    dz[targets[n]] -= inv_count;
  }
}

template float cross_entropy_forward<float>(float*, float*, const float*, const int32_t*, const uint8_t*, int,
                                            int);
template double cross_entropy_forward<double>(double*, double*, const double*, const int32_t*, const uint8_t*,
                                              int, int);
template void cross_entropy_backward<float>(float*, const float*, const int32_t*, const uint8_t*, int, int);
template void cross_entropy_backward<double>(double*, const double*, const int32_t*, const uint8_t*, int, int);

}  // namespace blocklab::kernels
