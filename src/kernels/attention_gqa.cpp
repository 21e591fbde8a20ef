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

// Asks for the lines of `floats` values at `row` into L2 (Write: to be written, so fetched for ownership). The
// heads' rows are strided and each gives a head only D values, which the hardware prefetchers find late; with its
// operands from memory, as in a training step, the general kernel took 40-50% longer than with them in cache. So
// each head (the backward: each group) asks, row by row while it computes, for the rows of the head (group) this
// thread most likely takes next. Changes no result.
template <bool Write, typename T>
BLOCKLAB_ALWAYS_INLINE void prefetch_row(const T* row, long floats) {
  constexpr long kLine = 64 / sizeof(T);
  for (long i = 0; i < floats; i += kLine) __builtin_prefetch(row + i, Write ? 1 : 0, 2);
  __builtin_prefetch(row + floats - 1, Write ? 1 : 0, 2);  // the last line, when the row does not start one
}

// Where one (batch, query head) reads and writes (forward), rows as the kernel's strides say.
template <typename T>
struct ForwardHead {
  T* o;
  T* p;  // (Tq, Tk)
  const T* q;
  const T* k;
  const T* v;
};

// Where one (batch, kv head) group reads and writes (backward): its `group` query heads' columns from dq, dout, q.
template <typename T>
struct BackwardGroup {
  T* dq;
  T* dk;
  T* dv;
  const T* dout;
  const T* q;
  const T* k;
  const T* v;
  const T* p;  // (group, Tq, Tk)
};

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
// next: the head this thread most likely takes next, or nullptr.
template <bool Tiled, Isa I, typename T>
BLOCKLAB_ALWAYS_INLINE void forward_head(T* o, long o_stride, T* p, T* slot, const T* q, long q_stride, const T* k,
                                        long k_stride, const T* v, long v_stride, int Tq, int Tk, int D, bool causal,
                                        T scale, const ForwardHead<T>* next) {
  const int Tkp = padded(Tk);
  T* kt = slot + static_cast<long>(Tq) * Tk;
  T* z = kt + static_cast<long>(D) * Tkp;
  attention_tiles::transpose_head<I>(kt, k, Tk, Tkp, D, k_stride);
  for (int t = 0; t < Tq; ++t) {
    if (next != nullptr) {
      prefetch_row<false>(next->q + t * q_stride, D);
      prefetch_row<true>(next->o + t * o_stride, D);
      prefetch_row<true>(next->p + static_cast<long>(t) * Tk, Tk);
      if (t < Tk) {
        prefetch_row<false>(next->k + t * k_stride, D);
        prefetch_row<false>(next->v + t * v_stride, D);
      }
    }
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
                                          const T* p, int group, int Tq, int Tk, int D, bool causal, T scale,
                                          const BackwardGroup<T>* next) {
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
      if (next != nullptr && j == 0) {  // the next group's row t, spread over this group's first head
        const long group_cols = static_cast<long>(group) * D;
        prefetch_row<false>(next->q + t * q_stride, group_cols);
        prefetch_row<false>(next->dout + t * dout_stride, group_cols);
        prefetch_row<true>(next->dq + t * dq_stride, group_cols);
        for (int h = 0; h < group; ++h) prefetch_row<false>(next->p + h * TT + static_cast<long>(t) * Tk, Tk);
        if (t < Tk) {
          prefetch_row<false>(next->k + t * k_stride, D);
          prefetch_row<false>(next->v + t * v_stride, D);
          prefetch_row<true>(next->dk + t * dk_stride, D);
          prefetch_row<true>(next->dv + t * dv_stride, D);
        }
      }
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
  const auto head_at = [&](int b, int h) {
    const long hc = static_cast<long>(h) * D, gc = static_cast<long>(h / group) * D;
    const long qrow = static_cast<long>(b) * Tq, krow = static_cast<long>(b) * Tk;
    return ForwardHead<T>{out + qrow * out_stride + hc, att + (static_cast<long>(b) * H + h) * TT,
                          q + qrow * q_stride + hc, k + krow * k_stride + gc, v + krow * v_stride + gc};
  };
#pragma omp parallel
  {
  long first = -1;  // the slot of the thread's first head serves all of its heads (thread_scratch_part)
#pragma omp for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const long bh = static_cast<long>(b) * H + h;
      T* head_scratch = scratch + attention_tiles::thread_scratch_part(first, bh) * slot;
      const ForwardHead<T> at = head_at(b, h);
      // the head this thread most likely takes next (static schedule: the following pair)
      const bool last = bh + 1 == static_cast<long>(B) * H;
      const ForwardHead<T> following = last ? at : head_at(h + 1 < H ? b : b + 1, h + 1 < H ? h + 1 : 0);
      const ForwardHead<T>* next = last ? nullptr : &following;
      on_isa([&](auto isa) {
        if (tiled)
          forward_head<true, isa.value>(at.o, out_stride, at.p, head_scratch, at.q, q_stride, at.k, k_stride, at.v,
                                        v_stride, Tq, Tk, D, causal, scale, next);
        else
          forward_head<false, isa.value>(at.o, out_stride, at.p, head_scratch, at.q, q_stride, at.k, k_stride, at.v,
                                         v_stride, Tq, Tk, D, causal, scale, next);
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
  const auto group_at = [&](int b, int g) {
    const long hc = static_cast<long>(g) * group * D, gc = static_cast<long>(g) * D;
    const long qrow = static_cast<long>(b) * Tq, krow = static_cast<long>(b) * Tk;
    return BackwardGroup<T>{dq + qrow * dq_stride + hc,     dk + krow * dk_stride + gc,
                            dv + krow * dv_stride + gc,     dout + qrow * dout_stride + hc,
                            q + qrow * q_stride + hc,       k + krow * k_stride + gc,
                            v + krow * v_stride + gc,       att + (static_cast<long>(b) * H + g * group) * TT};
  };
#pragma omp parallel
  {
  long first = -1;  // the slots of the thread's first group serve all of its groups (thread_scratch_part)
#pragma omp for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int g = 0; g < Hkv; ++g) {
      const long bh0 = static_cast<long>(b) * H + static_cast<long>(g) * group;  // the group's first query head
      T* group_scratch = scratch + attention_tiles::thread_scratch_part(first, bh0) * slot;
      const BackwardGroup<T> at = group_at(b, g);
      // the group this thread most likely takes next (static schedule: the following pair)
      const bool last = static_cast<long>(b) * Hkv + g + 1 == static_cast<long>(B) * Hkv;
      const BackwardGroup<T> following = last ? at : group_at(g + 1 < Hkv ? b : b + 1, g + 1 < Hkv ? g + 1 : 0);
      const BackwardGroup<T>* next = last ? nullptr : &following;
      on_isa([&](auto isa) {
        if (tiled)
          backward_group<true, isa.value>(at.dq, dq_stride, at.dk, dk_stride, at.dv, dv_stride, group_scratch, slot,
                                          at.dout, dout_stride, at.q, q_stride, at.k, k_stride, at.v, v_stride, at.p,
                                          group, Tq, Tk, D, causal, scale, next);
        else
          backward_group<false, isa.value>(at.dq, dq_stride, at.dk, dk_stride, at.dv, dv_stride, group_scratch,
                                           slot, at.dout, dout_stride, at.q, q_stride, at.k, k_stride, at.v, v_stride,
                                           at.p, group, Tq, Tk, D, causal, scale, next);
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
