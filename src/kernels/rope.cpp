#include "kernels/rope.h"

#include <cmath>

namespace blocklab::kernels {

void rope_tables(float* cos, float* sin, const double* inv_freq, int Tn, int half_dim) {
  for (int t = 0; t < Tn; ++t)
    for (int i = 0; i < half_dim; ++i) {
      const double angle = static_cast<double>(t) * inv_freq[i];
      cos[static_cast<long>(t) * half_dim + i] = static_cast<float>(std::cos(angle));
      sin[static_cast<long>(t) * half_dim + i] = static_cast<float>(std::sin(angle));
    }
}

template <typename T>
void rope_forward(T* x, const float* cos, const float* sin, int Tn, int heads, int half_dim, long row_stride) {
#pragma omp parallel for schedule(static) if (static_cast<long>(Tn) * heads * half_dim > 16384)
  for (int t = 0; t < Tn; ++t) {
    const float* c = cos + static_cast<long>(t) * half_dim;
    const float* s = sin + static_cast<long>(t) * half_dim;
    for (int h = 0; h < heads; ++h) {
      T* x1 = x + t * row_stride + static_cast<long>(h) * 2 * half_dim;
      T* x2 = x1 + half_dim;
      for (int i = 0; i < half_dim; ++i) {
        const T a = x1[i], b = x2[i];
        x1[i] = a * T(c[i]) - b * T(s[i]);
        x2[i] = b * T(c[i]) + a * T(s[i]);
      }
    }
  }
}

template void rope_forward<float>(float*, const float*, const float*, int, int, int, long);
template void rope_forward<double>(double*, const float*, const float*, int, int, int, long);

}  // namespace blocklab::kernels
