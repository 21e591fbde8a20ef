#include "kernels/glu.h"

#include <algorithm>
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
      const T d = dout[i], x = gate[i], s = sigmoid(x);
      dvalue[i] = d * (x * s);
      dgate[i] = d * value[i] * (s * (T(1) + x * (T(1) - s)));
    }
  } else {
    for (int i = 0; i < I; ++i) {
      const T d = dout[i];
      dvalue[i] = d * gelu_value(gate[i]);
      dgate[i] = d * value[i] * gelu_derivative(gate[i]);
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

void glu_forward_rows(float* out, long ld, const float* value, long value_ld, const float* gate, long gate_ld, int rows,
                      int cols, GluKind kind) {
  on_isa([&](auto) {
    for (int r = 0; r < rows; ++r) glu_forward_row(out + r * ld, value + r * value_ld, gate + r * gate_ld, cols, kind);
  });
}

void glu_backward_rows(float* dvalue, float* dgate, const float* dout, long ld, const float* value, const float* gate,
                       long pre_ld, int rows, int cols, GluKind kind) {
  constexpr int kChunk = 256;  // dout's chunk copied first: dvalue may be dout, and the row function reads it once
  alignas(64) float d[kChunk];
  for (int r = 0; r < rows; ++r)
    for (int c0 = 0; c0 < cols; c0 += kChunk) {
      const int n = std::min(kChunk, cols - c0);
      std::copy_n(dout + r * ld + c0, n, d);
      const long at = r * pre_ld + c0;
      on_isa([&](auto) { glu_backward_row(dvalue + at, dgate + at, d, value + at, gate + at, n, kind); });
    }
}

#define BLOCKLAB_INSTANTIATE(T)                                              \
  template void glu_forward<T>(T*, const T*, int, int, GluKind);             \
  template void glu_backward<T>(T*, const T*, const T*, int, int, GluKind);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)

}  // namespace blocklab::kernels
