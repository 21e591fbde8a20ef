#include "kernels/optimizers.h"

#include <algorithm>
#include <cmath>

#include "kernels/isa.h"
#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
constexpr long kChunk = 16384;  // elements per parallel work item, as in kernels/adam.cpp

// body(isa, start, len) over [0, n) in chunks of kChunk, the chunks split over the threads, each compiled for the
// running level.
template <typename Body>
void for_chunks(long n, const Body& body) {
#pragma omp parallel for schedule(static)
  for (long start = 0; start < n; start += kChunk)
    on_isa([&](auto isa) { body(isa, start, std::min(kChunk, n - start)); });
}

// Whether the level has fused multiply-add (where the compiler contracts a * b + c into one).
template <Isa kIsa>
constexpr bool has_fma() {
#if defined(__aarch64__)
  return true;
#else
  return kIsa == Isa::Avx2 || kIsa == Isa::Avx512;
#endif
}

// The gradient with L2 weight decay, g * grad_scale + weight_decay * p, with g * grad_scale always rounded on its
// own: where the level has FMA the decay's product is the one fused (explicitly: left to itself the compiler may
// fuse g * grad_scale instead), so that the fused update equals clipping in place (g rounded to g * grad_scale)
// followed by the update with grad_scale 1, bit for bit.
template <Isa kIsa, typename T>
BLOCKLAB_ALWAYS_INLINE T decayed_grad(T g, T grad_scale, T weight_decay, T p) {
  const T scaled = g * grad_scale;
  if constexpr (has_fma<kIsa>())
    return std::fma(weight_decay, p, scaled);
  else
    return scaled + weight_decay * p;
}

template <Isa kIsa, typename T, bool kRectified, bool kZero>
BLOCKLAB_ALWAYS_INLINE void radam_chunk(T* __restrict p, T* __restrict g, T* __restrict m, T* __restrict v, long n,
                                        const RAdamCoefficients<T>& c, T grad_scale) {
  const T b1 = c.beta1, b2 = c.beta2, one_minus_b1 = T(1) - c.beta1, one_minus_b2 = T(1) - c.beta2;
  const T wd = c.weight_decay, step_size = c.step_size, sqrt_bc2 = c.sqrt_bc2, eps = c.eps;
  for (long i = 0; i < n; ++i) {
    const T gi = decayed_grad<kIsa>(g[i], grad_scale, wd, p[i]);
    const T mi = b1 * m[i] + one_minus_b1 * gi;
    const T vi = b2 * v[i] + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    if constexpr (kRectified)
      p[i] = p[i] - step_size * mi * sqrt_bc2 / (std::sqrt(vi) + eps);
    else
      p[i] = p[i] - step_size * mi;
    if constexpr (kZero) g[i] = T(0);
  }
}

template <Isa kIsa, typename T, bool kNesterov, bool kZero>
BLOCKLAB_ALWAYS_INLINE void sgd_chunk(T* __restrict p, T* __restrict g, T* __restrict b, long n,
                                      const SgdCoefficients<T>& c, T grad_scale) {
  const T lr = c.lr, mu = c.momentum, wd = c.weight_decay;
  for (long i = 0; i < n; ++i) {
    const T gi = decayed_grad<kIsa>(g[i], grad_scale, wd, p[i]);
    const T bi = mu * b[i] + gi;
    b[i] = bi;
    p[i] = p[i] - lr * (kNesterov ? gi + mu * bi : bi);
    if constexpr (kZero) g[i] = T(0);
  }
}

template <Isa kIsa, typename T, bool kZero>
BLOCKLAB_ALWAYS_INLINE void plain_sgd_chunk(T* __restrict p, T* __restrict g, long n, const SgdCoefficients<T>& c,
                                            T grad_scale) {
  const T lr = c.lr, wd = c.weight_decay;
  for (long i = 0; i < n; ++i) {
    const T gi = decayed_grad<kIsa>(g[i], grad_scale, wd, p[i]);
    p[i] = p[i] - lr * gi;
    if constexpr (kZero) g[i] = T(0);
  }
}

template <typename T, bool kZero>
BLOCKLAB_ALWAYS_INLINE void lion_chunk(T* __restrict p, T* __restrict g, T* __restrict m, long n,
                                       const LionCoefficients<T>& c, T grad_scale) {
  const T lr = c.lr, b1 = c.beta1, b2 = c.beta2, one_minus_b1 = T(1) - c.beta1, one_minus_b2 = T(1) - c.beta2;
  const T wd = c.weight_decay;
  for (long i = 0; i < n; ++i) {
    const T gi = g[i] * grad_scale;
    const T ci = b1 * m[i] + one_minus_b1 * gi;
    const T sign = ci > T(0) ? T(1) : (ci < T(0) ? T(-1) : T(0));
    p[i] = p[i] - lr * (sign + wd * p[i]);
    m[i] = b2 * m[i] + one_minus_b2 * gi;
    if constexpr (kZero) g[i] = T(0);
  }
}

template <typename T, bool kNesterov, bool kZero>
BLOCKLAB_ALWAYS_INLINE void muon_momentum_chunk(T* __restrict u, T* __restrict g, T* __restrict b, long n, T mu,
                                                T grad_scale) {
  const T one_minus_mu = T(1) - mu;
  for (long i = 0; i < n; ++i) {
    const T gi = g[i] * grad_scale;
    const T bi = mu * b[i] + one_minus_mu * gi;
    b[i] = bi;
    u[i] = kNesterov ? mu * bi + one_minus_mu * gi : bi;
    if constexpr (kZero) g[i] = T(0);
  }
}
}  // namespace

