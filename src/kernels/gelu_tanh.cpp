#include "kernels/gelu_tanh.h"

#include <algorithm>

#include "kernels/isa.h"
#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
constexpr long kChunk = 4096;  // elements per parallel work item
}  // namespace

template <typename T>
void gelu_tanh_forward(T* out, const T* inp, long N) {
  BLOCKLAB_PROFILE("gelu_tanh_forward");
#pragma omp parallel for schedule(static)
  for (long c = 0; c < N; c += kChunk)
    on_isa([&](auto) {
      const long end = std::min(N, c + kChunk);
      for (long i = c; i < end; ++i) out[i] = gelu_tanh_value(inp[i]);
    });
}

template <typename T>
void gelu_tanh_backward(T* dinp, const T* dout, const T* inp, long N) {
  BLOCKLAB_PROFILE("gelu_tanh_backward");
#pragma omp parallel for schedule(static)
  for (long c = 0; c < N; c += kChunk)
    on_isa([&](auto) {
      const long end = std::min(N, c + kChunk);
      for (long i = c; i < end; ++i) dinp[i] = dout[i] * gelu_tanh_derivative(inp[i]);
    });
}

template void gelu_tanh_forward<float>(float*, const float*, long);
template void gelu_tanh_forward<double>(double*, const double*, long);
template void gelu_tanh_backward<float>(float*, const float*, const float*, long);
template void gelu_tanh_backward<double>(double*, const double*, const double*, long);

}  // namespace blocklab::kernels
