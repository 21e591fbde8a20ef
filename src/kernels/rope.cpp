#include "kernels/rope.h"

#include <cmath>

#include "kernels/fast_math.h"

#include "util/profiler.h"

namespace blocklab::kernels {

template <typename T>
void rope_tables(T* cos, T* sin, const double* inv_freq, int Tn, int half_dim) {
  for (int t = 0; t < Tn; ++t)
    for (int i = 0; i < half_dim; ++i) {
      const double angle = static_cast<double>(t) * inv_freq[i];
      cos[static_cast<long>(t) * half_dim + i] = static_cast<T>(std::cos(angle));
      sin[static_cast<long>(t) * half_dim + i] = static_cast<T>(std::sin(angle));
    }
}

namespace {

// One row (all heads of one token): sign = +1 rotates by +angle (forward), -1 by -angle (backward).
template <typename T>
BLOCKLAB_ALWAYS_INLINE void rope_row(T* x, const T* c, const T* s, int heads, int half_dim, T sign) {
  for (int h = 0; h < heads; ++h) {
    T* x1 = x + static_cast<long>(h) * 2 * half_dim;
    T* x2 = x1 + half_dim;
    for (int i = 0; i < half_dim; ++i) {
      const T a = x1[i], b = x2[i], si = sign * s[i];
      x1[i] = a * c[i] - b * si;
      x2[i] = b * c[i] + a * si;
    }
  }
}

template <typename T>
void rope_apply(T* x, const T* cos, const T* sin, int B, int Tn, int heads, int half_dim, long row_stride, T sign) {
  const long rows = static_cast<long>(B) * Tn;
  // Rows are independent: each is rotated by one thread, so the thread count does not matter.
#pragma omp parallel for schedule(static) if (rows * heads * half_dim > 16384)
  for (long r = 0; r < rows; ++r) {
    const long t = r % Tn;
    on_isa([&](auto) { rope_row(x + r * row_stride, cos + t * half_dim, sin + t * half_dim, heads, half_dim, sign); });
  }
}

}  // namespace

template <typename T>
void rope_forward(T* x, const T* cos, const T* sin, int B, int Tn, int heads, int half_dim, long row_stride) {
  BLOCKLAB_PROFILE("rope_forward");
  rope_apply(x, cos, sin, B, Tn, heads, half_dim, row_stride, T(1));
}

template <typename T>
void rope_backward(T* dx, const T* cos, const T* sin, int B, int Tn, int heads, int half_dim, long row_stride) {
  BLOCKLAB_PROFILE("rope_backward");
  rope_apply(dx, cos, sin, B, Tn, heads, half_dim, row_stride, T(-1));
}

#define BLOCKLAB_INSTANTIATE(T)                                                       \
  template void rope_tables<T>(T*, T*, const double*, int, int);                      \
  template void rope_forward<T>(T*, const T*, const T*, int, int, int, int, long);    \
  template void rope_backward<T>(T*, const T*, const T*, int, int, int, int, long);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)

}  // namespace blocklab::kernels
