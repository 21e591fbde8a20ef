#pragma once
// Causal grouped-query attention (Ainslie et al. 2023), forward only, for one sequence:
// H query heads share Hkv key/value heads; query head h reads kv head h / (H / Hkv) (the grouping of
// Hugging Face's repeat_kv). Hkv == H is ordinary multi-head attention.
//
//   out[t, h] = sum_{s <= t} softmax_s(scale * q[t, h] . k[s, g]) v[s, g],   g = h / (H / Hkv)
//
// Rows are strided so that separate q/k/v projections (Qwen, Llama) and a fused qkv row (GPT-2's
// c_attn, [q | k | v]) both work without copies. The softmax subtracts the row maximum and sums in
// position order, so results do not depend on the thread count.
// Inference only (it keeps one row of scores per head); the batched version with a backward pass and
// cross-attention, for training, is kernels/attention_gqa.h.
namespace blocklab::kernels {

// q: Tn rows, head h at q + t * q_stride + h * D; k, v: Tn rows with Hkv heads (strides k_stride,
// v_stride); out: Tn rows of H heads, row stride out_stride (overwritten). scratch (H, Tn) holds one
// row of scores per head. H must be a multiple of Hkv.
template <typename T>
void gqa_attention_forward(T* out, long out_stride, T* scratch, const T* q, long q_stride, const T* k,
                           long k_stride, const T* v, long v_stride, int Tn, int H, int Hkv, int D, T scale);

}  // namespace blocklab::kernels
