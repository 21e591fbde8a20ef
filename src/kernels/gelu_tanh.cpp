#include "kernels/gelu_tanh.h"

#include <cmath>

namespace blocklab::kernels {

template <typename T>
void gelu_tanh_forward(T* out, const T* inp, long N) {
  const T k = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
#pragma omp parallel for schedule(static) if (N > 16384)
  for (long i = 0; i < N; ++i) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
  }
}

template void gelu_tanh_forward<float>(float*, const float*, long);
template void gelu_tanh_forward<double>(double*, const double*, long);

}  // namespace blocklab::kernels
