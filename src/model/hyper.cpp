#include "model/hyper.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/isa.h"
#include "kernels/lane_reduce.h"
#include "util/error.h"

// Every loop over the tokens runs in parallel (each token's mixing is its own), the sums over the tokens (the
// weights' gradients) run in token order, and the dot products over the width in kernels::lane_dot's fixed
// order: the results do not depend on the thread count. Each token's work is compiled for every instruction-set
// level and runs at the CPU's (kernels::on_isa), as the kernels do.
namespace blocklab {

namespace {

template <typename T>
T dot(const T* x, const T* y, int C) {
  return kernels::lane_dot(x, y, C);
}

// y = a x (first) or y += a x
template <typename T>
void scaled_add(T* y, T a, const T* x, int C, bool first) {
  if (first)
    for (int k = 0; k < C; ++k) y[k] = a * x[k];
  else
    for (int k = 0; k < C; ++k) y[k] += a * x[k];
}

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

}  // namespace

// M0 = exp(P - column max); then 20 x (columns to sum 1, rows to sum 1), each a multiplication by the sum's
// reciprocal (within an ulp of the division, at a fraction of its cost). The iterates are kept for the backward.
// Column sums run over the rows in order with the columns side by side (contiguous, so they vectorise).
//
// kN > 0 compiles the projection for that n (the usual expansion rates): the loops unroll and vectorise and the
// iterates live on the stack. kN = 0 is the same code for any n, in the same order; where the compiler fuses
// multiply-adds (FMA levels) it may fuse the unrolled backward differently, so its last bits can differ.
constexpr size_t sinkhorn_buffer(int n) {  // the iterates, then n sums and n reciprocals
  return static_cast<size_t>(2 * kSinkhornIterations + 1) * n * n + 2 * static_cast<size_t>(n);
}
constexpr size_t sinkhorn_backward_buffer(int n) {  // the gradient, then per group sum(x), sum(dy * y), 1 / sum(x)
  return static_cast<size_t>(n) * n + 3 * static_cast<size_t>(n);
}

template <typename T, int kN>
static void sinkhorn_iterates(T* m, const T* P, int runtime_n) {
  const int n = kN > 0 ? kN : runtime_n, nn = n * n, steps = 2 * kSinkhornIterations;
  T* m0 = m;
  T* sum = m + static_cast<size_t>(steps + 1) * nn;
  T* inv = sum + n;
  for (int j = 0; j < n; ++j) sum[j] = P[j];
  for (int i = 1; i < n; ++i)
    for (int j = 0; j < n; ++j) sum[j] = std::max(sum[j], P[i * n + j]);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) m0[i * n + j] = std::exp(P[i * n + j] - sum[j]);
  for (int step = 0; step < steps; ++step) {
    const T* x = m + static_cast<size_t>(step) * nn;
    T* y = m + static_cast<size_t>(step + 1) * nn;
    if (step % 2 == 0) {  // columns
      for (int j = 0; j < n; ++j) sum[j] = 0;
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) sum[j] += x[i * n + j];
      for (int j = 0; j < n; ++j) inv[j] = T(1) / sum[j];
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) y[i * n + j] = x[i * n + j] * inv[j];
    } else {  // rows
      for (int i = 0; i < n; ++i) {
        T s = 0;
        for (int j = 0; j < n; ++j) s += x[i * n + j];
        const T r = T(1) / s;
        for (int j = 0; j < n; ++j) y[i * n + j] = x[i * n + j] * r;
      }
    }
  }
}

