#include "model/block.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/gating.h"
#include "kernels/gelu_tanh.h"
#include "kernels/glu.h"
#include "kernels/attention_gqa.h"
#include "kernels/linear.h"
#include "kernels/linear_gelu.h"
#include "kernels/linear_glu.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/unit_norm.h"
#include "model/sphere.h"
#include "util/error.h"

namespace blocklab {

using namespace kernels;

namespace {

GeluForm gelu_form(MlpKind kind) { return kind == MlpKind::GeluTanh ? GeluForm::Tanh : GeluForm::Erf; }
GluKind glu_kind(MlpKind kind) { return kind == MlpKind::SwiGLU ? GluKind::SwiGLU : GluKind::GeGLU; }

// The register-tiled causal attention of kernels/attention.h serves the fused [q | k | v] layout with
// as many kv heads as heads and D = C/H (the seed model); everything else goes through the general
// grouped-query kernel.
bool fast_attention(const ModelConfig& c) {
  return c.qkv == QkvLayout::Fused && c.kv_head_count() == c.heads && c.q_dim() == c.width && !c.qkv_norm() &&
         c.stream() != ResidualStream::Sphere;
}

template <typename T>
void carve_unit(NormActs<T>& n, Carver<T>& a, long rows, long width) {
  n.out = a.take(rows * width);
  n.rstd = a.take(rows);
}

// The kind of the per-head q/k(/v) norms: RMSNorm for qk_norm (Qwen3), the config's kind for HybridNorm.
NormKind head_norm_kind(const ModelConfig& c) { return c.qk_norm ? NormKind::RMSNorm : c.norm; }

// A norm of `kind` over `rows` rows of `width`.
template <typename T>
void carve_norm_rows(NormActs<T>& n, Carver<T>& a, NormKind kind, long rows, long width) {
  n.out = a.take(rows * width);
  if (kind == NormKind::LayerNorm) n.mean = a.take(rows);
  if (kind == NormKind::LayerNorm || kind == NormKind::RMSNorm) n.rstd = a.take(rows);
}

template <typename T>
void carve_norm(NormActs<T>& n, Carver<T>& a, const ModelConfig& c, long N) {
  carve_norm_rows(n, a, c.norm, N, c.width);
}

template <typename T>
void norm_rows_forward(NormActs<T>& n, const T* x, const NormTensors<T>& w, NormKind kind, long N, int width,
                       double norm_eps) {
  const T eps = static_cast<T>(norm_eps);
  const int rows = static_cast<int>(N);
  switch (kind) {
    case NormKind::LayerNorm:
      layernorm_forward(n.out, n.mean, n.rstd, x, static_cast<const T*>(w.weight), static_cast<const T*>(w.bias), rows,
                        width, eps);
      break;
    case NormKind::RMSNorm:
      rmsnorm_forward(n.out, n.rstd, x, static_cast<const T*>(w.weight), rows, width, eps);
      break;
    case NormKind::DyT:
      dyt_forward(n.out, x, static_cast<const T*>(w.weight), static_cast<const T*>(w.bias),
                  static_cast<const T*>(w.alpha), rows, width);
      break;
    case NormKind::Derf:
      derf_forward(n.out, x, static_cast<const T*>(w.weight), static_cast<const T*>(w.bias),
                   static_cast<const T*>(w.alpha), static_cast<const T*>(w.shift), rows, width);
      break;
  }
}

template <typename T>
void norm_rows_backward(T* dx, const NormTensors<T>& g, const T* dout, const T* x, const NormTensors<T>& w,
                        const NormActs<T>& n, NormKind kind, long N, int width) {
  const int rows = static_cast<int>(N);
  switch (kind) {
    case NormKind::LayerNorm:
      layernorm_backward(dx, g.weight, g.bias, dout, x, static_cast<const T*>(w.weight),
                         static_cast<const T*>(n.mean), static_cast<const T*>(n.rstd), rows, width);
      break;
    case NormKind::RMSNorm:
      rmsnorm_backward(dx, g.weight, dout, x, static_cast<const T*>(w.weight), static_cast<const T*>(n.rstd), rows,
                       width);
      break;
    case NormKind::DyT:
      dyt_backward(dx, g.weight, g.bias, g.alpha, dout, x, static_cast<const T*>(w.weight),
                   static_cast<const T*>(w.alpha), rows, width);
      break;
    case NormKind::Derf:
      derf_backward(dx, g.weight, g.bias, g.alpha, g.shift, dout, x, static_cast<const T*>(w.weight),
                    static_cast<const T*>(w.alpha), static_cast<const T*>(w.shift), rows, width);
      break;
  }
}

template <typename T>
void carve_attention(AttentionActs<T>& a, Carver<T>& m, const ModelConfig& c, const BlockDims& d,
                     const SublayerPlan& plan, bool cross, bool first_block) {
  const long N = d.N(), Nk = cross ? d.Nc() : d.N(), Tk = cross ? d.Tc : d.T;
  if (plan.in_norm) carve_norm(a.in, m, c, N);
  if (!cross && c.qkv == QkvLayout::Fused) {
    a.qkv = m.take(N * (d.Q + 2L * d.K));
    if (c.qkv_norm()) a.q = m.take(N * d.Q), a.k = m.take(N * d.K), a.v = m.take(N * d.K);
  } else {
    a.q = m.take(N * d.Q), a.k = m.take(Nk * d.K), a.v = m.take(Nk * d.K);
  }
  if (!cross && (c.qk_norm || c.qkv_norm())) {
    const NormKind kind = head_norm_kind(c);
    carve_norm_rows(a.q_norm, m, kind, N * d.H, d.D);
    carve_norm_rows(a.k_norm, m, kind, N * d.Hkv, d.D);
    if (c.qkv_norm()) carve_norm_rows(a.v_norm, m, kind, N * d.Hkv, d.D);
  }
  a.att = m.take(static_cast<long>(d.B) * d.H * d.T * Tk);
  a.y = m.take(N * d.Q), a.out = m.take(N * d.C);
  if (!cross && c.attn_gate) a.gate = m.take(N * d.Q), a.y_gated = m.take(N * d.Q);
  if (!cross && c.value_residual && !first_block) a.v_own = m.take(N * d.K);
  if (!cross && c.stream() == ResidualStream::Sphere)
    a.q_unit = m.take(N * d.Q), a.k_unit = m.take(N * d.K), a.q_rn = m.take(N * d.H), a.k_rn = m.take(N * d.Hkv);
  if (plan.out_norm) carve_norm(a.out_norm, m, c, N);
  if (!c.hyper()) a.resid = m.take(N * d.C);  // hyper-connections: the stack keeps the streams
  if (plan.after_norm) carve_norm(a.after, m, c, N);
  if (plan.normalized_update) carve_unit(a.after, m, N, d.C), carve_unit(a.unit_x, m, N, d.C), carve_unit(a.unit_f, m, N, d.C);
}

// out (N, OC) = inp (N, C) @ W^T + b, from the arena or from the weight's source (read in place).
template <typename T>
void apply_linear(T* out, const T* inp, const LinearTensors<T>& l, int N, int C, int OC, const BlockInputs<T>& in) {
  if (l.source == nullptr) {
    linear_forward(out, inp, static_cast<const T*>(l.weight), static_cast<const T*>(l.bias), N, C, OC,
                   gemm_precision(*in.config), 0, rounded_weight(in, static_cast<const T*>(l.weight)));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    BLOCKLAB_CHECK(in.linear_work != nullptr, "a LinearSource needs BlockInputs::linear_work");
    l.source->forward(out, inp, N, *in.linear_work);
    if (l.bias != nullptr)
      for (long n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) out[n * OC + o] += l.bias[o];
  } else {
    BLOCKLAB_CHECK(false, "weights read in place are float only");
  }
}

// Which stages the attention sub-layer runs, from the config, the sub-layer and the block alone (never from
// which buffers happen to be set). Forward and backward walk the same list:
//   project      fused: one (Q+2K, C) projection into [q | k | v] rows; separate: q, k, v of their own (cross:
//                k and v from the context)
//   head norms   [qk_norm] RMSNorm of each q and k head, [hybrid, hybrid_star] the config's norm of q, k and v
//                (rows of D, read contiguous: a fused projection's parts are gathered first)
//   rope         q and k rotated in place
//   unit q, k    [sphere stream] q and k heads over their L2 norm, times s_qk (softmax scale sqrt(D), not 1/sqrt(D))
//   value mix    [value_residual] block 1 keeps its values; later blocks V = lambda1 V + lambda2 V_1
//   attention    causal self-attention (or cross-attention over the context) of the q, k, v rows
//   gate         [attn_gate] y * sigmoid(inp W_g^T); then the output projection
struct AttentionStages {
  bool cross = false, fused = false, head_norms = false, v_norm = false, rope = false, unit_qk = false;
  bool keep_values = false, mix_values = false, gate = false, fast = false;
  NormKind head_norm = NormKind::RMSNorm;

