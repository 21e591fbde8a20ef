#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>

#include "kernels/fast_math.h"
#include "kernels/gelu.h"

#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
constexpr long kChunk = 4096;  // elements per parallel work item

template <typename T>
BLOCKLAB_ALWAYS_INLINE void gelu_forward_chunk(T* out, const T* inp, long n) {
  for (long i = 0; i < n; ++i) out[i] = gelu_value(inp[i]);
}

template <typename T>
BLOCKLAB_ALWAYS_INLINE void gelu_backward_chunk(T* dinp, const T* dout, const T* inp, long n) {
  for (long i = 0; i < n; ++i) dinp[i] += dout[i] * gelu_derivative(inp[i]);
}
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, long N) {
  BLOCKLAB_PROFILE("gelu_forward");
#pragma omp parallel for schedule(static)
  for (long c = 0; c < N; c += kChunk) on_isa([&](auto) { gelu_forward_chunk(out + c, inp + c, std::min(kChunk, N - c)); });
}

template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, long N) {
  BLOCKLAB_PROFILE("gelu_backward");
#pragma omp parallel for schedule(static)
  for (long c = 0; c < N; c += kChunk)
    on_isa([&](auto) { gelu_backward_chunk(dinp + c, dout + c, inp + c, std::min(kChunk, N - c)); });
}

template <typename T>
void residual_forward(T* out, const T* a, const T* b, long N) {
  BLOCKLAB_PROFILE("residual_forward");
#pragma omp parallel for schedule(static)
  for (long i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void residual_backward(T* da, T* db, const T* dout, long N) {
  BLOCKLAB_PROFILE("residual_backward");
#pragma omp parallel for schedule(static)
  for (long i = 0; i < N; ++i) {
    if (da != nullptr) da[i] += dout[i];
    if (db != nullptr) db[i] += dout[i];
  }
}

#define BLOCKLAB_INSTANTIATE(T)                                        \
  template void gelu_forward<T>(T*, const T*, long);                   \
  template void gelu_backward<T>(T*, const T*, const T*, long);        \
  template void residual_forward<T>(T*, const T*, const T*, long);     \
  template void residual_backward<T>(T*, T*, const T*, long);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)

}  // namespace blocklab::kernels