template <typename T, int kN>
static void sinkhorn_backward_n(T* dP, const T* dM, const T* P, T* m, T* d, int runtime_n) {
  const int n = kN > 0 ? kN : runtime_n, nn = n * n;
  sinkhorn_iterates<T, kN>(m, P, n);
  std::copy_n(dM, nn, d);
  T* sum = d + nn;
  T* dot = sum + n;
  T* inv = dot + n;
  // y = x / sum(x over the group):  dx = (dy - sum(dy * y)) / sum(x)
  for (int step = 2 * kSinkhornIterations - 1; step >= 0; --step) {
    const T* x = m + static_cast<size_t>(step) * nn;
    const T* y = m + static_cast<size_t>(step + 1) * nn;
    if (step % 2 == 0) {  // the groups are the columns
      for (int j = 0; j < n; ++j) sum[j] = 0, dot[j] = 0;
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) sum[j] += x[i * n + j], dot[j] += d[i * n + j] * y[i * n + j];
      for (int j = 0; j < n; ++j) inv[j] = T(1) / sum[j];
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) d[i * n + j] = (d[i * n + j] - dot[j]) * inv[j];
    } else {  // the rows
      for (int i = 0; i < n; ++i) {
        T s = 0, dy_y = 0;
        for (int j = 0; j < n; ++j) s += x[i * n + j], dy_y += d[i * n + j] * y[i * n + j];
        const T r = T(1) / s;
        for (int j = 0; j < n; ++j) d[i * n + j] = (d[i * n + j] - dy_y) * r;
      }
    }
  }
  // M0 = exp(P - max): the max shifts whole columns, which the first normalisation undoes
  for (int k = 0; k < nn; ++k) dP[k] = d[k] * m[k];
}

template <typename T, int kN>
static void sinkhorn_forward_n(T* M, const T* P, T* m, int runtime_n) {
  const int n = kN > 0 ? kN : runtime_n;
  sinkhorn_iterates<T, kN>(m, P, n);
  std::copy_n(m + static_cast<size_t>(2 * kSinkhornIterations) * n * n, n * n, M);
}

template <typename T, int kN>
static void sinkhorn_forward_fixed(T* M, const T* P) {
  T m[sinkhorn_buffer(kN)];
  sinkhorn_forward_n<T, kN>(M, P, m, kN);
}

template <typename T, int kN>
static void sinkhorn_backward_fixed(T* dP, const T* dM, const T* P) {
  T m[sinkhorn_buffer(kN)];
  T d[sinkhorn_backward_buffer(kN)];
  sinkhorn_backward_n<T, kN>(dP, dM, P, m, d, kN);
}

template <typename T>
void sinkhorn_forward(T* M, const T* P, int n) {
  switch (n) {
    case 2:
      return sinkhorn_forward_fixed<T, 2>(M, P);
    case 3:
      return sinkhorn_forward_fixed<T, 3>(M, P);
    case 4:
      return sinkhorn_forward_fixed<T, 4>(M, P);
    case 8:
      return sinkhorn_forward_fixed<T, 8>(M, P);
    default:
      break;
  }
  thread_local std::vector<T> m;
  m.resize(sinkhorn_buffer(n));
  sinkhorn_forward_n<T, 0>(M, P, m.data(), n);
}

template <typename T>
void sinkhorn_backward(T* dP, const T* dM, const T* P, int n) {
  switch (n) {
    case 2:
      return sinkhorn_backward_fixed<T, 2>(dP, dM, P);
    case 3:
      return sinkhorn_backward_fixed<T, 3>(dP, dM, P);
    case 4:
      return sinkhorn_backward_fixed<T, 4>(dP, dM, P);
    case 8:
      return sinkhorn_backward_fixed<T, 8>(dP, dM, P);
    default:
      break;
  }
  thread_local std::vector<T> m;
  thread_local std::vector<T> d;
  m.resize(sinkhorn_buffer(n));
  d.resize(sinkhorn_backward_buffer(n));
  sinkhorn_backward_n<T, 0>(dP, dM, P, m.data(), d.data(), n);
}

