#include "kernels/attention.h"

#include <cmath>
#include <limits>

namespace blocklab::kernels {

template <typename T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int H) {
  const int hs = C / H;
  const long C3 = 3L * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const T* base = qkv + static_cast<long>(b) * Tn * C3;
      for (int t = 0; t < Tn; ++t) {
        const T* q = base + t * C3 + h * hs;
        T* p = att + ((static_cast<long>(b) * H + h) * Tn + t) * Tn;
        // scores and their max over the causal window s <= t
        T maxval = -std::numeric_limits<T>::infinity();
        for (int s = 0; s <= t; ++s) {
          const T* k = base + s * C3 + C + h * hs;
          T dot = 0;
          for (int i = 0; i < hs; ++i) dot += q[i] * k[i];
          p[s] = dot * scale;
          if (p[s] > maxval) maxval = p[s];
        }
        T sum = 0;
        for (int s = 0; s <= t; ++s) {
          p[s] = std::exp(p[s] - maxval);
          sum += p[s];
        }
        const T inv = T(1) / sum;
        for (int s = 0; s <= t; ++s) p[s] *= inv;
        for (int s = t + 1; s < Tn; ++s) p[s] = 0;
        // out_t = sum_s p[s] v_s
        T* o = out + (static_cast<long>(b) * Tn + t) * C + h * hs;
        for (int i = 0; i < hs; ++i) o[i] = 0;
        for (int s = 0; s <= t; ++s) {
          const T* v = base + s * C3 + 2 * C + h * hs;
          for (int i = 0; i < hs; ++i) o[i] += p[s] * v[i];
        }
      }
    }
}

template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                        int H) {
  const int hs = C / H;
  const long C3 = 3L * C;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  // Each (b,h) writes only its own q/k/v columns of batch row b, so the loop is race-free and every
  // sum below runs in a fixed order.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const T* base = qkv + static_cast<long>(b) * Tn * C3;
      T* dbase = dqkv + static_cast<long>(b) * Tn * C3;
      for (int t = 0; t < Tn; ++t) {
        const long row = ((static_cast<long>(b) * H + h) * Tn + t) * Tn;
        const T* p = att + row;
        T* dp = scratch + row;
        const T* g = dout + (static_cast<long>(b) * Tn + t) * C + h * hs;
        // forward: out_t = sum_s p[t,s] v_s  =>  dp[t,s] = g_t . v_s,  dv_s += p[t,s] g_t
        for (int s = 0; s <= t; ++s) {
          const T* v = base + s * C3 + 2 * C + h * hs;
          T* dv = dbase + s * C3 + 2 * C + h * hs;
          T dot = 0;
          for (int i = 0; i < hs; ++i) {
            dot += g[i] * v[i];
            dv[i] += p[s] * g[i];
          }
          dp[s] = dot;
        }
        // forward: p = softmax(z)  =>  dz[s] = p[s] * (dp[s] - sum_s' p[s'] dp[s'])
        T inner = 0;
        for (int s = 0; s <= t; ++s) inner += p[s] * dp[s];
        // forward: z[t,s] = scale * q_t . k_s  =>  dq_t += scale dz k_s,  dk_s += scale dz q_t
        const T* q = base + t * C3 + h * hs;
        T* dq = dbase + t * C3 + h * hs;
        for (int s = 0; s <= t; ++s) {
          const T dz = p[s] * (dp[s] - inner) * scale;
          const T* k = base + s * C3 + C + h * hs;
          T* dk = dbase + s * C3 + C + h * hs;
          for (int i = 0; i < hs; ++i) {
            dq[i] += dz * k[i];
            dk[i] += dz * q[i];
          }
        }
      }
    }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int,
                                        int);
template void attention_backward<double>(double*, double*, const double*, const double*, const double*, int, int,
                                         int, int);

}  // namespace blocklab::kernels
