#include "kernels/attention_gqa.h"

#include <algorithm>

#include "kernels/attention_tiles.h"
#include "kernels/fast_math.h"
#include "kernels/lane_reduce.h"

#include "util/profiler.h"

namespace blocklab::kernels {

namespace {

using attention_tiles::kLanes;
using attention_tiles::padded;

// Per (batch, query head) slot: a (Tq, Tk) matrix (the backward pass's dz), a (D, Tkp) transposed K or
// V and a (Tkp) row. The backward pass of kv head g uses the slots of its query heads: head j of the
// group keeps its dz in slot j, and the group's transposed V and row live in slot 0.
long head_slot(int Tq, int Tk, int D) {
  const long Tkp = padded(Tk);
  return static_cast<long>(Tq) * Tk + static_cast<long>(D) * Tkp + Tkp;
}

// Positions s that query t sees: s < n.
inline int window(int t, int Tk, bool causal) { return causal ? std::min(t + 1, Tk) : Tk; }

// The two inner products, register-tiled (Tiled: D a multiple of kLanes) or plain loops (any D).
// row[0:n] = scale * sum_i a[i] * xt[i][0:n]  (xt: (D, Tp), zero-padded past the valid positions;
// the tiled form also writes row[n:] up to the tile, which has room up to Tp).
template <bool Tiled, Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void scores(T* row, const T* a, const T* xt, int n, int Tp, int D, T scale) {
  if constexpr (Tiled) {
    attention_tiles::row_times_transposed<I>(row, a, xt, n, Tp, D, scale);
  } else {
    for (int s = 0; s < n; ++s) row[s] = 0;
    for (int i = 0; i < D; ++i) {
      const T ai = a[i] * scale;
      const T* x = xt + static_cast<long>(i) * Tp;
      for (int s = 0; s < n; ++s) row[s] += ai * x[s];
    }
  }
}

// out[0:D] (+)= sum_{s<n} w[s * w_stride] * x_s[0:D], x rows `stride` apart (n <= 0: the empty sum).
template <bool Tiled, Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void weighted_sum(T* out, const T* w, long w_stride, const T* x, int n, int D, long stride,
                                         bool accumulate) {
  if constexpr (Tiled) {
    attention_tiles::weighted_rows<I>(out, w, w_stride, x, n, D, stride, accumulate);
  } else {
    if (!accumulate)
      for (int i = 0; i < D; ++i) out[i] = 0;
    for (int s = 0; s < n; ++s) {
      const T ws = w[s * w_stride];
      const T* xs = x + s * stride;
      for (int i = 0; i < D; ++i) out[i] += ws * xs[i];
    }
  }
}

// One (batch, query head): q, k, v, o point at the head's columns in its batch's first row.
// p (Tq, Tk) the head's probabilities; slot its scratch.
template <bool Tiled, Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void forward_head(T* o, long o_stride, T* p, T* slot, const T* q, long q_stride, const T* k,
                                        long k_stride, const T* v, long v_stride, int Tq, int Tk, int D, bool causal,
                                        T scale) {
  const int Tkp = padded(Tk);
  T* kt = slot + static_cast<long>(Tq) * Tk;
  T* z = kt + static_cast<long>(D) * Tkp;
  attention_tiles::transpose_head<I>(kt, k, Tk, Tkp, D, k_stride);
  for (int t = 0; t < Tq; ++t) {
    T* row = p + static_cast<long>(t) * Tk;
    const int n = window(t, Tk, causal);
    scores<Tiled, I>(z, q + t * q_stride, kt, n, Tkp, D, scale);  // z[s] = scale q_t . k_s
    attention_tiles::softmax_row<I>(row, Tk, z, n);                // z has room for Tkp >= n rounded up
    weighted_sum<Tiled, I>(o + t * o_stride, row, 1, v, n, D, v_stride, false);  // o_t = sum_s p[t,s] v_s
  }
}

// One (batch, kv head): its `group` query heads are consecutive, D columns apart in q, dq and dout, and
// Tq*Tk apart in p; their scratch slots are slot_size apart from `slots`. k, v, dk, dv point at the kv
// head's columns. Every output is overwritten.
template <bool Tiled, Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void backward_group(T* dq, long dq_stride, T* dk, long dk_stride, T* dv, long dv_stride,
                                          T* slots, long slot_size, const T* dout, long dout_stride, const T* q,
                                          long q_stride, const T* k, long k_stride, const T* v, long v_stride,
                                          const T* p, int group, int Tq, int Tk, int D, bool causal, T scale) {
  const int Tkp = padded(Tk);
  const long TT = static_cast<long>(Tq) * Tk;
  T* vt = slots + TT;
  T* dp = vt + static_cast<long>(D) * Tkp;
  attention_tiles::transpose_head<I>(vt, v, Tk, Tkp, D, v_stride);
  if constexpr (!Tiled) {
    // Plain loops: dk and dv are summed row by row in pass 1 (in the order head j, query t), so they start at 0.
    for (int s = 0; s < Tk; ++s)
      for (int i = 0; i < D; ++i) dk[s * dk_stride + i] = dv[s * dv_stride + i] = 0;
  }
  // Pass 1, per query head j and query row t: dp, dz and dq_t.
  for (int j = 0; j < group; ++j) {
    const T* pj = p + j * TT;
    T* dz = slots + j * slot_size;
    const T* g = dout + static_cast<long>(j) * D;
    const T* qj = q + static_cast<long>(j) * D;
    T* dqj = dq + static_cast<long>(j) * D;
    for (int t = 0; t < Tq; ++t) {
      const T* prow = pj + static_cast<long>(t) * Tk;
      T* dzrow = dz + static_cast<long>(t) * Tk;
      const T* gt = g + t * dout_stride;
      const int n = window(t, Tk, causal);
      scores<Tiled, I>(dp, gt, vt, n, Tkp, D, T(1));  // dp[s] = g_t . v_s
      const T inner = lane_dot(prow, dp, n);
      for (int s = 0; s < n; ++s) dzrow[s] = prow[s] * (dp[s] - inner) * scale;
      for (int s = n; s < Tk; ++s) dzrow[s] = 0;
      weighted_sum<Tiled, I>(dqj + t * dq_stride, dzrow, 1, k, n, D, k_stride, false);  // dq_t = sum_s dz k_s
      if constexpr (!Tiled) {
        // dv_s += p[t,s] g_t,  dk_s += dz[t,s] q_t
        const T* qt = qj + t * q_stride;
        for (int s = 0; s < n; ++s) {
          const T ps = prow[s], dzs = dzrow[s];
          T* dvs = dv + s * dv_stride;
          T* dks = dk + s * dk_stride;
          for (int i = 0; i < D; ++i) {
            dvs[i] += ps * gt[i];
            dks[i] += dzs * qt[i];
          }
        }
      }
    }
  }
  if constexpr (Tiled) {
    // Pass 2, per key row s: over the heads of the group in order, and over the queries t that see s
    // (a column of p and of dz, summed in registers).
    for (int s = 0; s < Tk; ++s) {
      const int t0 = causal ? s : 0;
      const int nt = Tq - t0;
      for (int j = 0; j < group; ++j) {
        const long first = static_cast<long>(t0) * Tk + s;  // element (t0, s)
        const long col = static_cast<long>(j) * D;
        weighted_sum<Tiled, I>(dv + s * dv_stride, p + j * TT + first, Tk, dout + t0 * dout_stride + col, nt, D,
                               dout_stride, j > 0);
        weighted_sum<Tiled, I>(dk + s * dk_stride, slots + j * slot_size + first, Tk, q + t0 * q_stride + col, nt,
                               D, q_stride, j > 0);
      }
    }
  }
}

}  // namespace

size_t attention_gqa_scratch_size(int B, int Tq, int Tk, int H, int D) {
  return static_cast<size_t>(B) * H * static_cast<size_t>(head_slot(Tq, Tk, D));
}

template <typename T>
void attention_gqa_forward(T* out, long out_stride, T* att, T* scratch, const T* q, long q_stride, const T* k,
                           long k_stride, const T* v, long v_stride, int B, int Tq, int Tk, int H, int Hkv, int D,
                           bool causal, T scale) {
  BLOCKLAB_PROFILE("attention_gqa_forward");
  const int group = H / Hkv;
  const long slot = head_slot(Tq, Tk, D);
  const long TT = static_cast<long>(Tq) * Tk;
  const bool tiled = D % kLanes == 0;
#pragma omp parallel
  {
  long first = -1;  // the slot of the thread's first head serves all of its heads (thread_scratch_part)
#pragma omp for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const long bh = static_cast<long>(b) * H + h;
      T* head_scratch = scratch + attention_tiles::thread_scratch_part(first, bh) * slot;
      const long hc = static_cast<long>(h) * D, gc = static_cast<long>(h / group) * D;
      const long qrow = static_cast<long>(b) * Tq, krow = static_cast<long>(b) * Tk;
      T* o = out + qrow * out_stride + hc;
      const T* qh = q + qrow * q_stride + hc;
      const T* kh = k + krow * k_stride + gc;
      const T* vh = v + krow * v_stride + gc;
      on_isa([&](auto isa) {
        if (tiled)
          forward_head<true, isa.value>(o, out_stride, att + bh * TT, head_scratch, qh, q_stride, kh,
                                        k_stride, vh, v_stride, Tq, Tk, D, causal, scale);
        else
          forward_head<false, isa.value>(o, out_stride, att + bh * TT, head_scratch, qh, q_stride, kh,
                                         k_stride, vh, v_stride, Tq, Tk, D, causal, scale);
      });
    }
  }
}

