#include "kernels/norm.h"

#include <cmath>
#include <vector>

#include "kernels/fast_math.h"
#include "kernels/lane_reduce.h"

#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
constexpr int kColumnBlock = 64;
constexpr int kRowBlock = 16;

// row(n) for every row, blocks of kRowBlock rows split across threads, each block at the machine's level: one
// on_isa call per block, where one per row cost as much as the row's arithmetic (its dispatch, and the row
// kernel's setup each time). Rows are independent, so results do not depend on the blocking or thread count.
template <typename Row>
void for_each_row(int N, Row row) {
  const int blocks = (N + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk)
    on_isa([&](auto) {
      const int n1 = blk * kRowBlock + kRowBlock < N ? blk * kRowBlock + kRowBlock : N;
      for (int n = blk * kRowBlock; n < n1; ++n) row(n);
    });
}

// dweight[c] += sum_n dout[n,c] * xhat(n,c) and dbias[c] += sum_n dout[n,c], rows summed in order and
// columns split across threads, so the result is independent of the thread count. Each block of columns runs
// at the machine's level (on_isa): its 64 columns are four AVX-512 registers of each sum.
template <typename T, typename Xhat>
void accumulate_affine_grads(T* dweight, T* dbias, const T* dout, int N, int C, Xhat xhat) {
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk)
    on_isa([&](auto) {
      const int c0 = blk * kColumnBlock;
      const int c1 = c0 + kColumnBlock < C ? c0 + kColumnBlock : C;
      T acc_w[kColumnBlock] = {};
      T acc_b[kColumnBlock] = {};
      for (int n = 0; n < N; ++n) {
        const T* g = dout + static_cast<long>(n) * C;
        for (int c = c0; c < c1; ++c) {
          acc_w[c - c0] += g[c] * xhat(n, c);
          acc_b[c - c0] += g[c];
        }
      }
      for (int c = c0; c < c1; ++c) {
        dweight[c] += acc_w[c - c0];
        if (dbias != nullptr) dbias[c] += acc_b[c - c0];
      }
    });
}

// for_each_row(N, row), then accumulate_affine_grads(...), in one pass over memory: rows in chunks of kChunkRows,
// each chunk's rows (blocks of kRowBlock across threads) and then its affine sums (blocks of columns across threads)
// while its dout and x are in cache, where the two passes read both twice (2 MB a call at the source model's
// 2016 x 128, from beyond L2). The sums keep their order, each column's rows in order from zero (chunks in order),
// so the same bits as the two passes, for any thread count.
template <typename T, typename Row, typename Xhat>
void rows_and_affine_grads(int N, int C, Row row, T* dweight, T* dbias, const T* dout, Xhat xhat) {
  constexpr int kChunkRows = 64;
  std::vector<T> acc_w(C, T(0)), acc_b(C, T(0));
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel
  for (int n0 = 0; n0 < N; n0 += kChunkRows) {
    const int n1 = n0 + kChunkRows < N ? n0 + kChunkRows : N;
#pragma omp for schedule(static)
    for (int b0 = n0; b0 < n1; b0 += kRowBlock)
      on_isa([&](auto) {
        for (int n = b0; n < (b0 + kRowBlock < n1 ? b0 + kRowBlock : n1); ++n) row(n);
      });
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; ++blk)
      on_isa([&](auto) {
        const int c0 = blk * kColumnBlock;
        const int c1 = c0 + kColumnBlock < C ? c0 + kColumnBlock : C;
        T w[kColumnBlock], b[kColumnBlock];
        for (int c = c0; c < c1; ++c) w[c - c0] = acc_w[c], b[c - c0] = acc_b[c];
        for (int n = n0; n < n1; ++n) {
          const T* g = dout + static_cast<long>(n) * C;
          for (int c = c0; c < c1; ++c) {
            w[c - c0] += g[c] * xhat(n, c);
            b[c - c0] += g[c];
          }
        }
        for (int c = c0; c < c1; ++c) acc_w[c] = w[c - c0], acc_b[c] = b[c - c0];
      });
  }
  for (int c = 0; c < C; ++c) {
    dweight[c] += acc_w[c];
    if (dbias != nullptr) dbias[c] += acc_b[c];
  }
}
}  // namespace

