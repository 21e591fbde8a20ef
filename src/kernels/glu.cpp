#include "kernels/glu.h"

#include <cmath>
#include <type_traits>

#include "kernels/fast_math.h"
#include "kernels/gelu.h"

#include "util/profiler.h"

namespace blocklab::kernels {

namespace {

template <typename T>
inline T sigmoid(T x) {
  if constexpr (std::is_same_v<T, float>)
    return 1.0f / (1.0f + exp_for_ratio(-x));  // as exp_approx for x > -64 (fast_math.h)
  else
    return T(1) / (T(1) + std::exp(-x));
}

// One row: value (I), gate (I) -> out (I).
template <typename T>
BLOCKLAB_ALWAYS_INLINE void glu_forward_row(T* out, const T* value, const T* gate, int I, GluKind kind) {
  if (kind == GluKind::SwiGLU) {
    for (int i = 0; i < I; ++i) out[i] = value[i] * (gate[i] * sigmoid(gate[i]));
  } else {
    for (int i = 0; i < I; ++i) out[i] = value[i] * gelu_value(gate[i]);
  }
}

// One row: dout (I), value (I), gate (I) -> dvalue (I), dgate (I).
template <typename T>
BLOCKLAB_ALWAYS_INLINE void glu_backward_row(T* dvalue, T* dgate, const T* dout, const T* value, const T* gate, int I,
                                            GluKind kind) {
  if (kind == GluKind::SwiGLU) {
    for (int i = 0; i < I; ++i) {
      const T x = gate[i], s = sigmoid(x);
      dvalue[i] = dout[i] * (x * s);
      dgate[i] = dout[i] * value[i] * (s * (T(1) + x * (T(1) - s)));
    }
  } else {
    for (int i = 0; i < I; ++i) {
      dvalue[i] = dout[i] * gelu_value(gate[i]);
      dgate[i] = dout[i] * value[i] * gelu_derivative(gate[i]);
    }
  }
}

}  // namespace

template <typename T>
void glu_forward(T* out, const T* inp, int N, int I, GluKind kind) {
  BLOCKLAB_PROFILE("glu_forward");
  const long I2 = 2L * I;
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * I > 16384)
  for (int n = 0; n < N; ++n) {
    const T* row = inp + n * I2;
    on_isa([&](auto) { glu_forward_row(out + static_cast<long>(n) * I, row, row + I, I, kind); });
  }
}

template <typename T>
void glu_backward(T* dinp, const T* dout, const T* inp, int N, int I, GluKind kind) {
  BLOCKLAB_PROFILE("glu_backward");
  const long I2 = 2L * I;
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * I > 16384)
  for (int n = 0; n < N; ++n) {
    const T* row = inp + n * I2;
    T* drow = dinp + n * I2;
    on_isa([&](auto) { glu_backward_row(drow, drow + I, dout + static_cast<long>(n) * I, row, row + I, I, kind); });
  }
}

#define BLOCKLAB_INSTANTIATE(T)                                              \
  template void glu_forward<T>(T*, const T*, int, int, GluKind);             \
  template void glu_backward<T>(T*, const T*, const T*, int, int, GluKind);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)

}  // namespace blocklab::kernels