  static AttentionStages of(const ModelConfig& c, bool cross, int block) {
    AttentionStages st;
    st.cross = cross;
    st.fused = !cross && c.qkv == QkvLayout::Fused;
    st.head_norms = !cross && (c.qk_norm || c.qkv_norm());
    st.v_norm = !cross && c.qkv_norm();
    st.head_norm = head_norm_kind(c);
    st.rope = !cross && c.positions == Positions::RoPE;
    st.unit_qk = !cross && c.stream() == ResidualStream::Sphere;
    st.keep_values = !cross && c.value_residual && block == 0;
    st.mix_values = !cross && c.value_residual && block > 0;
    st.gate = !cross && c.attn_gate;
    st.fast = !cross && fast_attention(c);
    // The norms' backward gathers a fused projection's gradients through q, k and v alike (validate() refuses
    // qk_norm with a fused projection).
    BLOCKLAB_CHECK(!(st.fused && st.head_norms && !st.v_norm), "per-head q/k norms need a separate projection");
    return st;
  }
};

// Rows of an (N, width) matrix at a stride: q, k or v inside the fused [q | k | v] rows, or a matrix of its own.
template <typename T>
struct Rows {
  T* p;
  long stride;
};
template <typename T>
struct QkvRows {
  Rows<T> q, k, v;
};

// The fused projection's q, k and v parts as rows of `qkv` (N, Q+2K).
template <typename T>
QkvRows<T> fused_rows(T* qkv, const BlockDims& d) {
  const long s = d.Q + 2L * d.K;
  return {{qkv, s}, {qkv + d.Q, s}, {qkv + d.Q + d.K, s}};
}

// Three matrices back to back in `base`: q (N,Q), then k and v (Nk,K) each.
template <typename T>
QkvRows<T> packed_rows(T* base, long N, long Nk, const BlockDims& d) {
  T* k = base + N * d.Q;
  return {{base, d.Q}, {k, d.K}, {k + Nk * d.K, d.K}};
}

// q, k, v after the projection and the per-head norms: what RoPE and the value mix change in place.
template <typename T>
QkvRows<T> normed_rows(const AttentionActs<T>& a, const AttentionStages& st, const BlockDims& d) {
  if (st.head_norms)
    return {{a.q_norm.out, d.Q}, {a.k_norm.out, d.K}, st.v_norm ? Rows<T>{a.v_norm.out, d.K} : Rows<T>{a.v, d.K}};
  if (st.fused) return fused_rows(a.qkv, d);
  return {{a.q, d.Q}, {a.k, d.K}, {a.v, d.K}};
}

// q, k, v as the attention reads them (the sphere stream: its scaled unit q and k).
template <typename T>
QkvRows<T> attention_rows(const AttentionActs<T>& a, const AttentionStages& st, const BlockDims& d) {
  QkvRows<T> r = normed_rows(a, st, d);
  if (st.unit_qk) r.q = {a.q_unit, d.Q}, r.k = {a.k_unit, d.K};
  return r;
}

template <typename T>
T attention_scale(const AttentionStages& st, const BlockDims& d) {
  return st.unit_qk ? std::sqrt(static_cast<T>(d.D)) : T(1) / std::sqrt(static_cast<T>(d.D));
}

// [value_residual] Block 1: V_1 = its values, kept for the blocks after it. Block l >= 2: the mix of
// kernels/gating.h, V = lambda1 V + lambda2 V_1. With HybridNorm's v norm the values are the normalised ones.
template <typename T>
void value_mix_forward(Rows<T> v, T* v_own, T* first_v, const T* lambda, const AttentionStages& st, long N, int K) {
  if (st.keep_values)
    for (long n = 0; n < N; ++n) std::copy_n(v.p + n * v.stride, K, first_v + n * K);
  else
    kernels::value_mix_forward(v.p, v.stride, v_own, static_cast<const T*>(first_v), lambda, N, K);
}

// Block 1 (last in the backward): dV += d V_1. Blocks l >= 2: the mix's backward (kernels/gating.h).
template <typename T>
void value_mix_backward(Rows<T> dv, T* d_lambda, T* d_first_v, const T* v_own, const T* first_v, const T* lambda,
                        const AttentionStages& st, long N, int K) {
  if (st.keep_values) {
    for (long n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) dv.p[n * dv.stride + k] += d_first_v[n * K + k];
    return;
  }
  kernels::value_mix_backward(dv.p, dv.stride, d_lambda, d_first_v, v_own, first_v, lambda, N, K);
}

// q, k = RoPE(q), RoPE(k) in place, forward or (inverse rotation of the gradients) backward.
template <typename T>
void rope_rows(Rows<T> q, Rows<T> k, const BlockInputs<T>& in, bool backward) {
  const BlockDims& d = in.dims;
  auto rotate = backward ? rope_backward<T> : rope_forward<T>;
  rotate(q.p, in.rope_cos, in.rope_sin, d.B, d.T, d.H, d.D / 2, q.stride);
  rotate(k.p, in.rope_cos, in.rope_sin, d.B, d.T, d.Hkv, d.D / 2, k.stride);
}

// The q, k, v projections: inp (N,C) -> their rows (cross-attention: k and v from the context).
template <typename T>
QkvRows<T> project_qkv(AttentionActs<T>& a, const T* inp, const AttentionTensors<T>& w, const BlockInputs<T>& in,
                       const AttentionStages& st) {
  const BlockDims& d = in.dims;
  const int N = static_cast<int>(d.N());
  if (st.fused) {  // qkv = inp @ W^T + b: (N, Q+2K) = [q | k | v]
    apply_linear(a.qkv, inp, w.qkv, N, d.C, d.Q + 2 * d.K, in);
    return fused_rows(a.qkv, d);
  }
  const T* kv_inp = st.cross ? in.context : inp;
  const int Nk = st.cross ? static_cast<int>(d.Nc()) : N;
  apply_linear(a.q, inp, w.q, N, d.C, d.Q, in);
  apply_linear(a.k, kv_inp, w.k, Nk, d.C, d.K, in);
  apply_linear(a.v, kv_inp, w.v, Nk, d.C, d.K, in);
  return {{a.q, d.Q}, {a.k, d.K}, {a.v, d.K}};
}

// The per-head norms (rows of D) of the projections' q, k (and v): their contiguous copies first when fused.
template <typename T>
void head_norms_forward(AttentionActs<T>& a, QkvRows<T> r, const AttentionTensors<T>& w, const AttentionStages& st,
                        const BlockDims& d, double eps) {
  const long N = d.N();
  if (st.fused)  // a.q, a.k, a.v: the q, k, v parts as contiguous rows, the norms' input
    for (long n = 0; n < N; ++n) {
      std::copy_n(r.q.p + n * r.q.stride, d.Q, a.q + n * d.Q);
      std::copy_n(r.k.p + n * r.k.stride, d.K, a.k + n * d.K);
      std::copy_n(r.v.p + n * r.v.stride, d.K, a.v + n * d.K);
    }
  norm_rows_forward(a.q_norm, static_cast<const T*>(a.q), w.q_norm, st.head_norm, N * d.H, d.D, eps);
  norm_rows_forward(a.k_norm, static_cast<const T*>(a.k), w.k_norm, st.head_norm, N * d.Hkv, d.D, eps);
  if (st.v_norm) norm_rows_forward(a.v_norm, static_cast<const T*>(a.v), w.v_norm, st.head_norm, N * d.Hkv, d.D, eps);
}

// Backward of the per-head norms: from the gradients of their outputs (dn, contiguous) to those of their inputs,
// written into `to` (the projections' gradient rows; a v without a norm is already there).
template <typename T>
void head_norms_backward(QkvRows<T> to, BlockScratch<T>& s, const AttentionTensors<T>& g, QkvRows<T> dn,
                         const AttentionActs<T>& a, const AttentionTensors<T>& w, const AttentionStages& st,
                         const BlockDims& d) {
  const long N = d.N();
  // The kernels accumulate: into zeroed contiguous rows, then to their place.
  const QkvRows<T> pre = packed_rows(s.d_qk_pre, N, N, d);
  zero(s.d_qk_pre, N * (d.Q + (st.v_norm ? 2 : 1) * d.K));
  norm_rows_backward(pre.q.p, g.q_norm, static_cast<const T*>(dn.q.p), static_cast<const T*>(a.q), w.q_norm, a.q_norm,
                     st.head_norm, N * d.H, d.D);
  norm_rows_backward(pre.k.p, g.k_norm, static_cast<const T*>(dn.k.p), static_cast<const T*>(a.k), w.k_norm, a.k_norm,
                     st.head_norm, N * d.Hkv, d.D);
  if (st.v_norm)
    norm_rows_backward(pre.v.p, g.v_norm, static_cast<const T*>(dn.v.p), static_cast<const T*>(a.v), w.v_norm,
                       a.v_norm, st.head_norm, N * d.Hkv, d.D);
  for (long n = 0; n < N; ++n) {
    std::copy_n(pre.q.p + n * d.Q, d.Q, to.q.p + n * to.q.stride);
    std::copy_n(pre.k.p + n * d.K, d.K, to.k.p + n * to.k.stride);
    if (st.v_norm) std::copy_n(pre.v.p + n * d.K, d.K, to.v.p + n * to.v.stride);
  }
}

// F of the (self- or cross-) attention sub-layer: inp (N,C) -> a.out (N,C).
template <typename T>
void attention_forward_sublayer(AttentionActs<T>& a, const T* inp, const AttentionTensors<T>& w,
                                const BlockInputs<T>& in, const AttentionStages& st) {
  const ModelConfig& c = *in.config;
  const BlockDims& d = in.dims;
  const int N = static_cast<int>(d.N()), Tk = st.cross ? d.Tc : d.T;
  const QkvRows<T> projected = project_qkv(a, inp, w, in, st);
  if (st.head_norms) head_norms_forward(a, projected, w, st, d, c.norm_eps);
  const QkvRows<T> r = normed_rows(a, st, d);
  if (st.rope) rope_rows(r.q, r.k, in, false);
  if (st.unit_qk) {  // q, k (after RoPE) per head over their norm, times s_qk
    const T factor = static_cast<T>(SphereFactors::of(c).s_qk);
    scaled_unit_heads_forward(a.q_unit, a.q_rn, r.q.p, r.q.stride, static_cast<const T*>(w.s_qk), factor, N, d.H, d.D);
    scaled_unit_heads_forward(a.k_unit, a.k_rn, r.k.p, r.k.stride, static_cast<const T*>(w.s_qk), factor, N, d.Hkv,
                              d.D);
  }
  if (st.keep_values || st.mix_values)
    value_mix_forward(r.v, a.v_own, in.first_v, static_cast<const T*>(w.value_lambda), st, N, d.K);
  if (st.fast) {
    attention_forward(a.y, a.att, in.attention_scratch, a.qkv, d.B, d.T, d.C, d.H);
  } else {
    const QkvRows<T> v = attention_rows(a, st, d);
    attention_gqa_forward(a.y, static_cast<long>(d.Q), a.att, in.attention_scratch, static_cast<const T*>(v.q.p),
                          v.q.stride, static_cast<const T*>(v.k.p), v.k.stride, static_cast<const T*>(v.v.p),
                          v.v.stride, d.B, d.T, Tk, d.H, d.Hkv, d.D, !st.cross, attention_scale<T>(st, d));
  }
  const T* proj_in = a.y;
  if (st.gate) {  // gate = sigmoid(inp Wg^T); y_gated = y * gate (each head's outputs their own gates)
    apply_linear(a.gate, inp, w.gate, N, d.C, d.Q, in);
    sigmoid_gate_forward(a.y_gated, a.gate, static_cast<const T*>(a.y), static_cast<long>(N) * d.Q);
    proj_in = a.y_gated;
  }
  // out = proj_in Wo^T + bo
  apply_linear(a.out, proj_in, w.proj, N, d.Q, d.C, in);
}

// Backward of F of the attention sub-layer: the forward's stages in reverse. dout = d a.out (N,C). The gradient
// of F's input is written into dinp as `write` says; for cross-attention the context's gradient is added to
// s.d_context.
template <typename T>
void attention_backward_sublayer(T* dinp, GradWrite write, BlockScratch<T>& s, const AttentionTensors<T>& g,
                                 const T* dout, const AttentionActs<T>& a, const T* inp, const AttentionTensors<T>& w,
                                 const BlockInputs<T>& in, const AttentionStages& st) {
  const ModelConfig& c = *in.config;
  const BlockDims& d = in.dims;
  const int N = static_cast<int>(d.N()), Tk = st.cross ? d.Tc : d.T;
  const int Nk = st.cross ? static_cast<int>(d.Nc()) : N;
  const GemmPrecision precision = gemm_precision(c);
  // out = proj_in Wo^T + bo, proj_in = y_gated or y
  linear_backward(s.d_y, g.proj.weight, g.proj.bias, dout, st.gate ? a.y_gated : a.y, w.proj.weight, N, d.Q, d.C,
                  GradWrite::Overwrite, precision, 0, rounded_weight(in, w.proj.weight),
                  weight_squares(in, g.proj.weight));
  if (st.gate) sigmoid_gate_backward(s.d_gate, s.d_y, static_cast<const T*>(a.y), static_cast<const T*>(a.gate),
                                     static_cast<long>(N) * d.Q);
  // The projections' gradient rows (fused: [q | k | v] rows of s.d_qkv), and where the attention writes its q, k,
  // v gradients: the same rows, or (per-head norms) contiguous ones in s.d_qkv, carried to them by the norms'
  // backward.
  const QkvRows<T> projected = st.fused ? fused_rows(s.d_qkv, d) : packed_rows(s.d_qkv, N, Nk, d);
  const QkvRows<T> dr = st.head_norms ? packed_rows(s.d_qkv, N, N, d) : projected;
  if (st.fast) {
    attention_backward(s.d_qkv, in.attention_scratch, s.d_y, a.qkv, a.att, d.B, d.T, d.C, d.H);
  } else {
    const QkvRows<T> v = attention_rows(a, st, d);
    attention_gqa_backward(dr.q.p, dr.q.stride, dr.k.p, dr.k.stride, dr.v.p, dr.v.stride, in.attention_scratch,
                           static_cast<const T*>(s.d_y), static_cast<long>(d.Q), static_cast<const T*>(v.q.p),
                           v.q.stride, static_cast<const T*>(v.k.p), v.k.stride, static_cast<const T*>(v.v.p),
                           v.v.stride, a.att, d.B, d.T, Tk, d.H, d.Hkv, d.D, !st.cross, attention_scale<T>(st, d));
  }
  const QkvRows<T> r = normed_rows(a, st, d);
  if (st.unit_qk) {  // from d (q_unit, k_unit) to d (q, k) after RoPE, in place; d s_qk
    const T factor = static_cast<T>(SphereFactors::of(c).s_qk);
    scaled_unit_heads_backward(dr.q.p, dr.q.stride, g.s_qk, static_cast<const T*>(r.q.p), r.q.stride,
                               static_cast<const T*>(a.q_rn), static_cast<const T*>(w.s_qk), factor, N, d.H, d.D);
    scaled_unit_heads_backward(dr.k.p, dr.k.stride, g.s_qk, static_cast<const T*>(r.k.p), r.k.stride,
                               static_cast<const T*>(a.k_rn), static_cast<const T*>(w.s_qk), factor, N, d.Hkv, d.D);
  }
  if (st.rope) rope_rows(dr.q, dr.k, in, true);  // rotate the gradients back
  if (st.keep_values || st.mix_values)
    value_mix_backward(dr.v, g.value_lambda, s.d_first_v, static_cast<const T*>(a.v_own),
                       static_cast<const T*>(in.first_v), static_cast<const T*>(w.value_lambda), st, N, d.K);
  if (st.head_norms) head_norms_backward(projected, s, g, dr, a, w, st, d);
  if (st.fused) {  // qkv = inp @ W^T + b
    linear_backward(dinp, g.qkv.weight, g.qkv.bias, static_cast<const T*>(s.d_qkv), inp, w.qkv.weight, N, d.C,
                    d.Q + 2 * d.K, write, precision, 0, rounded_weight(in, w.qkv.weight),
                    weight_squares(in, g.qkv.weight));
  } else {  // q = inp Wq^T + bq;  k, v = kv_inp Wk^T + bk, kv_inp Wv^T + bv (kv_inp: the context for cross-attention)
    linear_backward(dinp, g.q.weight, g.q.bias, static_cast<const T*>(projected.q.p), inp, w.q.weight, N, d.C, d.Q,
                    write, precision, 0, rounded_weight(in, w.q.weight),
                    weight_squares(in, g.q.weight));
    T* d_kv_inp = st.cross ? s.d_context : dinp;
    const T* kv_inp = st.cross ? in.context : inp;
    linear_backward(d_kv_inp, g.k.weight, g.k.bias, static_cast<const T*>(projected.k.p), kv_inp, w.k.weight, Nk, d.C,
                    d.K, GradWrite::Accumulate, precision, 0, rounded_weight(in, w.k.weight),
                    weight_squares(in, g.k.weight));
    linear_backward(d_kv_inp, g.v.weight, g.v.bias, static_cast<const T*>(projected.v.p), kv_inp, w.v.weight, Nk, d.C,
                    d.K, GradWrite::Accumulate, precision, 0, rounded_weight(in, w.v.weight),
                    weight_squares(in, g.v.weight));
  }
  if (st.gate)  // z = inp Wg^T, after the projections (the first of which may overwrite dinp)
    linear_backward(dinp, g.gate.weight, static_cast<T*>(nullptr), static_cast<const T*>(s.d_gate), inp, w.gate.weight,
                    N, d.C, d.Q, GradWrite::Accumulate, precision, 0, rounded_weight(in, w.gate.weight),
                    weight_squares(in, g.gate.weight));
}

// F of the MLP sub-layer: inp (N,C) -> a.out (N,C).
template <typename T>
void mlp_forward_sublayer(MlpActs<T>& a, const T* inp, const MlpTensors<T>& w, const BlockInputs<T>& in) {
  const ModelConfig& c = *in.config;
  const BlockDims& d = in.dims;
  const int N = static_cast<int>(d.N());
  a.pre_saved = kernels::GeluSaved::PreActivation;  // unless the fused GELU below keeps its derivative there
  a.act_rounded = false;                             // unless it keeps act in bf16
  if (a.pre_raw != nullptr) {
    // The sphere stream: pre = s_uv * (inp W1^T + b1), s_uv = stored * sqrt(C) per fc1 output; then the activation
    apply_linear(a.pre_raw, inp, w.fc1, N, d.C, d.I_in, in);
    const T factor = static_cast<T>(SphereFactors::of(c).s_uv);
    channel_scale_forward(a.pre, static_cast<const T*>(a.pre_raw), static_cast<const T*>(w.s_uv), factor, N, d.I_in);
    const long NI = static_cast<long>(N) * d.I;
    switch (c.mlp) {
      case MlpKind::Gelu: gelu_forward(a.act, static_cast<const T*>(a.pre), NI); break;
      case MlpKind::GeluTanh: gelu_tanh_forward(a.act, static_cast<const T*>(a.pre), NI); break;
      case MlpKind::SwiGLU:
      case MlpKind::GeGLU:
        glu_forward(a.act, static_cast<const T*>(a.pre), N, d.I, glu_kind(c.mlp));
        break;
    }
    apply_linear(a.out, static_cast<const T*>(a.act), w.fc2, N, d.I, d.C, in);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    // bf16 products that take rounded operands: act kept in bf16 (only fc2's products read it), fc2's forward
    // reading it as it lies
    a.act_rounded = w.fc1.source == nullptr && w.fc2.source == nullptr && gemm_precision(c) == GemmPrecision::Bf16 &&
                    bf16_gemm_takes_rounded_operands();
    if (a.act_rounded) {
      uint16_t* act = reinterpret_cast<uint16_t*>(a.act);
      if (c.gated_mlp()) {
        linear_glu_forward_rounded_act(act, a.pre, inp, w.fc1.weight, w.fc1.bias, N, d.C, d.I, glu_kind(c.mlp),
                                       rounded_weight(in, w.fc1.weight));
      } else {
        linear_gelu_forward_rounded_act(act, a.pre, inp, w.fc1.weight, w.fc1.bias, N, d.C, d.I, gelu_form(c.mlp),
                                        rounded_weight(in, w.fc1.weight));
        a.pre_saved = GeluSaved::Derivative;
      }
      linear_forward_rounded_input(a.out, act, w.fc2.weight, w.fc2.bias, N, d.I, d.C, 0,
                                   rounded_weight(in, w.fc2.weight));
      return;
    }
  }
  switch (c.mlp) {
    case MlpKind::Gelu:
    case MlpKind::GeluTanh:  // act = gelu(inp W1^T + b1), fused when the weight is in the arena
      if (w.fc1.source == nullptr) {
        a.pre_saved = linear_gelu_forward(a.act, a.pre, inp, w.fc1.weight, static_cast<const T*>(w.fc1.bias), N, d.C,
                                          d.I, gemm_precision(c), gelu_form(c.mlp), /*want_derivative=*/true);
      } else {
        apply_linear(a.pre, inp, w.fc1, N, d.C, d.I, in);
        if (c.mlp == MlpKind::Gelu)
          gelu_forward(a.act, static_cast<const T*>(a.pre), static_cast<long>(N) * d.I);
        else
          gelu_tanh_forward(a.act, static_cast<const T*>(a.pre), static_cast<long>(N) * d.I);
      }
      break;
    case MlpKind::SwiGLU:
    case MlpKind::GeGLU:  // [value | gate] = inp W1^T + b1;  act = value * f(gate) (fused: the weight in the arena)
      if (w.fc1.source == nullptr) {
        linear_glu_forward(a.act, a.pre, inp, static_cast<const T*>(w.fc1.weight), static_cast<const T*>(w.fc1.bias), N,
                           d.C, d.I, glu_kind(c.mlp), gemm_precision(c), rounded_weight(in, w.fc1.weight));
      } else {
        apply_linear(a.pre, inp, w.fc1, N, d.C, d.I_in, in);
        glu_forward(a.act, static_cast<const T*>(a.pre), N, d.I, glu_kind(c.mlp));
      }
      break;
  }
  // out = act W2^T + b2
  apply_linear(a.out, static_cast<const T*>(a.act), w.fc2, N, d.I, d.C, in);
}

template <typename T>
void mlp_backward_sublayer(T* dinp, GradWrite write, BlockScratch<T>& s, const MlpTensors<T>& g, const T* dout,
                           const MlpActs<T>& a, const T* inp, const MlpTensors<T>& w, const BlockInputs<T>& in) {
  const ModelConfig& c = *in.config;
  const BlockDims& d = in.dims;
  const int N = static_cast<int>(d.N());
  const GemmPrecision precision = gemm_precision(c);
  if (a.act_rounded) {
    // d_pre from fc2 and the saved GELU' (or the GLU's backward) in one pass, kept rounded (fc1's products alone read
    // it) with fc1's bias gradient taken as it is written; fc2's weight terms from the bf16 act
    if constexpr (std::is_same_v<T, float>) {
      uint16_t* d_pre = reinterpret_cast<uint16_t*>(s.d_pre);
      const auto* act = reinterpret_cast<const uint16_t*>(a.act);
      double* fc2_squares = weight_squares(in, g.fc2.weight);
      if (c.gated_mlp())
        glu_linear_backward_rounded_dpre(d_pre, g.fc1.bias, g.fc2.weight, g.fc2.bias, dout, a.pre, act, w.fc2.weight,
                                         N, d.I, d.C, glu_kind(c.mlp), rounded_weight(in, w.fc2.weight), fc2_squares);
      else
        gelu_linear_backward_rounded_dpre(d_pre, g.fc1.bias, g.fc2.weight, g.fc2.bias, dout, a.pre, act, w.fc2.weight,
                                          N, d.I, d.C, rounded_weight(in, w.fc2.weight), fc2_squares);
      linear_backward_rounded_dout(dinp, g.fc1.weight, d_pre, inp, w.fc1.weight, N, d.C, d.I_in, write,
                                   rounded_weight(in, w.fc1.weight), weight_squares(in, g.fc1.weight));
    }
    return;
  }
  if (c.mlp == MlpKind::Gelu || c.mlp == MlpKind::GeluTanh) {
    // d_pre from fc2 and GELU' in one pass
    gelu_linear_backward(s.d_pre, g.fc2.weight, g.fc2.bias, dout, a.pre, a.act, w.fc2.weight, N, d.I, d.C, precision,
                         gelu_form(c.mlp), a.pre_saved, weight_squares(in, g.fc2.weight));
  } else {  // d_pre from fc2 and the GLU's backward in one pass
    glu_linear_backward(s.d_pre, g.fc2.weight, g.fc2.bias, dout, static_cast<const T*>(a.pre), a.act, w.fc2.weight, N,
                        d.I, d.C, glu_kind(c.mlp), precision, rounded_weight(in, w.fc2.weight), s.d_act,
                        weight_squares(in, g.fc2.weight));
  }
  if (a.pre_raw != nullptr) {
    // pre = s_uv * pre_raw: d s_uv (stored) and d pre_raw
    const T factor = static_cast<T>(SphereFactors::of(c).s_uv);
    channel_scale_backward(s.d_pre, g.s_uv, static_cast<const T*>(a.pre_raw), static_cast<const T*>(w.s_uv), factor, N,
                           d.I_in);
  }
  linear_backward(dinp, g.fc1.weight, g.fc1.bias, static_cast<const T*>(s.d_pre), inp, w.fc1.weight, N, d.C, d.I_in,
                  write, precision, 0, rounded_weight(in, w.fc1.weight), weight_squares(in, g.fc1.weight));
}

// The learned per-block and per-sub-layer terms of a sub-layer's residual, as pointers (nullptr: absent).
template <typename T>
struct ResidualTerms {
  const T* omega = nullptr;  // (C) Admin's s
  const T* gate = nullptr;   // (1) ReZero's g
};

// The branch of one sub-layer, out(F(in(x) * c)), forward. Returns it.
template <typename T, typename Acts, typename Tensors, typename Forward>
const T* branch_forward(Acts& a, const T* x, const Tensors& w, const SublayerPlan& p, const BlockInputs<T>& in,
                        Forward&& F) {
  const ModelConfig& c = *in.config;
  const long N = in.dims.N(), NC = N * c.width;
  const T* f_in = x;
  if (p.in_norm) {
    norm_forward(a.in, x, w.norm, c, N);
    if (p.in_scale != 1) {  // LNS: in(x) / sqrt(l)
      const T scale = static_cast<T>(p.in_scale);
      for (long i = 0; i < NC; ++i) a.in.out[i] *= scale;
    }
    f_in = a.in.out;
  }
  F(a, f_in);
  const T* branch = a.out;
  if (p.out_norm) {
    norm_forward(a.out_norm, static_cast<const T*>(a.out), w.out_norm, c, N);
    branch = a.out_norm.out;
  }
  return branch;
}

// One sub-layer y = after(s * x + g * out(F(in(x) * c))), forward. Returns y.
template <typename T, typename Acts, typename Tensors, typename Forward>
const T* sublayer_forward(Acts& a, const T* x, const Tensors& w, const SublayerPlan& p, const T* gate,
                          const BlockInputs<T>& in, Forward&& F) {
  const ModelConfig& c = *in.config;
  const long N = in.dims.N(), NC = N * c.width;
  const T* branch = branch_forward(a, x, w, p, in, F);
  if (p.normalized_update) {
    // The sphere stream: A = U(x), B = U(F(x)), resid = A + |alpha| (B - A), y = U(resid); U(v) = v / ||v||
    const int C = c.width;
    const T factor = static_cast<T>(SphereFactors::of(c).alpha);
    unit_rows_forward(a.unit_x.out, a.unit_x.rstd, x, N, C);
    unit_rows_forward(a.unit_f.out, a.unit_f.rstd, branch, N, C);
    sphere_step_forward(a.resid, static_cast<const T*>(a.unit_x.out), static_cast<const T*>(a.unit_f.out),
                        static_cast<const T*>(w.sphere_alpha), factor, N, C);
    unit_rows_forward(a.after.out, a.after.rstd, static_cast<const T*>(a.resid), N, C);
    return a.after.out;
  }
  const T* skip = p.residual_from_norm ? static_cast<const T*>(a.in.out) : x;  // HybridNorm's MLP: in(x) + F(in(x))
  if (p.residual_scale == 1 && !p.learned_scale && !p.gate) {
    residual_forward(a.resid, skip, branch, NC);
  } else {  // resid = s * x + g * branch, s a constant or a learned (C) vector, g a learned scalar
    scaled_residual_forward(a.resid, skip, branch, p.learned_scale ? static_cast<const T*>(w.omega) : nullptr,
                            static_cast<T>(p.residual_scale), p.gate ? *gate : T(1), N, c.width);
  }
  if (!p.after_norm) return a.resid;
  norm_forward(a.after, static_cast<const T*>(a.resid), w.norm, c, N);
  return a.after.out;
}

// Backward of f_in = in(x) * c and F: d_F = d loss / d F(f_in); d (N,C) += d loss / d x.
template <typename T, typename Acts, typename Tensors, typename Backward>
void branch_input_backward(T* d, BlockScratch<T>& s, const Tensors& g, const Acts& a, const T* x, const Tensors& w,
                           const SublayerPlan& p, const T* d_F, const BlockInputs<T>& in, Backward&& F_backward) {
  const ModelConfig& c = *in.config;
  const long N = in.dims.N(), NC = N * c.width;
  if (p.in_norm) {
    F_backward(s.d_in, GradWrite::Overwrite, d_F, static_cast<const T*>(a.in.out));
    if (p.in_scale != 1) {  // f_in = Norm(x) * c
      const T scale = static_cast<T>(p.in_scale);
      for (long k = 0; k < NC; ++k) s.d_in[k] *= scale;
    }
    if (p.residual_from_norm) {  // resid = f_in + F(f_in): d f_in += d resid; x reaches resid only through f_in
      for (long k = 0; k < NC; ++k) s.d_in[k] += d[k];
      zero(d, NC);
    }
    // f_in = Norm(x): d_x += its backward
    norm_backward(d, g.norm, static_cast<const T*>(s.d_in), x, w.norm, a.in, c, N);
  } else {
    F_backward(d, GradWrite::Accumulate, d_F, x);
  }
}

// Backward of one sub-layer. d (N,C): d loss / dy on entry, d loss / dx on exit (possibly swapped with
// s.d_other). F_backward(dinp, write, dout, f_in) differentiates F. gate / d_gate: ReZero's alpha and
// its gradient (nullptr otherwise).
template <typename T, typename Acts, typename Tensors, typename Backward>
void sublayer_backward(T*& d, BlockScratch<T>& s, const Tensors& g, const Acts& a, const T* x, const Tensors& w,
                       const SublayerPlan& p, const T* gate, T* d_gate, const BlockInputs<T>& in,
                       Backward&& F_backward) {
  const ModelConfig& c = *in.config;
  const long N = in.dims.N(), NC = N * c.width;
  const int C = c.width;
  if (p.normalized_update) {
    // The sphere stream (see sublayer_forward): d resid = U's backward of d; the step's backward gives d A (into
    // d), d B (into d_f) and d alpha; then U's backwards, then F's
    const T factor = static_cast<T>(SphereFactors::of(c).alpha);
    std::copy_n(d, NC, s.d_branch);
    unit_rows_backward(s.d_branch, static_cast<const T*>(a.after.out), static_cast<const T*>(a.after.rstd), N, C);
    sphere_step_backward(d, s.d_f, g.sphere_alpha, static_cast<const T*>(s.d_branch),
                         static_cast<const T*>(a.unit_x.out), static_cast<const T*>(a.unit_f.out),
                         static_cast<const T*>(w.sphere_alpha), factor, N, C);
    unit_rows_backward(s.d_f, static_cast<const T*>(a.unit_f.out), static_cast<const T*>(a.unit_f.rstd), N, C);
    unit_rows_backward(d, static_cast<const T*>(a.unit_x.out), static_cast<const T*>(a.unit_x.rstd), N, C);
    branch_input_backward(d, s, g, a, x, w, p, static_cast<const T*>(s.d_f), in, F_backward);
    return;
  }
  if (p.after_norm) {
    // y = Norm(resid): d_resid = its backward, into the other buffer (the kernel accumulates)
    zero(s.d_other, NC);
    norm_backward(s.d_other, g.norm, static_cast<const T*>(d), static_cast<const T*>(a.resid), w.norm, a.after, c, N);
    std::swap(d, s.d_other);
  }
  // Now d = d loss / d resid.  resid = s * x + g * branch, branch = out(F(f_in))
  const T* d_F = d;  // d loss / d F: d itself when s = g = 1 and there is no out norm
  if (!p.plain()) {
    // d branch = g d_resid, d g, d omega; d skip = s d_resid (F's input gradient is added below)
    const T* branch = p.out_norm ? a.out_norm.out : a.out;
    const T* skip = p.residual_from_norm ? static_cast<const T*>(a.in.out) : x;
    scaled_residual_backward(d, s.d_branch, p.gate ? d_gate : nullptr, p.learned_scale ? g.omega : nullptr, skip,
                             branch, p.learned_scale ? static_cast<const T*>(w.omega) : nullptr,
                             static_cast<T>(p.residual_scale), p.gate ? *gate : T(1), N, C);
    d_F = s.d_branch;
    if (p.out_norm) {  // branch = Norm(F): d_F = its backward
      zero(s.d_f, NC);
      norm_backward(s.d_f, g.out_norm, static_cast<const T*>(s.d_branch), static_cast<const T*>(a.out), w.out_norm,
                    a.out_norm, c, N);
      d_F = s.d_f;
    }
  }
  branch_input_backward(d, s, g, a, x, w, p, d_F, in, F_backward);
}

}  // namespace

BlockDims BlockDims::of(const ModelConfig& c, int batch, int seq_len) {
  BlockDims d;
  d.B = batch, d.T = seq_len, d.Tc = c.cross_attention ? std::min(c.context_len, seq_len) : 0;
  d.C = c.width, d.H = c.heads, d.Hkv = c.kv_head_count(), d.D = c.head_size();
  d.Q = c.q_dim(), d.K = c.kv_dim(), d.I = c.mlp_hidden(), d.I_in = c.mlp_in_width();
  return d;
}

template <typename T>
long carve_block_acts(BlockActs<T>& a, T* base, const ModelConfig& c, const BlockDims& d, int index) {
  Carver<T> m(base);
  a = BlockActs<T>{};
  const long N = d.N();
  carve_attention(a.attn, m, c, d, c.sublayer_plan(index, Sublayer::Attention), false, index == 0);
  if (c.cross_attention) carve_attention(a.cross, m, c, d, c.sublayer_plan(index, Sublayer::Cross), true, index == 0);
  const SublayerPlan plan = c.sublayer_plan(index, Sublayer::Mlp);
  MlpActs<T>& p = a.mlp;
  if (plan.in_norm) carve_norm(p.in, m, c, N);
  p.pre = m.take(N * d.I_in), p.act = m.take(N * d.I), p.out = m.take(N * d.C);
  if (c.stream() == ResidualStream::Sphere) p.pre_raw = m.take(N * d.I_in);
  if (plan.out_norm) carve_norm(p.out_norm, m, c, N);
  if (!c.hyper()) p.resid = m.take(N * d.C);
  if (plan.after_norm) carve_norm(p.after, m, c, N);
  if (plan.normalized_update) carve_unit(p.after, m, N, d.C), carve_unit(p.unit_x, m, N, d.C), carve_unit(p.unit_f, m, N, d.C);
  // hyper-connections: set by the stack
  a.output = plan.after_norm || plan.normalized_update ? p.after.out : p.resid;
  return m.used();
}

size_t block_attention_scratch_size(const ModelConfig& c, const BlockDims& d) {
  size_t attention = fast_attention(c) ? attention_scratch_size(d.B, d.T, d.C, d.H)
                                       : attention_gqa_scratch_size(d.B, d.T, d.T, d.H, d.D);
  if (c.cross_attention) attention = std::max(attention, attention_gqa_scratch_size(d.B, d.T, d.Tc, d.H, d.D));
  return attention;
}

template <typename T>
long carve_block_scratch(BlockScratch<T>& s, T* base, const ModelConfig& c, const BlockDims& d) {
  Carver<T> m(base);
  s = BlockScratch<T>{};
  const long N = d.N();
  s.d_other = m.take(N * d.C), s.d_in = m.take(N * d.C);
  const long self_qkv = N * (d.Q + 2L * d.K), cross_qkv = N * d.Q + 2 * d.Nc() * d.K;
  s.d_qkv = m.take(std::max(self_qkv, cross_qkv));
  if (c.qk_norm) s.d_qk_pre = m.take(N * (d.Q + d.K));
  if (c.qkv_norm()) s.d_qk_pre = m.take(N * (d.Q + 2L * d.K));
  s.d_y = m.take(N * d.Q);
  if (c.attn_gate) s.d_gate = m.take(N * d.Q);
  // the gated MLP's dact: in float it is turned into d_pre block by block (kernels/linear_glu.h), kept whole in double
  if (c.gated_mlp() && std::is_same_v<T, double>) s.d_act = m.take(N * d.I);
  s.d_pre = m.take(N * d.I_in);
  bool plain = true, out_norm = false;
  for (int l = 0; l < c.layers; ++l)
    for (Sublayer which : {Sublayer::Attention, Sublayer::Cross, Sublayer::Mlp}) {
      plain = plain && c.sublayer_plan(l, which).plain();
      out_norm = out_norm || c.sublayer_plan(l, which).out_norm;
    }
  if (!plain) s.d_branch = m.take(N * d.C);
  if (out_norm || c.stream() == ResidualStream::Sphere) s.d_f = m.take(N * d.C);
  s.attention = m.take(static_cast<long>(block_attention_scratch_size(c, d)));
  if (c.cross_attention) s.d_context = m.take(d.Nc() * d.C);
  if (c.value_residual) s.d_first_v = m.take(N * d.K);
  return m.used();
}

template <typename T>
void block_forward(BlockActs<T>& a, const T* x, const BlockTensors<T>& w, const BlockInputs<T>& in, int index) {
  const ModelConfig& c = *in.config;
  const T* gate = w.rezero_alpha;
  const T* h = sublayer_forward(a.attn, x, w.attn, c.sublayer_plan(index, Sublayer::Attention), gate, in,
                                [&](AttentionActs<T>& acts, const T* inp) {
                                  attention_forward_sublayer(acts, inp, w.attn, in, AttentionStages::of(c, false, index));
                                });
  if (c.cross_attention)
    h = sublayer_forward(a.cross, h, w.cross, c.sublayer_plan(index, Sublayer::Cross), gate, in,
                         [&](AttentionActs<T>& acts, const T* inp) {
                           attention_forward_sublayer(acts, inp, w.cross, in, AttentionStages::of(c, true, index));
                         });
  h = sublayer_forward(a.mlp, h, w.mlp, c.sublayer_plan(index, Sublayer::Mlp), gate, in,
                       [&](MlpActs<T>& acts, const T* inp) { mlp_forward_sublayer(acts, inp, w.mlp, in); });
  BLOCKLAB_CHECK(h == a.output, "block output carved in the wrong place");
}

template <typename T>
void block_backward(T*& d_stream, BlockScratch<T>& s, const BlockTensors<T>& g, const BlockActs<T>& a, const T* x,
                    const BlockTensors<T>& w, const BlockInputs<T>& in, int index) {
  const bool cross = in.config->cross_attention;
  const SublayerPlan attn_plan = in.config->sublayer_plan(index, Sublayer::Attention);
  const SublayerPlan cross_plan = in.config->sublayer_plan(index, Sublayer::Cross);
  const SublayerPlan mlp_plan = in.config->sublayer_plan(index, Sublayer::Mlp);
  const T* gate = w.rezero_alpha;
  T* d_gate = g.rezero_alpha;
  // The input of each sub-layer is the output of the one before (x for the first).
  auto output_of = [](const auto& acts, const SublayerPlan& plan) -> const T* {
    return plan.after_norm || plan.normalized_update ? acts.after.out : acts.resid;
  };
  const T* mlp_x = cross ? output_of(a.cross, cross_plan) : output_of(a.attn, attn_plan);
  sublayer_backward(d_stream, s, g.mlp, a.mlp, mlp_x, w.mlp, mlp_plan, gate, d_gate, in,
                    [&](T* dinp, GradWrite write, const T* dout, const T* inp) {
                      mlp_backward_sublayer(dinp, write, s, g.mlp, dout, a.mlp, inp, w.mlp, in);
                    });
  if (cross)
    sublayer_backward(d_stream, s, g.cross, a.cross, output_of(a.attn, attn_plan), w.cross, cross_plan, gate, d_gate, in,
                      [&](T* dinp, GradWrite write, const T* dout, const T* inp) {
                        attention_backward_sublayer(dinp, write, s, g.cross, dout, a.cross, inp, w.cross, in,
                                                    AttentionStages::of(*in.config, true, index));
                      });
  sublayer_backward(d_stream, s, g.attn, a.attn, x, w.attn, attn_plan, gate, d_gate, in,
                    [&](T* dinp, GradWrite write, const T* dout, const T* inp) {
                      attention_backward_sublayer(dinp, write, s, g.attn, dout, a.attn, inp, w.attn, in,
                                                  AttentionStages::of(*in.config, false, index));
                    });
}

template <typename T>
const T* sublayer_branch_forward(BlockActs<T>& a, Sublayer which, const T* h, const BlockTensors<T>& w,
                                 const BlockInputs<T>& in, int index) {
  const SublayerPlan plan = in.config->sublayer_plan(index, which);
  if (which == Sublayer::Attention)
    return branch_forward(a.attn, h, w.attn, plan, in, [&](AttentionActs<T>& acts, const T* inp) {
      attention_forward_sublayer(acts, inp, w.attn, in, AttentionStages::of(*in.config, false, index));
    });
  return branch_forward(a.mlp, h, w.mlp, plan, in,
                        [&](MlpActs<T>& acts, const T* inp) { mlp_forward_sublayer(acts, inp, w.mlp, in); });
}

template <typename T>
void sublayer_branch_backward(T* dh, BlockScratch<T>& s, const BlockTensors<T>& g, const BlockActs<T>& a,
                              Sublayer which, const T* d_branch, const T* h, const BlockTensors<T>& w,
                              const BlockInputs<T>& in, int index) {
  const ModelConfig& c = *in.config;
  const SublayerPlan plan = c.sublayer_plan(index, which);
  const long N = in.dims.N(), NC = N * c.width;
  // branch = out(F): d_F = its backward when there is an out norm
  auto d_F_of = [&](const auto& acts, const auto& grads, const auto& weights) -> const T* {
    if (!plan.out_norm) return d_branch;
    zero(s.d_f, NC);
    norm_backward(s.d_f, grads.out_norm, d_branch, static_cast<const T*>(acts.out), weights.out_norm, acts.out_norm,
                  c, N);
    return s.d_f;
  };
  if (which == Sublayer::Attention) {
    branch_input_backward(dh, s, g.attn, a.attn, h, w.attn, plan, d_F_of(a.attn, g.attn, w.attn), in,
                          [&](T* dinp, GradWrite write, const T* dout, const T* inp) {
                            attention_backward_sublayer(dinp, write, s, g.attn, dout, a.attn, inp, w.attn, in,
                                                        AttentionStages::of(c, false, index));
                          });
  } else {
    branch_input_backward(dh, s, g.mlp, a.mlp, h, w.mlp, plan, d_F_of(a.mlp, g.mlp, w.mlp), in,
                          [&](T* dinp, GradWrite write, const T* dout, const T* inp) {
                            mlp_backward_sublayer(dinp, write, s, g.mlp, dout, a.mlp, inp, w.mlp, in);
                          });
  }
}

template <typename T>
long carve_norm_acts(NormActs<T>& n, T* base, const ModelConfig& c, long N) {
  Carver<T> m(base);
  n = NormActs<T>{};
  carve_norm(n, m, c, N);
  return m.used();
}

template <typename T>
void norm_forward(NormActs<T>& n, const T* x, const NormTensors<T>& w, const ModelConfig& c, long N) {
  norm_rows_forward(n, x, w, c.norm, N, c.width, c.norm_eps);
}

template <typename T>
void norm_backward(T* dx, const NormTensors<T>& g, const T* dout, const T* x, const NormTensors<T>& w,
                   const NormActs<T>& n, const ModelConfig& c, long N) {
  norm_rows_backward(dx, g, dout, x, w, n, c.norm, N, c.width);
}

#define BLOCKLAB_INSTANTIATE(T)                                                                                     \
  template long carve_block_acts<T>(BlockActs<T>&, T*, const ModelConfig&, const BlockDims&, int);                  \
  template long carve_norm_acts<T>(NormActs<T>&, T*, const ModelConfig&, long);                                    \
  template void norm_forward<T>(NormActs<T>&, const T*, const NormTensors<T>&, const ModelConfig&, long);          \
  template void norm_backward<T>(T*, const NormTensors<T>&, const T*, const T*, const NormTensors<T>&,              \
                                 const NormActs<T>&, const ModelConfig&, long);                                    \
  template long carve_block_scratch<T>(BlockScratch<T>&, T*, const ModelConfig&, const BlockDims&);                 \
  template void block_forward<T>(BlockActs<T>&, const T*, const BlockTensors<T>&, const BlockInputs<T>&, int);      \
  template void block_backward<T>(T*&, BlockScratch<T>&, const BlockTensors<T>&, const BlockActs<T>&, const T*,     \
                                  const BlockTensors<T>&, const BlockInputs<T>&, int);                     \
  template const T* sublayer_branch_forward<T>(BlockActs<T>&, Sublayer, const T*, const BlockTensors<T>&,          \
                                               const BlockInputs<T>&, int);                                         \
  template void sublayer_branch_backward<T>(T*, BlockScratch<T>&, const BlockTensors<T>&, const BlockActs<T>&,      \
                                            Sublayer, const T*, const T*, const BlockTensors<T>&,                   \
                                            const BlockInputs<T>&, int);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)
#undef BLOCKLAB_INSTANTIATE

}  // namespace blocklab