// Per-row kernels: every reduction over a row's C values runs in the fixed lane order of lane_reduce.h.
template <typename T>
BLOCKLAB_ALWAYS_INLINE void layernorm_forward_row(T* y, T* mean, T* rstd, const T* x, const T* weight, const T* bias,
                                                 int C, T eps) {
  const T m = lane_sum(x, C) / C;
  const T var = lane_sum_of<T>(C, [x, m](int c) { return (x[c] - m) * (x[c] - m); }) / C;  // two-pass: no cancellation
  const T s = T(1) / std::sqrt(var + eps);
  for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * weight[c] + bias[c];
  *mean = m;
  *rstd = s;
}

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N, int C,
                       T eps) {
  BLOCKLAB_PROFILE("layernorm_forward");
  for_each_row(N, [&](int n) {
    layernorm_forward_row(out + static_cast<long>(n) * C, mean + n, rstd + n, inp + static_cast<long>(n) * C, weight,
                          bias, C, eps);
  });
}

// forward: xhat = (x - mean) * rstd;  y = xhat * w + b
// dxhat = dy * w;  dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
template <typename T>
BLOCKLAB_ALWAYS_INLINE void layernorm_backward_row(T* dx, const T* g, const T* x, const T* weight, T m, T s, int C) {
  const T mean_dxhat = lane_dot(g, weight, C) / C;
  const T mean_dxhat_xhat = lane_sum_of<T>(C, [=](int c) { return g[c] * weight[c] * ((x[c] - m) * s); }) / C;
  for (int c = 0; c < C; ++c) {
    const T xhat = (x[c] - m) * s;
    dx[c] += s * (g[c] * weight[c] - mean_dxhat - xhat * mean_dxhat_xhat);
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C) {
  BLOCKLAB_PROFILE("layernorm_backward");
  rows_and_affine_grads(
      N, C,
      [&](int n) {
        layernorm_backward_row(dinp + static_cast<long>(n) * C, dout + static_cast<long>(n) * C,
                               inp + static_cast<long>(n) * C, weight, mean[n], rstd[n], C);
      },
      dweight, dbias, dout, [&](int n, int c) { return (inp[static_cast<long>(n) * C + c] - mean[n]) * rstd[n]; });
}

template <typename T>
BLOCKLAB_ALWAYS_INLINE void rmsnorm_forward_row(T* y, T* rstd, const T* x, const T* weight, int C, T eps) {
  const T s = T(1) / std::sqrt(lane_dot(x, x, C) / C + eps);
  for (int c = 0; c < C; ++c) y[c] = x[c] * s * weight[c];
  *rstd = s;
}

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, T eps) {
  BLOCKLAB_PROFILE("rmsnorm_forward");
  for_each_row(N, [&](int n) {
    rmsnorm_forward_row(out + static_cast<long>(n) * C, rstd + n, inp + static_cast<long>(n) * C, weight, C, eps);
  });
}

// forward: xhat = x * rstd;  y = xhat * w,  rstd = (mean(x^2) + eps)^(-1/2)
// d rstd / d x_j = -rstd^3 x_j / C  =>  dx = rstd * (dxhat - xhat * mean(dxhat * xhat)),  dxhat = dy * w
template <typename T>
BLOCKLAB_ALWAYS_INLINE void rmsnorm_backward_row(T* dx, const T* g, const T* x, const T* weight, T s, int C) {
  const T mean_dxhat_xhat = lane_sum_of<T>(C, [=](int c) { return g[c] * weight[c] * x[c] * s; }) / C;
  for (int c = 0; c < C; ++c) dx[c] += s * (g[c] * weight[c] - x[c] * s * mean_dxhat_xhat);
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N,
                      int C) {
  BLOCKLAB_PROFILE("rmsnorm_backward");
  rows_and_affine_grads<T>(
      N, C,
      [&](int n) {
        rmsnorm_backward_row(dinp + static_cast<long>(n) * C, dout + static_cast<long>(n) * C,
                             inp + static_cast<long>(n) * C, weight, rstd[n], C);
      },
      dweight, nullptr, dout, [&](int n, int c) { return inp[static_cast<long>(n) * C + c] * rstd[n]; });
}

template <typename T>
void dyt_forward(T* out, const T* inp, const T* weight, const T* bias, const T* alpha, int N, int C) {
  BLOCKLAB_PROFILE("dyt_forward");
  const T a = *alpha;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<long>(n) * C;
    T* y = out + static_cast<long>(n) * C;
    for (int c = 0; c < C; ++c) y[c] = weight[c] * std::tanh(a * x[c]) + bias[c];
  }
}

