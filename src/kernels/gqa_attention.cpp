#include "kernels/gqa_attention.h"

#include <cmath>

namespace blocklab::kernels {

template <typename T>
void gqa_attention_forward(T* out, long out_stride, T* scratch, const T* q, long q_stride, const T* k,
                           long k_stride, const T* v, long v_stride, int Tn, int H, int Hkv, int D, T scale) {
  const int group = H / Hkv;
  // Heads are independent (one parallel region for all of them); each sums over positions 0..t in order.
#pragma omp parallel for schedule(static) if (static_cast<long>(Tn) * Tn * H * D > 65536)
  for (int h = 0; h < H; ++h) {
    for (int t = 0; t < Tn; ++t) {
      const T* qv = q + t * q_stride + static_cast<long>(h) * D;
      const long kv_off = static_cast<long>(h / group) * D;
      T* p = scratch + static_cast<long>(h) * Tn;
      T max = 0;
      for (int s = 0; s <= t; ++s) {
        const T* kv = k + s * k_stride + kv_off;
        T dot = 0;
        for (int d = 0; d < D; ++d) dot += qv[d] * kv[d];
        p[s] = dot * scale;
        if (s == 0 || p[s] > max) max = p[s];
      }
      T sum = 0;
      for (int s = 0; s <= t; ++s) {
        p[s] = std::exp(p[s] - max);
        sum += p[s];
      }
      T* o = out + t * out_stride + static_cast<long>(h) * D;
      for (int d = 0; d < D; ++d) o[d] = 0;
      const T inv = T(1) / sum;
      for (int s = 0; s <= t; ++s) {
        const T w = p[s] * inv;
        const T* vv = v + s * v_stride + kv_off;
        for (int d = 0; d < D; ++d) o[d] += w * vv[d];
      }
    }
  }
}

template void gqa_attention_forward<float>(float*, long, float*, const float*, long, const float*, long, const float*,
                                           long, int, int, int, int, float);
template void gqa_attention_forward<double>(double*, long, double*, const double*, long, const double*, long,
                                            const double*, long, int, int, int, int, double);

}  // namespace blocklab::kernels
