#include "kernels/gating.h"

#include <cmath>

namespace blocklab::kernels {

template <typename T>
void sigmoid_gate_forward(T* out, T* gate, const T* y, long n) {
  for (long i = 0; i < n; ++i) {
    const T gt = T(1) / (T(1) + std::exp(-gate[i]));
    gate[i] = gt;
    out[i] = y[i] * gt;
  }
}

template <typename T>
void sigmoid_gate_backward(T* dz, T* dy, const T* y, const T* gate, long n) {
  for (long i = 0; i < n; ++i) {
    const T d_out = dy[i], gt = gate[i];
    dz[i] = d_out * y[i] * gt * (T(1) - gt);
    dy[i] = d_out * gt;
  }
}

template <typename T>
void value_mix_forward(T* v, long v_stride, T* v_own, const T* first, const T* lambda, long N, int K) {
  const T l1 = lambda[0], l2 = lambda[1];
  for (long n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      T& vk = v[n * v_stride + k];
      v_own[n * K + k] = vk;
      vk = l1 * vk + l2 * first[n * K + k];
    }
}

template <typename T>
void value_mix_backward(T* dv, long dv_stride, T* d_lambda, T* d_first, const T* v_own, const T* first,
                        const T* lambda, long N, int K) {
  const T l1 = lambda[0], l2 = lambda[1];
  // The sums first, then the updates: in one loop, clang 14 for wasm32 (-O3, SIMD128) summed the products of
  // the values already scaled by l1 (tests/test_kernels_gating.cpp caught it). The same arithmetic in the same
  // order either way.
  T sum1 = 0, sum2 = 0;
  for (long n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      const T g_v = dv[n * dv_stride + k];
      sum1 += g_v * v_own[n * K + k];
      sum2 += g_v * first[n * K + k];
    }
  for (long n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      const T g_v = dv[n * dv_stride + k];
      d_first[n * K + k] += l2 * g_v;
      dv[n * dv_stride + k] = l1 * g_v;
    }
  d_lambda[0] += sum1;
  d_lambda[1] += sum2;
}

template <typename T>
void scaled_residual_forward(T* resid, const T* skip, const T* branch, const T* omega, T s_const, T g, long N, int C) {
  for (long n = 0; n < N; ++n)
    for (int i = 0; i < C; ++i) {
      const long k = n * C + i;
      const T s = omega != nullptr ? omega[i] : s_const;
      resid[k] = s * skip[k] + g * branch[k];
    }
}

template <typename T>
void scaled_residual_backward(T* d, T* d_branch, T* d_gate, T* g_omega, const T* skip, const T* branch,
                              const T* omega, T s_const, T g, long N, int C) {
  const long NC = N * C;
  if (d_gate != nullptr) {
    T sum = 0;
    for (long k = 0; k < NC; ++k) sum += d[k] * branch[k];
    *d_gate += sum;
  }
  for (long k = 0; k < NC; ++k) d_branch[k] = g * d[k];
  if (omega != nullptr) {
    if (g_omega != nullptr)
      for (long n = 0; n < N; ++n)
        for (int i = 0; i < C; ++i) g_omega[i] += d[n * C + i] * skip[n * C + i];
    for (long n = 0; n < N; ++n)
      for (int i = 0; i < C; ++i) d[n * C + i] *= omega[i];
  } else if (s_const != T(1)) {
    for (long k = 0; k < NC; ++k) d[k] *= s_const;
  }
}

#define BLOCKLAB_INSTANTIATE(T)                                                                              \
  template void sigmoid_gate_forward<T>(T*, T*, const T*, long);                                             \
  template void sigmoid_gate_backward<T>(T*, T*, const T*, const T*, long);                                  \
  template void value_mix_forward<T>(T*, long, T*, const T*, const T*, long, int);                           \
  template void value_mix_backward<T>(T*, long, T*, T*, const T*, const T*, const T*, long, int);              \
  template void scaled_residual_forward<T>(T*, const T*, const T*, const T*, T, T, long, int);               \
  template void scaled_residual_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*, T, T, long, int);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)
#undef BLOCKLAB_INSTANTIATE

}  // namespace blocklab::kernels