// y = w tanh(a x) + b:  dy/dx = w a (1 - tanh^2),  dy/dw = tanh,  dy/db = 1,  dy/da = w x (1 - tanh^2)
template <typename T>
void dyt_backward(T* dinp, T* dweight, T* dbias, T* dalpha, const T* dout, const T* inp, const T* weight,
                  const T* alpha, int N, int C) {
  BLOCKLAB_PROFILE("dyt_backward");
  const T a = *alpha;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<long>(n) * C;
    const T* g = dout + static_cast<long>(n) * C;
    T* dx = dinp + static_cast<long>(n) * C;
    for (int c = 0; c < C; ++c) {
      const T t = std::tanh(a * x[c]);
      dx[c] += g[c] * weight[c] * a * (T(1) - t * t);
    }
  }
  accumulate_affine_grads(dweight, dbias, dout, N, C,
                          [&](int n, int c) { return std::tanh(a * inp[static_cast<long>(n) * C + c]); });
  // d alpha: one scalar, summed row by row in order (independent of the thread count)
  T sum = 0;
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<long>(n) * C;
    const T* g = dout + static_cast<long>(n) * C;
    T row = 0;
    for (int c = 0; c < C; ++c) {
      const T t = std::tanh(a * x[c]);
      row += g[c] * weight[c] * x[c] * (T(1) - t * t);
    }
    sum += row;
  }
  *dalpha += sum;
}

// y = w erf(a x + s) + b, with erf'(z) = 2/sqrt(pi) exp(-z^2) = e(z):
//   dy/dx = w a e,  dy/dw = erf,  dy/db = 1,  dy/da = w x e,  dy/ds = w e
template <typename T>
void derf_forward(T* out, const T* inp, const T* weight, const T* bias, const T* alpha, const T* shift, int N, int C) {
  BLOCKLAB_PROFILE("derf_forward");
  const T a = *alpha, s = *shift;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<long>(n) * C;
    T* y = out + static_cast<long>(n) * C;
    for (int c = 0; c < C; ++c) y[c] = weight[c] * std::erf(a * x[c] + s) + bias[c];
  }
}

template <typename T>
void derf_backward(T* dinp, T* dweight, T* dbias, T* dalpha, T* dshift, const T* dout, const T* inp, const T* weight,
                   const T* alpha, const T* shift, int N, int C) {
  BLOCKLAB_PROFILE("derf_backward");
  const T a = *alpha, s = *shift;
  const T two_over_sqrt_pi = static_cast<T>(1.12837916709551257390);  // 2/sqrt(pi)
  auto slope = [&](T x) {
    const T z = a * x + s;
    return two_over_sqrt_pi * std::exp(-z * z);
  };
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<long>(n) * C;
    const T* g = dout + static_cast<long>(n) * C;
    T* dx = dinp + static_cast<long>(n) * C;
    for (int c = 0; c < C; ++c) dx[c] += g[c] * weight[c] * a * slope(x[c]);
  }
  accumulate_affine_grads(dweight, dbias, dout, N, C,
                          [&](int n, int c) { return std::erf(a * inp[static_cast<long>(n) * C + c] + s); });
  // d alpha and d shift: two scalars, summed row by row in order (independent of the thread count)
  T sum_a = 0, sum_s = 0;
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<long>(n) * C;
    const T* g = dout + static_cast<long>(n) * C;
    T row_a = 0, row_s = 0;
    for (int c = 0; c < C; ++c) {
      const T ge = g[c] * weight[c] * slope(x[c]);
      row_a += ge * x[c];
      row_s += ge;
    }
    sum_a += row_a;
    sum_s += row_s;
  }
  *dalpha += sum_a;
  *dshift += sum_s;
}

#define BLOCKLAB_INSTANTIATE(T)                                                                             \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, T);                \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, int); \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int, int, T);                                \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int, int);             \
  template void dyt_forward<T>(T*, const T*, const T*, const T*, const T*, int, int);                      \
  template void dyt_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*, int, int);            \
  template void derf_forward<T>(T*, const T*, const T*, const T*, const T*, const T*, int, int);            \
  template void derf_backward<T>(T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, int);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)

}  // namespace blocklab::kernels
