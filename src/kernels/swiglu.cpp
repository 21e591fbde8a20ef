#include "kernels/swiglu.h"

#include <cmath>

namespace blocklab::kernels {

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, long N) {
#pragma omp parallel for schedule(static) if (N > 16384)
  for (long i = 0; i < N; ++i) {
    const T g = gate[i];
    out[i] = g / (T(1) + std::exp(-g)) * up[i];
  }
}

template void swiglu_forward<float>(float*, const float*, const float*, long);
template void swiglu_forward<double>(double*, const double*, const double*, long);

}  // namespace blocklab::kernels
