#pragma once
// GELU, exact erf form (PyTorch's nn.GELU default), as inline scalar functions that vectorise inside
// the loops calling them (float: fast_math approximations; double: libm).
#include <type_traits>

#include "kernels/fast_math.h"

namespace blocklab::kernels {

// x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
template <typename T>
inline T gelu_value(T x) {
  return T(0.5) * x * (T(1) + fast_erf(x * T(0.70710678118654752440)));
}

// d/dx [x Phi(x)] = Phi(x) + x phi(x),  phi(x) = exp(-x^2/2) / sqrt(2 pi). In float, Phi and phi share one
// exponential: erf's approximation at z = x / sqrt 2 computes exp(-z^2), which is exp(-x^2/2).
template <typename T>
inline T gelu_derivative(T x) {
  if constexpr (std::is_same_v<T, float>) {
    float e;
    const float cdf = 0.5f * (1.0f + erf_approx_with_exp(x * 0.70710678118654752440f, e));
    return cdf + x * (0.39894228040143267794f * e);
  } else {
    const T cdf = T(0.5) * (T(1) + fast_erf(x * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * fast_exp(T(-0.5) * x * x);
    return cdf + x * pdf;
  }
}

}  // namespace blocklab::kernels