template <typename T>
long carve_hyper_acts(HyperActs<T>& a, T* base, const ModelConfig& c, long N, bool with_sum) {
  Carver<T> m(base);
  a = HyperActs<T>{};
  const long n = c.residual_streams, C = c.width;
  a.h = m.take(N * C);
  a.out = m.take(n * N * C);
  if (with_sum) a.sum = m.take(N * C);
  a.a_in = m.take(N * n), a.a_res = m.take(N * n * n), a.b = m.take(N * n);
  if (c.hc_dynamic) {
    m.advance(carve_norm_acts(a.norm, m.next(), c, n * N));
    a.f_in = m.take(N * n), a.f_res = m.take(N * n * n), a.f_b = m.take(N * n);
  }
  if (c.stream() == ResidualStream::ManifoldHyper) a.pre_res = m.take(N * n * n);
  return m.used();
}

template <typename T>
long carve_hyper_scratch(HyperScratch<T>& s, T* base, const ModelConfig& c, long N) {
  Carver<T> m(base);
  s = HyperScratch<T>{};
  const long n = c.residual_streams, C = c.width;
  s.dh = m.take(N * C), s.d_branch = m.take(N * C);
  s.d_in = m.take(N * n), s.d_res = m.take(N * n * n), s.d_b = m.take(N * n);
  if (c.hc_dynamic) s.d_norm = m.take(n * N * C);
  s.d_streams = m.take(n * N * C);
  return m.used();
}

template <typename T>
void hyper_input_forward(HyperActs<T>& a, const T* H, const HyperTensors<T>& w, const ModelConfig& c, long N) {
  const int n = c.residual_streams, C = c.width;
  const long NC = N * C, nn = static_cast<long>(n) * n;
  const bool mhc = c.stream() == ResidualStream::ManifoldHyper;
  if (c.hc_dynamic) norm_forward(a.norm, H, w.norm, c, n * N);
  const T s_in = c.hc_dynamic ? w.scale_alpha[0] : T(0), s_res = c.hc_dynamic ? w.scale_alpha[mhc ? 1 : 0] : T(0);
  const T s_b = c.hc_dynamic ? w.scale_beta[0] : T(0);
  auto f = [mhc](T z) { return mhc ? z : std::tanh(z); };
  // W_r's columns, contiguous for the dot products
  thread_local std::vector<T> w_res_t;
  if (c.hc_dynamic) {
    w_res_t.resize(static_cast<size_t>(n) * C);
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < C; ++k) w_res_t[static_cast<size_t>(j) * C + k] = w.w_res[k * n + j];
  }
  const T* w_res_cols = w_res_t.data();
#pragma omp parallel for schedule(static)
  for (long t = 0; t < N; ++t) {
    kernels::on_isa([&](auto) {
      for (int i = 0; i < n; ++i) {
        T* a_res = a.a_res + (t * n + i) * n;
        if (!c.hc_dynamic) {
          a.a_in[t * n + i] = w.alpha_in[i];
          for (int j = 0; j < n; ++j) a_res[j] = w.alpha_res[i * n + j];
          a.b[t * n + i] = w.beta[i];
          continue;
        }
        // Hn_i . W: the input weight, the row i of the residual mix, and stream i's output weight
        const T* hn = a.norm.out + (i * N + t) * C;
        const T f_in = f(dot(hn, w.w_in, C));
        a.f_in[t * n + i] = f_in;
        a.a_in[t * n + i] = w.alpha_in[i] + s_in * f_in;
        T* f_res = a.f_res + (t * n + i) * n;
        for (int j = 0; j < n; ++j) {
          f_res[j] = f(dot(hn, w_res_cols + static_cast<long>(j) * C, C));
          a_res[j] = w.alpha_res[i * n + j] + s_res * f_res[j];
        }
        const T f_b = f(dot(hn, w.w_beta, C));
        a.f_b[t * n + i] = f_b;
        a.b[t * n + i] = w.beta[i] + s_b * f_b;
      }
      if (mhc) {
        // A_m(H) = sigmoid(.), B(H) = 2 sigmoid(.), A_r(H) = Sinkhorn(.)
        for (int i = 0; i < n; ++i) {
          a.a_in[t * n + i] = sigmoid(a.a_in[t * n + i]);
          a.b[t * n + i] = T(2) * sigmoid(a.b[t * n + i]);
        }
        std::copy_n(a.a_res + t * nn, nn, a.pre_res + t * nn);
        sinkhorn_forward(a.a_res + t * nn, static_cast<const T*>(a.pre_res + t * nn), n);
      }
      // h[t] = sum_i A_m(H)[t, i] H_i[t]
      for (int i = 0; i < n; ++i) scaled_add(a.h + t * C, a.a_in[t * n + i], H + i * NC + t * C, C, i == 0);
    });
  }
}

