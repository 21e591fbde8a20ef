#pragma once
// Batched scaled-dot-product attention with grouped-query heads (Ainslie et al. 2023), forward and
// backward, for configurable transformer blocks: causal self-attention or (non-causal) cross-attention,
// H query heads sharing Hkv key/value heads (Hkv == H: ordinary multi-head attention, Hkv == 1:
// multi-query attention), any head size D, strided rows (separate q/k/v buffers or one fused row).
//
//   z[b,h,t,s] = scale * q[b,t,h] . k[b,s,g],   g = h / (H / Hkv)   (Hugging Face repeat_kv grouping)
//   p[b,h,t,:] = softmax_s(z[b,h,t,:]) over s <= t (causal) or all s < Tk (cross-attention)
//   out[b,t,h] = sum_s p[b,h,t,s] v[b,s,g]
// Backward, with g_t = dout[b,t,h]:
//   dp[t,s] = g_t . v_s,   dz[t,s] = p[t,s] (dp[t,s] - sum_s' p[t,s'] dp[t,s'])
//   dq_t = scale sum_s dz[t,s] k_s,   dk_s = scale sum_{h in group} sum_t dz[t,s] q_t,
//   dv_s = sum_{h in group} sum_t p[t,s] g_t
//
// The softmax subtracts the row maximum. The forward pass is split over (batch, query head) pairs, the
// backward pass over (batch, kv head) pairs, so that one thread sums the contributions of all the query
// heads of a group to that group's dk and dv; every sum runs in a fixed order, so the results do not
// depend on the thread count. Head sizes that are a multiple of 16 take register-tiled loops.
#include <cstddef>

namespace blocklab::kernels {

// Elements of the scratch buffer that attention_gqa_forward/backward need:
// (B, H) x (Tq*Tk + D*Tkp + Tkp), Tkp = Tk rounded up to a multiple of 64.
size_t attention_gqa_scratch_size(int B, int Tq, int Tk, int H, int D);

// q: B*Tq rows, head h (of H) of row (b,t) at q + (b*Tq + t)*q_stride + h*D.
// k, v: B*Tk rows, kv head g (of Hkv) at k + (b*Tk + s)*k_stride + g*D (same for v with v_stride).
// Query head h reads kv head h / (H/Hkv); H % Hkv == 0.
// causal: t attends to s <= t (requires Tq == Tk); otherwise to all s < Tk (cross-attention).
// -> out: B*Tq rows, row stride out_stride, head h at column h*D (only the head columns are written,
//    overwritten); att (B, H, Tq, Tk): the softmax probabilities, saved for the backward pass (exact
//    zeros where masked), overwritten. scratch: attention_gqa_scratch_size elements, overwritten.
template <typename T>
void attention_gqa_forward(T* out, long out_stride, T* att, T* scratch, const T* q, long q_stride, const T* k,
                           long k_stride, const T* v, long v_stride, int B, int Tq, int Tk, int H, int Hkv, int D,
                           bool causal, T scale);

// dout: out's layout (row stride dout_stride); q, k, v, att: as passed to / returned by the forward pass.
// -> dq, dk, dv: the layouts of q, k, v with their own strides; only the head columns are written
//    (overwritten), so they may point into one fused (B*T, (H + 2 Hkv) D) gradient buffer.
// scratch: attention_gqa_scratch_size elements, overwritten.
template <typename T>
void attention_gqa_backward(T* dq, long dq_stride, T* dk, long dk_stride, T* dv, long dv_stride, T* scratch,
                            const T* dout, long dout_stride, const T* q, long q_stride, const T* k, long k_stride,
                            const T* v, long v_stride, const T* att, int B, int Tq, int Tk, int H, int Hkv, int D,
                            bool causal, T scale);

}  // namespace blocklab::kernels
