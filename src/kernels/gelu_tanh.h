#pragma once
// GELU in the tanh approximation used by GPT-2 ("gelu_new", PyTorch's gelu(approximate='tanh')):
//   out = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
//   d out / dx = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// The exact erf form is kernels/gelu.h.
//
// In float the inline forms below use 0.5 (1 + tanh u) = sigmoid(2u) = 1 / (1 + e), e = exp(-2u), with the
// vectorising exp of kernels/fast_math.h, and 0.5 (1 - tanh(u)^2) = 2 e / (1 + e)^2: no cancellation near
// tanh = +-1, and the loops calling them vectorise (libm's tanhf is a scalar call). In double they are the
// formulas above with libm's tanh (the gradient checks run in double).
#include <cmath>
#include <type_traits>

#include "kernels/fast_math.h"

namespace blocklab::kernels {

namespace gelu_tanh_detail {
inline constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2 / pi)
inline constexpr double kCubic = 0.044715;
// e = exp(-2u) in float (exp_for_ratio: x below about -8.9 takes -2u = 64, where |GELU| is below 1e-26 either way)
BLOCKLAB_ALWAYS_INLINE float exp_minus_2u(float x) {
  return exp_for_ratio(-2.0f * static_cast<float>(kSqrt2OverPi) * (x + static_cast<float>(kCubic) * x * x * x));
}
}  // namespace gelu_tanh_detail

template <typename T>
BLOCKLAB_ALWAYS_INLINE T gelu_tanh_value(T x) {
  using namespace gelu_tanh_detail;
  if constexpr (std::is_same_v<T, float>) {
    return x * (1.0f / (1.0f + exp_minus_2u(x)));  // the derivative's s times x: one division serves both
  } else {
    return T(0.5) * x * (T(1) + std::tanh(T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x)));
  }
}

template <typename T>
BLOCKLAB_ALWAYS_INLINE T gelu_tanh_derivative(T x) {
  using namespace gelu_tanh_detail;
  if constexpr (std::is_same_v<T, float>) {
    const float k = static_cast<float>(kSqrt2OverPi), c = static_cast<float>(kCubic);
    const float e = exp_minus_2u(x);
    const float s = 1.0f / (1.0f + e);  // 0.5 (1 + tanh u)
    const float du = k * (1.0f + 3.0f * c * x * x);
    return s + 2.0f * x * (e * s * s) * du;
  } else {
    const T th = std::tanh(T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x));
    const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * x * x);
    return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
  }
}

// inp (N) -> out (N); out may alias inp.
template <typename T>
void gelu_tanh_forward(T* out, const T* inp, long N);

// dout (N), inp (N) -> dinp (N) = dout * gelu_tanh'(inp), overwritten; dinp may alias dout.
template <typename T>
void gelu_tanh_backward(T* dinp, const T* dout, const T* inp, long N);

}  // namespace blocklab::kernels