template <typename T>
void hyper_output_forward(HyperActs<T>& a, const T* H, const T* branch, const ModelConfig& c, long N) {
  const int n = c.residual_streams, C = c.width;
  const long NC = N * C;
  // out_j[t] = sum_i A_r(H)[t, i, j] H_i[t] + B(H)[t, j] T(h)[t]
#pragma omp parallel for schedule(static)
  for (long t = 0; t < N; ++t) {
    kernels::on_isa([&](auto) {
      for (int j = 0; j < n; ++j) {
        T* y = a.out + j * NC + t * C;
        for (int i = 0; i < n; ++i) scaled_add(y, a.a_res[(t * n + i) * n + j], H + i * NC + t * C, C, i == 0);
        scaled_add(y, a.b[t * n + j], branch + t * C, C, false);
      }
      if (a.sum != nullptr) {
        T* sum = a.sum + t * C;
        std::copy_n(a.out + t * C, C, sum);
        for (int j = 1; j < n; ++j)
          for (int k = 0; k < C; ++k) sum[k] += a.out[j * NC + t * C + k];
      }
    });
  }
}

template <typename T>
void hyper_output_backward(T* dH, HyperScratch<T>& s, const T* d_out, const HyperActs<T>& a, const T* H,
                           const T* branch, const ModelConfig& c, long N) {
  const int n = c.residual_streams, C = c.width;
  const long NC = N * C;
#pragma omp parallel for schedule(static)
  for (long t = 0; t < N; ++t) {
    kernels::on_isa([&](auto) {
      const T* f = branch + t * C;
      for (int j = 0; j < n; ++j) {
        // d T(h) = sum_j B[j] d out_j;  d B[j] = <d out_j, T(h)>
        const T* dy = d_out + j * NC + t * C;
        scaled_add(s.d_branch + t * C, a.b[t * n + j], dy, C, j == 0);
        s.d_b[t * n + j] = dot(dy, f, C);
      }
      for (int i = 0; i < n; ++i) {
        // d A_r[i][j] = <d out_j, H_i>;  d H_i = sum_j A_r[i][j] d out_j
        const T* x = H + i * NC + t * C;
        for (int j = 0; j < n; ++j) {
          const T* dy = d_out + j * NC + t * C;
          s.d_res[(t * n + i) * n + j] = dot(dy, x, C);
          scaled_add(dH + i * NC + t * C, a.a_res[(t * n + i) * n + j], dy, C, j == 0);
        }
      }
    });
  }
}

namespace {
template <typename T>
void hyper_dynamic_backward(T* dH, HyperScratch<T>& s, const HyperTensors<T>& g, const HyperActs<T>& a, const T* H,
                            const HyperTensors<T>& w, const ModelConfig& c, long N);
}  // namespace

