#include "kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention_tiles.h"
#include "kernels/fast_math.h"
#include "kernels/lane_reduce.h"
#include "kernels/simd.h"

#include "util/profiler.h"

namespace blocklab::kernels {

// Work is split over (batch, head) pairs: each writes only its own slices, and every sum below runs in
// a fixed order, so the result does not depend on the thread count. Inner loops run over contiguous
// memory (positions s, or the head dimension i) so that they vectorise.

namespace {
using attention_tiles::kLanes;
using attention_tiles::padded;
// Per (batch, head): a (T, T) matrix, a (hs, Tp) transposed K or V, kQueryRows rows of Tp, Tp = T rounded
// up, and kQueryRows rows of hs (query rows times the scale).
size_t head_scratch(int Tn, int hs) {
  return static_cast<size_t>(Tn) * Tn + static_cast<size_t>(hs) * padded(Tn) +
         static_cast<size_t>(attention_tiles::kQueryRows) * (padded(Tn) + hs);
}

}  // namespace

size_t attention_scratch_size(int B, int Tn, int C, int H) {
  return static_cast<size_t>(B) * H * head_scratch(Tn, C / H);
}

namespace {

using namespace attention_tiles;

// What the next head (the one this thread most likely takes next) reads and writes, rows t0 .. t1 - 1 of each,
// asked for while this head computes: a head's rows are C3 (or C) apart and each gives it only hs floats, which
// the hardware prefetchers find late. Waiting on them was a tenth of the forward at the source model's shape; in
// the backward, with its operands from memory as in a training step, its rows of dq, dk, dv (written, so read for
// ownership) and of the probabilities cost as much again as its arithmetic before they were fetched here too.
// Changes no result.
template <typename T>
struct NextHead {
  const T* qkv = nullptr;      // its q, k, v (rows C3 apart, the parts C apart); nullptr: no next head
  const T* dout = nullptr;     // backward: its rows of dout (C apart)
  T* dqkv = nullptr;           // backward: its dq, dk, dv, as qkv (written)
  const T* p_read = nullptr;   // backward: its probabilities (T x T)
  T* p_write = nullptr;        // forward: its probabilities (written)
  T* out = nullptr;            // forward: its rows of the output (C apart, written)
};

template <typename T>
BLOCKLAB_ALWAYS_INLINE void prefetch_next_head(const NextHead<T>& next, int t0, int t1, int hs, int Tn, long C3,
                                               long C) {
  if (next.qkv == nullptr) return;
  constexpr int kLine = 64 / sizeof(T);
  for (int t = t0; t < t1; ++t)
    for (int i = 0; i < hs; i += kLine) {
      for (int part = 0; part < 3; ++part) __builtin_prefetch(next.qkv + t * C3 + part * C + i, 0, 2);
      if (next.dout != nullptr) __builtin_prefetch(next.dout + t * C + i, 0, 2);
      if (next.out != nullptr) __builtin_prefetch(next.out + t * C + i, 1, 2);
      if (next.dqkv != nullptr)
        for (int part = 0; part < 3; ++part) __builtin_prefetch(next.dqkv + t * C3 + part * C + i, 1, 2);
    }
  const long e0 = static_cast<long>(t0) * Tn, e1 = static_cast<long>(t1) * Tn;
  if (next.p_write != nullptr)
    for (long e = e0; e < e1; e += kLine) __builtin_prefetch(next.p_write + e, 1, 2);
  if (next.p_read != nullptr)
    for (long e = e0; e < e1; e += kLine) __builtin_prefetch(next.p_read + e, 0, 2);
}

template <Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void attention_forward_head_tiled(T* o, T* p, T* scratch, const T* q, const T* k, const T* v,
                                                        int Tn, int hs, long C3, long C, const NextHead<T>& next) {
  const int Tp = padded(Tn);
  T* kt = scratch + static_cast<long>(Tn) * Tn;
  T* z = kt + static_cast<long>(hs) * Tp;
  T* scaled = z + static_cast<long>(kQueryRows) * Tp;
  transpose_head<I>(kt, k, Tn, Tp, hs, C3);
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (int t0 = 0; t0 < Tn; t0 += kQueryRows) {  // query rows in groups that share each load of K
    const int rows = std::min(kQueryRows, Tn - t0);
    prefetch_next_head<T>(next, t0, t0 + rows, hs, Tn, C3, C);
    rows_times_transposed<I>(z, Tp, q + t0 * C3, C3, rows, kt, t0 + rows, Tp, hs, scale, scaled);  // z_t[s] = scale q_t . k_s
    for (int t = t0; t < t0 + rows; ++t) {
      // causal window s = 0..t; z's rows have room for Tp >= t + 1 rounded up to kReduceLanes
      softmax_row<I>(p + static_cast<long>(t) * Tn, Tn, z + static_cast<long>(t - t0) * Tp, t + 1);
    }
    // o_t = sum_s p[t,s] v_s, the group's rows sharing each load of V
    causal_weighted_query_rows<I>(o, C, p, Tn, t0, rows, v, hs, C3, false);
  }
}

template <Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void attention_backward_head_tiled(T* dq, T* dk, T* dv, T* scratch, const T* dout, const T* q,
                                                         const T* k, const T* v, const T* p, int Tn, int hs, long C3,
                                                         long C, const NextHead<T>& next) {
  const int Tp = padded(Tn);
  T* dz = scratch;  // (T, T)
  T* vt = scratch + static_cast<long>(Tn) * Tn;
  T* dp = vt + static_cast<long>(hs) * Tp;
  T* rows_copy = dp + static_cast<long>(kQueryRows) * Tp;
  transpose_head<I>(vt, v, Tn, Tp, hs, C3);
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  // Pass 1, per query row t:
  //   forward o_t = sum_s p[t,s] v_s   =>  dp[t,s] = g_t . v_s
  //   forward p = softmax(z)           =>  dz[t,s] = p[t,s] (dp[t,s] - sum_s' p[t,s'] dp[t,s'])
  //   forward z = scale q_t . k_s      =>  dq_t += scale sum_s dz[t,s] k_s
  for (int t0 = 0; t0 < Tn; t0 += kQueryRows) {  // query rows in groups that share each load of V
    const int rows = std::min(kQueryRows, Tn - t0);
    prefetch_next_head<T>(next, t0, t0 + rows, hs, Tn, C3, C);
    rows_times_transposed<I>(dp, Tp, dout + t0 * C, C, rows, vt, t0 + rows, Tp, hs, T(1), rows_copy);
    for (int t = t0; t < t0 + rows; ++t)  // dp's rows are computed up to the group's window rounded up to kLanes
      softmax_backward_row<I>(dz + static_cast<long>(t) * Tn, p + static_cast<long>(t) * Tn,
                              dp + static_cast<long>(t - t0) * Tp, t + 1, Tn, scale);
    // the group's rows share each load of K; each dq row is summed whole here, so it is written, not added to
    causal_weighted_query_rows<I>(dq, C3, dz, Tn, t0, rows, k, hs, C3, false);
  }
  // Pass 2, per key row s (over the queries t >= s that see it):
  //   dv_s = sum_t p[t,s] g_t,   dk_s = scale sum_t dz[t,s] q_t
  // kQueryRows key rows at a time share each load of dout and of q. Each row is summed whole in one call and
  // written (the head's dq, dk, dv need no zeroing first).
  int s = 0;
  for (; s + kQueryRows <= Tn; s += kQueryRows) {
    T* out[kQueryRows];
    const T* w[kQueryRows];
    int first[kQueryRows], end[kQueryRows];
    for (int r = 0; r < kQueryRows; ++r) {
      out[r] = dv + (s + r) * C3;
      w[r] = p + static_cast<long>(s + r) * Tn + s + r;  // element (t = s + r, s + r)
      first[r] = s + r;
      end[r] = Tn;
    }
    weighted_rows_multi<I>(out, w, Tn, dout, first, end, hs, C, false);
    for (int r = 0; r < kQueryRows; ++r) {
      out[r] = dk + (s + r) * C3;
      w[r] = dz + static_cast<long>(s + r) * Tn + s + r;
    }
    weighted_rows_multi<I>(out, w, Tn, q, first, end, hs, C3, false);
  }
  for (; s < Tn; ++s) {
    const long first = static_cast<long>(s) * Tn + s;  // element (t = s, s)
    weighted_rows<I>(dv + s * C3, p + first, Tn, dout + s * C, Tn - s, hs, C, false);
    weighted_rows<I>(dk + s * C3, dz + first, Tn, q + s * C3, Tn - s, hs, C3, false);
  }
}

}  // namespace

namespace {

// One (batch, head): q, k, v point at the head's first column in row 0; rows are C3 apart.
// kt (hs, T) scratch for K transposed; p (T, T) the probabilities; o (T, C) the head's output columns.
template <typename T>
BLOCKLAB_ALWAYS_INLINE void attention_forward_head(T* o, T* p, T* kt, const T* q, const T* k, const T* v, int Tn,
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
BLOCKLAB_ALWAYS_INLINE void attention_backward_head(T* dq, T* dk, T* dv, T* dp, T* vt, const T* dout, const T* q,
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
  BLOCKLAB_PROFILE("attention_forward");
  const int hs = C / H;
  const long C3 = 3L * C;
#pragma omp parallel
  {
  long slot = -1;  // the thread's first head's scratch serves all of its heads (thread_scratch_part)
#pragma omp for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const long bh = static_cast<long>(b) * H + h;
      const T* base = qkv + static_cast<long>(b) * Tn * C3 + h * hs;
      T* head_scratch_ptr = scratch + thread_scratch_part(slot, bh) * static_cast<long>(head_scratch(Tn, hs));
      T* o = out + static_cast<long>(b) * Tn * C + h * hs;
      // the head this thread most likely takes next (static schedule: the following pair)
      const bool last = bh + 1 == static_cast<long>(B) * H;
      NextHead<T> next;
      if (!last)
        next = {.qkv = next_head(base, h, H, hs, Tn, C3),
                .p_write = att + (bh + 1) * Tn * Tn,
                .out = next_head(o, h, H, hs, Tn, C)};
      on_isa([&](auto isa) {
        if (hs % kLanes == 0)
          attention_forward_head_tiled<isa.value>(o, att + bh * Tn * Tn, head_scratch_ptr, base, base + C, base + 2 * C,
                                                  Tn, hs, C3, C, next);
        else
          attention_forward_head(o, att + bh * Tn * Tn, head_scratch_ptr, base, base + C, base + 2 * C, Tn, hs, C3, C);
      });
    }
  }
}

template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                        int H) {
  BLOCKLAB_PROFILE("attention_backward");
  const int hs = C / H;
  const long C3 = 3L * C;
#pragma omp parallel
  {
  long slot = -1;  // the thread's first head's scratch serves all of its heads (thread_scratch_part)
#pragma omp for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const long bh = static_cast<long>(b) * H + h;
      const long offset = static_cast<long>(b) * Tn * C3 + h * hs;
      const T* base = qkv + offset;
      T* dbase = dqkv + offset;
      T* hsc = scratch + thread_scratch_part(slot, bh) * static_cast<long>(head_scratch(Tn, hs));
      const T* g = dout + static_cast<long>(b) * Tn * C + h * hs;
      // the head this thread most likely takes next (static schedule: the following pair)
      const bool last = bh + 1 == static_cast<long>(B) * H;
      NextHead<T> next;
      if (!last)
        next = {.qkv = next_head(base, h, H, hs, Tn, C3),
                .dout = next_head(g, h, H, hs, Tn, C),
                .dqkv = next_head(dbase, h, H, hs, Tn, C3),
                .p_read = att + (bh + 1) * Tn * Tn};
      on_isa([&](auto isa) {
        if (hs % kLanes == 0)  // writes every row of the head's dq, dk, dv
          attention_backward_head_tiled<isa.value>(dbase, dbase + C, dbase + 2 * C, hsc, g, base, base + C,
                                                   base + 2 * C, att + bh * Tn * Tn, Tn, hs, C3, C, next);
        else {
          for (int t = 0; t < Tn; ++t)  // the head's slices of dq, dk, dv: attention_backward_head adds into them
            for (int part = 0; part < 3; ++part) std::fill_n(dbase + t * C3 + part * C, hs, T(0));
          attention_backward_head(dbase, dbase + C, dbase + 2 * C, hsc, hsc + static_cast<long>(Tn) * Tn, g, base,
                                  base + C, base + 2 * C, att + bh * Tn * Tn, Tn, hs, C3, C);
        }
      });
    }
  }
}

template void attention_forward<float>(float*, float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int,
                                        int);
template void attention_backward<double>(double*, double*, const double*, const double*, const double*, int, int,
                                         int, int);

}  // namespace blocklab::kernels
