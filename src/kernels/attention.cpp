#include "kernels/attention.h"

#include <cmath>

#include "kernels/fast_math.h"

namespace blocklab::kernels {

// Work is split over (batch, head) pairs: each writes only its own slices, and every sum below runs in
// a fixed order, so the result does not depend on the thread count. Inner loops run over contiguous
// memory (positions s, or the head dimension i) so that they vectorise.

size_t attention_scratch_size(int B, int Tn, int C, int H) {
  return static_cast<size_t>(B) * H * (static_cast<size_t>(Tn) * Tn + static_cast<size_t>(C / H) * Tn);
}

namespace {

// One (batch, head): q, k, v point at the head's first column in row 0; rows are C3 apart.
// kt (hs, T) scratch for K transposed; p (T, T) the probabilities; o (T, C) the head's output columns.
template <typename T>
BLOCKLAB_MULTIVERSION void attention_forward_head(T* o, T* p, T* kt, const T* q, const T* k, const T* v, int Tn,
                                                  int hs, long C3, long C) {
  for (int s = 0; s < Tn; ++s)
    for (int i = 0; i < hs; ++i) kt[static_cast<long>(i) * Tn + s] = k[s * C3 + i];
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (int t = 0; t < Tn; ++t) {
    T* row = p + static_cast<long>(t) * Tn;
    const int n = t + 1;  // causal window s = 0..t
    // z[s] = scale * q_t . k_s
    for (int s = 0; s < n; ++s) row[s] = 0;
    for (int i = 0; i < hs; ++i) {
      const T qi = q[t * C3 + i] * scale;
      const T* kti = kt + static_cast<long>(i) * Tn;
      for (int s = 0; s < n; ++s) row[s] += qi * kti[s];
    }
    T maxval = row[0];
    for (int s = 1; s < n; ++s) maxval = row[s] > maxval ? row[s] : maxval;
    T sum = 0;
    for (int s = 0; s < n; ++s) {
      row[s] = fast_exp(row[s] - maxval);
      sum += row[s];
    }
    const T inv = T(1) / sum;
    for (int s = 0; s < n; ++s) row[s] *= inv;
    for (int s = n; s < Tn; ++s) row[s] = 0;
    // o_t = sum_s p[t,s] v_s
    T* ot = o + t * C;
    for (int i = 0; i < hs; ++i) ot[i] = 0;
    for (int s = 0; s < n; ++s) {
      const T ps = row[s];
      const T* vs = v + s * C3;
      for (int i = 0; i < hs; ++i) ot[i] += ps * vs[i];
    }
  }
}

template <typename T>
BLOCKLAB_MULTIVERSION void attention_backward_head(T* dq, T* dk, T* dv, T* dp, T* vt, const T* dout, const T* q,
                                                   const T* k, const T* v, const T* p, int Tn, int hs, long C3,
                                                   long C) {
  for (int s = 0; s < Tn; ++s)
    for (int i = 0; i < hs; ++i) vt[static_cast<long>(i) * Tn + s] = v[s * C3 + i];
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (int t = 0; t < Tn; ++t) {
    const T* prow = p + static_cast<long>(t) * Tn;
    T* dprow = dp + static_cast<long>(t) * Tn;
    const T* g = dout + t * C;
    const int n = t + 1;
    // forward: o_t = sum_s p[t,s] v_s  =>  dp[t,s] = g_t . v_s,  dv_s += p[t,s] g_t
    for (int s = 0; s < n; ++s) dprow[s] = 0;
    for (int i = 0; i < hs; ++i) {
      const T gi = g[i];
      const T* vti = vt + static_cast<long>(i) * Tn;
      for (int s = 0; s < n; ++s) dprow[s] += gi * vti[s];
    }
    for (int s = 0; s < n; ++s) {
      const T ps = prow[s];
      T* dvs = dv + s * C3;
      for (int i = 0; i < hs; ++i) dvs[i] += ps * g[i];
    }
    // forward: p = softmax(z)  =>  dz[s] = p[s] (dp[s] - sum_s' p[s'] dp[s'])
    T inner = 0;
    for (int s = 0; s < n; ++s) inner += prow[s] * dprow[s];
    for (int s = 0; s < n; ++s) dprow[s] = prow[s] * (dprow[s] - inner) * scale;
    // forward: z[t,s] = scale q_t . k_s  =>  dq_t += scale dz k_s,  dk_s += scale dz q_t
    T* dqt = dq + t * C3;
    const T* qt = q + t * C3;
    for (int s = 0; s < n; ++s) {
      const T dz = dprow[s];
      const T* ks = k + s * C3;
      T* dks = dk + s * C3;
      for (int i = 0; i < hs; ++i) {
        dqt[i] += dz * ks[i];
        dks[i] += dz * qt[i];
      }
    }
  }
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, T* scratch, const T* qkv, int B, int Tn, int C, int H) {
  const int hs = C / H;
  const long C3 = 3L * C;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const long bh = static_cast<long>(b) * H + h;
      const T* base = qkv + static_cast<long>(b) * Tn * C3 + h * hs;
      attention_forward_head(out + static_cast<long>(b) * Tn * C + h * hs, att + bh * Tn * Tn,
                             scratch + bh * hs * Tn, base, base + C, base + 2 * C, Tn, hs, C3, C);
    }
}

template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                        int H) {
  const int hs = C / H;
  const long C3 = 3L * C;
  T* vt_all = scratch + static_cast<long>(B) * H * Tn * Tn;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const long bh = static_cast<long>(b) * H + h;
      const long offset = static_cast<long>(b) * Tn * C3 + h * hs;
      const T* base = qkv + offset;
      T* dbase = dqkv + offset;
      attention_backward_head(dbase, dbase + C, dbase + 2 * C, scratch + bh * Tn * Tn, vt_all + bh * hs * Tn,
                              dout + static_cast<long>(b) * Tn * C + h * hs, base, base + C, base + 2 * C,
                              att + bh * Tn * Tn, Tn, hs, C3, C);
    }
}

template void attention_forward<float>(float*, float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int,
                                        int);
template void attention_backward<double>(double*, double*, const double*, const double*, const double*, int, int,
                                         int, int);

}  // namespace blocklab::kernels