template <typename T>
void hyper_input_backward(T* dH, HyperScratch<T>& s, const HyperTensors<T>& g, const HyperActs<T>& a, const T* H,
                          const HyperTensors<T>& w, const ModelConfig& c, long N, bool dh_in_dH) {
  const int n = c.residual_streams, C = c.width;
  const long NC = N * C, nn = static_cast<long>(n) * n;
  const bool mhc = c.stream() == ResidualStream::ManifoldHyper;
  // h = sum_i A_m[i] H_i:  d A_m[i] = <dh, H_i>;  d H_i += A_m[i] dh. mhc: then back through sigmoid,
  // 2 sigmoid and Sinkhorn, the gradients of the pre-activations in place.
#pragma omp parallel for schedule(static)
  for (long t = 0; t < N; ++t) {
    kernels::on_isa([&](auto) {
      const T* dh = s.dh + t * C;
      for (int i = 0; i < n; ++i) {
        s.d_in[t * n + i] = dot(dh, H + i * NC + t * C, C);
        if (!dh_in_dH) scaled_add(dH + i * NC + t * C, a.a_in[t * n + i], dh, C, false);
      }
      if (mhc) {
        for (int i = 0; i < n; ++i) {
          const T a_in = a.a_in[t * n + i], b = a.b[t * n + i];
          s.d_in[t * n + i] *= a_in * (T(1) - a_in);
          s.d_b[t * n + i] *= b * (T(1) - b / 2);
        }
        sinkhorn_backward(s.d_res + t * nn, static_cast<const T*>(s.d_res + t * nn),
                          static_cast<const T*>(a.pre_res + t * nn), n);
      }
    });
  }
  // The static weights: sums over the tokens, in row order.
  for (int i = 0; i < n; ++i) {
    T d_in = 0, d_b = 0;
    for (long t = 0; t < N; ++t) d_in += s.d_in[t * n + i], d_b += s.d_b[t * n + i];
    g.alpha_in[i] += d_in;
    g.beta[i] += d_b;
    for (int j = 0; j < n; ++j) {
      T d_res = 0;
      for (long t = 0; t < N; ++t) d_res += s.d_res[(t * n + i) * n + j];
      g.alpha_res[i * n + j] += d_res;
    }
  }
  if (c.hc_dynamic) hyper_dynamic_backward(dH, s, g, a, H, w, c, N);
}