template <typename T>
void attention_gqa_backward(T* dq, long dq_stride, T* dk, long dk_stride, T* dv, long dv_stride, T* scratch,
                            const T* dout, long dout_stride, const T* q, long q_stride, const T* k, long k_stride,
                            const T* v, long v_stride, const T* att, int B, int Tq, int Tk, int H, int Hkv, int D,
                            bool causal, T scale) {
  BLOCKLAB_PROFILE("attention_gqa_backward");
  const int group = H / Hkv;
  const long slot = head_slot(Tq, Tk, D);
  const long TT = static_cast<long>(Tq) * Tk;
  const bool tiled = D % kLanes == 0;
#pragma omp parallel
  {
  long first = -1;  // the slots of the thread's first group serve all of its groups (thread_scratch_part)
#pragma omp for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int g = 0; g < Hkv; ++g) {
      const long bh0 = static_cast<long>(b) * H + static_cast<long>(g) * group;  // the group's first query head
      T* group_scratch = scratch + attention_tiles::thread_scratch_part(first, bh0) * slot;
      const long hc = static_cast<long>(g) * group * D, gc = static_cast<long>(g) * D;
      const long qrow = static_cast<long>(b) * Tq, krow = static_cast<long>(b) * Tk;
      T* dqg = dq + qrow * dq_stride + hc;
      T* dkg = dk + krow * dk_stride + gc;
      T* dvg = dv + krow * dv_stride + gc;
      const T* doutg = dout + qrow * dout_stride + hc;
      const T* qg = q + qrow * q_stride + hc;
      const T* kg = k + krow * k_stride + gc;
      const T* vg = v + krow * v_stride + gc;
      on_isa([&](auto isa) {
        if (tiled)
          backward_group<true, isa.value>(dqg, dq_stride, dkg, dk_stride, dvg, dv_stride, group_scratch, slot,
                                          doutg, dout_stride, qg, q_stride, kg, k_stride, vg, v_stride,
                                          att + bh0 * TT, group, Tq, Tk, D, causal, scale);
        else
          backward_group<false, isa.value>(dqg, dq_stride, dkg, dk_stride, dvg, dv_stride, group_scratch,
                                           slot, doutg, dout_stride, qg, q_stride, kg, k_stride, vg, v_stride,
                                           att + bh0 * TT, group, Tq, Tk, D, causal, scale);
      });
    }
  }
}

#define BLOCKLAB_INSTANTIATE(T)                                                                                     \
  template void attention_gqa_forward<T>(T*, long, T*, T*, const T*, long, const T*, long, const T*, long, int, int, \
                                         int, int, int, int, bool, T);                                              \
  template void attention_gqa_backward<T>(T*, long, T*, long, T*, long, T*, const T*, long, const T*, long,         \
                                          const T*, long, const T*, long, const T*, int, int, int, int, int, int,   \
                                          bool, T);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)

}  // namespace blocklab::kernels