template <typename T>
void radam_update(T* p, T* g, T* m, T* v, long n, const RAdamCoefficients<T>& c, T grad_scale, bool zero_grads) {
  BLOCKLAB_PROFILE("radam_update");
  for_chunks(n, [&](auto isa, long s, long len) {
    if (c.rectified && zero_grads)
      radam_chunk<decltype(isa)::value, T, true, true>(p + s, g + s, m + s, v + s, len, c, grad_scale);
    else if (c.rectified)
      radam_chunk<decltype(isa)::value, T, true, false>(p + s, g + s, m + s, v + s, len, c, grad_scale);
    else if (zero_grads)
      radam_chunk<decltype(isa)::value, T, false, true>(p + s, g + s, m + s, v + s, len, c, grad_scale);
    else
      radam_chunk<decltype(isa)::value, T, false, false>(p + s, g + s, m + s, v + s, len, c, grad_scale);
  });
}

template <typename T>
void sgd_update(T* p, T* g, T* b, long n, const SgdCoefficients<T>& c, T grad_scale, bool zero_grads) {
  BLOCKLAB_PROFILE("sgd_update");
  for_chunks(n, [&](auto isa, long s, long len) {
    if (b == nullptr) {
      if (zero_grads)
        plain_sgd_chunk<decltype(isa)::value, T, true>(p + s, g + s, len, c, grad_scale);
      else
        plain_sgd_chunk<decltype(isa)::value, T, false>(p + s, g + s, len, c, grad_scale);
    } else if (c.nesterov) {
      if (zero_grads)
        sgd_chunk<decltype(isa)::value, T, true, true>(p + s, g + s, b + s, len, c, grad_scale);
      else
        sgd_chunk<decltype(isa)::value, T, true, false>(p + s, g + s, b + s, len, c, grad_scale);
    } else {
      if (zero_grads)
        sgd_chunk<decltype(isa)::value, T, false, true>(p + s, g + s, b + s, len, c, grad_scale);
      else
        sgd_chunk<decltype(isa)::value, T, false, false>(p + s, g + s, b + s, len, c, grad_scale);
    }
  });
}

template <typename T>
void lion_update(T* p, T* g, T* m, long n, const LionCoefficients<T>& c, T grad_scale, bool zero_grads) {
  BLOCKLAB_PROFILE("lion_update");
  for_chunks(n, [&](auto, long s, long len) {
    if (zero_grads)
      lion_chunk<T, true>(p + s, g + s, m + s, len, c, grad_scale);
    else
      lion_chunk<T, false>(p + s, g + s, m + s, len, c, grad_scale);
  });
}

template <typename T>
void square_grads(T* v, const T* g, long n, T grad_scale) {
  for_chunks(n, [&](auto, long s, long len) {
    T* __restrict vs = v + s;
    const T* __restrict gs = g + s;
    for (long i = 0; i < len; ++i) {
      const T gi = gs[i] * grad_scale;
      vs[i] = gi * gi;
    }
  });
}

template <typename T>
void muon_momentum(T* u, T* g, T* b, long n, T mu, bool nesterov, T grad_scale, bool zero_grads) {
  for_chunks(n, [&](auto, long s, long len) {
    if (nesterov && zero_grads)
      muon_momentum_chunk<T, true, true>(u + s, g + s, b + s, len, mu, grad_scale);
    else if (nesterov)
      muon_momentum_chunk<T, true, false>(u + s, g + s, b + s, len, mu, grad_scale);
    else if (zero_grads)
      muon_momentum_chunk<T, false, true>(u + s, g + s, b + s, len, mu, grad_scale);
    else
      muon_momentum_chunk<T, false, false>(u + s, g + s, b + s, len, mu, grad_scale);
  });
}

template <typename T>
void muon_apply(T* p, const T* o, int rows, int cols, bool transposed, T decay, T step) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; ++i) {
    T* __restrict pi = p + static_cast<long>(i) * cols;
    if (transposed) {
      for (int j = 0; j < cols; ++j) pi[j] = pi[j] * decay - step * o[static_cast<long>(j) * rows + i];
    } else {
      const T* __restrict oi = o + static_cast<long>(i) * cols;
      for (int j = 0; j < cols; ++j) pi[j] = pi[j] * decay - step * oi[j];
    }
  }
}

#define BLOCKLAB_OPTIMIZER_KERNELS(T)                                                                             \
  template void radam_update<T>(T*, T*, T*, T*, long, const RAdamCoefficients<T>&, T, bool);                       \
  template void sgd_update<T>(T*, T*, T*, long, const SgdCoefficients<T>&, T, bool);                               \
  template void lion_update<T>(T*, T*, T*, long, const LionCoefficients<T>&, T, bool);                             \
  template void square_grads<T>(T*, const T*, long, T);                                                            \
  template void muon_momentum<T>(T*, T*, T*, long, T, bool, T, bool);                                              \
  template void muon_apply<T>(T*, const T*, int, int, bool, T, T);
BLOCKLAB_OPTIMIZER_KERNELS(float)
BLOCKLAB_OPTIMIZER_KERNELS(double)
#undef BLOCKLAB_OPTIMIZER_KERNELS

}  // namespace blocklab::kernels