namespace {

// The dynamic part of the mixing weights (hc_dynamic), after hyper_input_backward has the mixing's gradients in
// s.d_in, s.d_res, s.d_b: the scales' and W's gradients, and d H through Hn = Norm(H).
template <typename T>
void hyper_dynamic_backward(T* dH, HyperScratch<T>& s, const HyperTensors<T>& g, const HyperActs<T>& a, const T* H,
                            const HyperTensors<T>& w, const ModelConfig& c, long N) {
  const int n = c.residual_streams, C = c.width;
  const bool mhc = c.stream() == ResidualStream::ManifoldHyper;
  // A(H) = A + s f(z), f = tanh (mhc: identity), z = Hn . W:  d s += sum d A(H) f;  dz = d A(H) s f'(z).
  // The scales' gradients in token order; then s.d_in, s.d_res, s.d_b become dz in place.
  const T s_in = w.scale_alpha[0], s_res = w.scale_alpha[mhc ? 1 : 0], s_b = w.scale_beta[0];
  auto slope = [mhc](T f) { return mhc ? T(1) : T(1) - f * f; };
  T d_s_in = 0, d_s_res = 0, d_s_beta = 0;
  for (long t = 0; t < N; ++t)
    for (int i = 0; i < n; ++i) {
      d_s_in += s.d_in[t * n + i] * a.f_in[t * n + i];
      for (int j = 0; j < n; ++j) d_s_res += s.d_res[(t * n + i) * n + j] * a.f_res[(t * n + i) * n + j];
      d_s_beta += s.d_b[t * n + i] * a.f_b[t * n + i];
    }
  if (mhc) {
    g.scale_alpha[0] += d_s_in;
    g.scale_alpha[1] += d_s_res;
  } else {
    g.scale_alpha[0] += d_s_in + d_s_res;
  }
  g.scale_beta[0] += d_s_beta;
  T* z_in = s.d_in;
  T* z_res = s.d_res;
  T* z_b = s.d_b;
  // W_r and its gradient by columns (n, C), contiguous for the loops below; the gradient is copied back after
  thread_local std::vector<T> w_res_t, g_res_t;
  w_res_t.resize(static_cast<size_t>(n) * C), g_res_t.resize(static_cast<size_t>(n) * C);
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < C; ++k)
      w_res_t[static_cast<size_t>(j) * C + k] = w.w_res[k * n + j],
                                           g_res_t[static_cast<size_t>(j) * C + k] = g.w_res[k * n + j];
  const T* w_res_cols = w_res_t.data();
  T* g_res_cols = g_res_t.data();
  // d Hn_i[t] = z_in W_m + sum_j z_res[j] W_r[:, j] + z_b W_b, per token
#pragma omp parallel for schedule(static)
  for (long t = 0; t < N; ++t)
    kernels::on_isa([&](auto) {
      for (int i = 0; i < n; ++i) {
        const long ti = t * n + i;
        z_in[ti] = z_in[ti] * s_in * slope(a.f_in[ti]);
        z_b[ti] = z_b[ti] * s_b * slope(a.f_b[ti]);
        for (int j = 0; j < n; ++j) z_res[ti * n + j] = z_res[ti * n + j] * s_res * slope(a.f_res[ti * n + j]);
        T* d_hn = s.d_norm + (i * N + t) * C;
        scaled_add(d_hn, z_in[ti], w.w_in, C, true);
        for (int j = 0; j < n; ++j)
          scaled_add(d_hn, z_res[ti * n + j], w_res_cols + static_cast<long>(j) * C, C, false);
        scaled_add(d_hn, z_b[ti], w.w_beta, C, false);
      }
    });
  // W's gradients: sum over the tokens (in token order, then stream) of dz Hn; the channels in parallel
  constexpr int kChunk = 16;
  const int chunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    kernels::on_isa([&](auto) {
      const int k0 = chunk * kChunk, len = std::min(C, k0 + kChunk) - k0;
      for (long t = 0; t < N; ++t)
        for (int i = 0; i < n; ++i) {
          const long ti = t * n + i;
          const T* hn = a.norm.out + (i * N + t) * C + k0;
          scaled_add(g.w_in + k0, z_in[ti], hn, len, false);
          for (int j = 0; j < n; ++j)
            scaled_add(g_res_cols + static_cast<long>(j) * C + k0, z_res[ti * n + j], hn, len, false);
          scaled_add(g.w_beta + k0, z_b[ti], hn, len, false);
        }
    });
  }
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < C; ++k) g.w_res[k * n + j] = g_res_cols[static_cast<size_t>(j) * C + k];
  // Hn = Norm(H), n*N rows
  norm_backward(dH, g.norm, static_cast<const T*>(s.d_norm), H, w.norm, a.norm, c, n * N);
}

}  // namespace

#define BLOCKLAB_INSTANTIATE(T)                                                                                      \
  template long carve_hyper_acts<T>(HyperActs<T>&, T*, const ModelConfig&, long, bool);                              \
  template long carve_hyper_scratch<T>(HyperScratch<T>&, T*, const ModelConfig&, long);                              \
  template void hyper_input_forward<T>(HyperActs<T>&, const T*, const HyperTensors<T>&, const ModelConfig&, long);   \
  template void hyper_output_forward<T>(HyperActs<T>&, const T*, const T*, const ModelConfig&, long);                \
  template void hyper_output_backward<T>(T*, HyperScratch<T>&, const T*, const HyperActs<T>&, const T*, const T*,    \
                                         const ModelConfig&, long);                                                  \
  template void hyper_input_backward<T>(T*, HyperScratch<T>&, const HyperTensors<T>&, const HyperActs<T>&, const T*, \
                                        const HyperTensors<T>&, const ModelConfig&, long, bool);                     \
  template void sinkhorn_forward<T>(T*, const T*, int);                                                              \
  template void sinkhorn_backward<T>(T*, const T*, const T*, int);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)
#undef BLOCKLAB_INSTANTIATE

}  // namespace blocklab
