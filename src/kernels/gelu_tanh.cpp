#include "kernels/gelu_tanh.h"

#include <cmath>

#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;
}  // namespace

template <typename T>
void gelu_tanh_forward(T* out, const T* inp, long N) {
  BLOCKLAB_PROFILE("gelu_tanh_forward");
  const T k = static_cast<T>(kSqrt2OverPi);
#pragma omp parallel for schedule(static) if (N > 16384)
  for (long i = 0; i < N; ++i) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + std::tanh(k * (x + T(kCubic) * x * x * x)));
  }
}

template <typename T>
void gelu_tanh_backward(T* dinp, const T* dout, const T* inp, long N) {
  BLOCKLAB_PROFILE("gelu_tanh_backward");
  const T k = static_cast<T>(kSqrt2OverPi);
#pragma omp parallel for schedule(static) if (N > 16384)
  for (long i = 0; i < N; ++i) {
    const T x = inp[i];
    const T th = std::tanh(k * (x + T(kCubic) * x * x * x));
    const T du = k * (T(1) + T(3 * kCubic) * x * x);
    dinp[i] = dout[i] * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du);
  }
}

template void gelu_tanh_forward<float>(float*, const float*, long);
template void gelu_tanh_forward<double>(double*, const double*, long);
template void gelu_tanh_backward<float>(float*, const float*, const float*, long);
template void gelu_tanh_backward<double>(double*, const double*, const double*, long);

}  // namespace blocklab::kernels
