#include "kernels/unit_norm.h"

#include <cmath>

namespace blocklab::kernels {

template <typename T>
void unit_rows_forward(T* out, T* rn, const T* x, long rows, int width) {
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) {
    const T* xr = x + r * width;
    T ss = 0;
    for (int i = 0; i < width; ++i) ss += xr[i] * xr[i];
    const T inv = T(1) / std::sqrt(ss);
    rn[r] = inv;
    for (int i = 0; i < width; ++i) out[r * width + i] = xr[i] * inv;
  }
}

template <typename T>
void unit_rows_backward(T* d, const T* y, const T* rn, long rows, int width) {
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) {
    T* dr = d + r * width;
    const T* yr = y + r * width;
    T dot = 0;
    for (int i = 0; i < width; ++i) dot += yr[i] * dr[i];
    for (int i = 0; i < width; ++i) dr[i] = rn[r] * (dr[i] - yr[i] * dot);
  }
}

template <typename T>
void scaled_unit_heads_forward(T* out, T* rn, const T* x, long x_stride, const T* s, T factor, long N, int H, int D) {
  for (long n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {
      const T* xr = x + n * x_stride + static_cast<long>(h) * D;
      T ss = 0;
      for (int i = 0; i < D; ++i) ss += xr[i] * xr[i];
      const T inv = T(1) / std::sqrt(ss);
      rn[n * H + h] = inv;
      T* o = out + (n * H + h) * D;
      for (int i = 0; i < D; ++i) o[i] = xr[i] * inv * (s[h * D + i] * factor);
    }
}

template <typename T>
void scaled_unit_heads_backward(T* d, long d_stride, T* g_s, const T* x, long x_stride, const T* rn, const T* s,
                                T factor, long N, int H, int D) {
  for (long n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {
      const T* xr = x + n * x_stride + static_cast<long>(h) * D;
      T* dr = d + n * d_stride + static_cast<long>(h) * D;
      const T inv = rn[n * H + h];
      T dot = 0;
      for (int i = 0; i < D; ++i) {
        const T unit = xr[i] * inv, go = dr[i];
        g_s[h * D + i] += go * unit * factor;
        dr[i] = go * (s[h * D + i] * factor);
        dot += unit * dr[i];
      }
      for (int i = 0; i < D; ++i) dr[i] = inv * (dr[i] - xr[i] * inv * dot);
    }
}

template <typename T>
void sphere_step_forward(T* resid, const T* A, const T* B, const T* alpha, T factor, long N, int C) {
  for (long n = 0; n < N; ++n)
    for (int i = 0; i < C; ++i) {
      const long k = n * C + i;
      const T a = std::abs(alpha[i] * factor);
      resid[k] = A[k] + a * (B[k] - A[k]);
    }
}

template <typename T>
void sphere_step_backward(T* d_A, T* d_B, T* g_alpha, const T* d_resid, const T* A, const T* B, const T* alpha,
                          T factor, long N, int C) {
  for (long n = 0; n < N; ++n)
    for (int i = 0; i < C; ++i) {
      const long k = n * C + i;
      const T stored = alpha[i] * factor, a = std::abs(stored);
      const T sign = stored > 0 ? T(1) : stored < 0 ? T(-1) : T(0);
      const T dr = d_resid[k];
      g_alpha[i] += dr * (B[k] - A[k]) * sign * factor;
      d_B[k] = a * dr;
      d_A[k] = (T(1) - a) * dr;
    }
}

template <typename T>
void channel_scale_forward(T* out, const T* raw, const T* s, T factor, long N, int cols) {
  for (long n = 0; n < N; ++n)
    for (int j = 0; j < cols; ++j) out[n * cols + j] = raw[n * cols + j] * (s[j] * factor);
}

template <typename T>
void channel_scale_backward(T* d, T* g_s, const T* raw, const T* s, T factor, long N, int cols) {
  for (long n = 0; n < N; ++n)
    for (int j = 0; j < cols; ++j) {
      const long k = n * cols + j;
      g_s[j] += d[k] * raw[k] * factor;
      d[k] *= s[j] * factor;
    }
}

#define BLOCKLAB_INSTANTIATE(T)                                                                                  \
  template void unit_rows_forward<T>(T*, T*, const T*, long, int);                                               \
  template void unit_rows_backward<T>(T*, const T*, const T*, long, int);                                        \
  template void scaled_unit_heads_forward<T>(T*, T*, const T*, long, const T*, T, long, int, int);               \
  template void scaled_unit_heads_backward<T>(T*, long, T*, const T*, long, const T*, const T*, T, long, int, int); \
  template void sphere_step_forward<T>(T*, const T*, const T*, const T*, T, long, int);                          \
  template void sphere_step_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, T, long, int);       \
  template void channel_scale_forward<T>(T*, const T*, const T*, T, long, int);                                  \
  template void channel_scale_backward<T>(T*, T*, const T*, const T*, T, long, int);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)
#undef BLOCKLAB_INSTANTIATE

}  // namespace blocklab::kernels
