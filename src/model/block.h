#pragma once
// One transformer block, forward and backward side by side, for every BlockConfig.
//
// A block is a list of sub-layers: self-attention, cross-attention (optional), MLP. Each is
//   y = after( s * x + g * out( F( in(x) * c ) ) )       (config.h: SublayerPlan, one per block)
// so a placement is a small table of flags per sub-layer, and forward/backward are written once over them.
//
// The activations a forward saves are carved from the config (BlockActs); the backward reads them and
// nothing else, so a second forward into another BlockActs (e.g. a probe) never disturbs a pending backward.
// Tags in brackets name the keys or designs a field exists for; [sphere]: the stream on the unit sphere
// (ResidualStream::Sphere, model/sphere.h).
#include <algorithm>
#include <cstdint>

#include "kernels/bf16_gemm.h"
#include "kernels/linear_gelu.h"
#include "model/config.h"
#include "model/grad_squares.h"
#include "model/parameters.h"

namespace blocklab {

// The kernels' precision for the config's linear layers.
inline kernels::GemmPrecision gemm_precision(const ModelConfig& c) {
  return c.precision == Precision::Bf16 ? kernels::GemmPrecision::Bf16 : kernels::GemmPrecision::Fp32;
}

// Hands out 64-byte-aligned slices of one arena: with a null base it only counts, so the same carving
// code sizes an arena and then binds it.
template <typename T>
class Carver {
 public:
  explicit Carver(T* base) : base_(base) {}
  T* take(long numel) {
    T* p = next();
    used_ += (numel + 15) / 16 * 16;
    return p;
  }
  // Where the next slice starts, for a nested carving function; advance() then skips what it used.
  T* next() const { return base_ == nullptr ? nullptr : base_ + used_; }
  void advance(long used) { used_ += used; }
  long used() const { return used_; }

 private:
  T* base_;
  long used_ = 0;
};

template <typename T>
void zero(T* p, long n) {
  std::fill(p, p + n, T(0));
}

// Shapes of one forward: N = B*T rows of the stream, Nc = B*Tc rows of the cross-attention context.
struct BlockDims {
  int B = 0, T = 0, Tc = 0;  // batch, sequence length, context length (0 without cross-attention)
  int C = 0, H = 0, Hkv = 0, D = 0, Q = 0, K = 0, I = 0, I_in = 0;  // Q = H*D, K = Hkv*D, I_in: fc1 outputs
  long N() const { return static_cast<long>(B) * T; }
  long Nc() const { return static_cast<long>(B) * Tc; }
  static BlockDims of(const ModelConfig& config, int batch, int seq_len);
};

template <typename T>
struct NormActs {
  T* out = nullptr;   // (N,C) the normalised rows
  T* mean = nullptr;  // (N) LayerNorm only
  T* rstd = nullptr;  // (N) LayerNorm and RMSNorm
};

template <typename T>
struct AttentionActs {
  NormActs<T> in;      // [in norm] in(x) (scaled by c in place for LNS)
  T* qkv = nullptr;    // fused (N, Q+2K) [q | k | v], q and k parts rotated in place by RoPE
  // q, k, v as contiguous rows before any per-head norm: the separate projections' outputs, or (fused, with
  // per-head norms) the fused rows' parts gathered for the norms. RoPE and the value mix act on the rows that
  // reach the attention (block.cpp AttentionStages: the fused rows, these, or the per-head norms' outputs).
  T* q = nullptr;      // (N,Q)
  T* k = nullptr;      // (N,K) or (Nc,K) for cross-attention
  T* v = nullptr;      // (N,K) or (Nc,K)
  // Per-head norms over rows of D, out then rotated in place by RoPE: [qk_norm] RMSNorm of q and k;
  // [hybrid, hybrid_star] the config's norm kind of q, k and v (v_norm.out then mixed in place by value_residual)
  NormActs<T> q_norm;  // (N*H rows)
  NormActs<T> k_norm;  // (N*Hkv rows)
  NormActs<T> v_norm;  // (N*Hkv rows) [hybrid, hybrid_star]
  T* att = nullptr;    // (B,H,T,Tk) softmax probabilities
  T* y = nullptr;      // (N,Q) attention output, heads concatenated
  T* gate = nullptr;   // [attn_gate] (N,Q) sigmoid(inp W_g^T)
  T* y_gated = nullptr;  // [attn_gate] (N,Q) y * gate, the output projection's input
  T* v_own = nullptr;    // [value_residual, blocks after the first] (N,K) the block's own values before mixing
  // [sphere] the attention's q and k: each head's vector (after RoPE) over its L2 norm, times s_qk; and the
  // inverse norms (N*H), (N*Hkv)
  T* q_unit = nullptr;   // (N,Q)
  T* k_unit = nullptr;   // (N,K)
  T* q_rn = nullptr;
  T* k_rn = nullptr;
  T* out = nullptr;    // (N,C) F(x): the output projection
  NormActs<T> out_norm;  // [out norm] out(F(x))
  T* resid = nullptr;  // (N,C) s * x + g * out(F(x)); [sphere] A + |alpha| (B - A)
  NormActs<T> after;   // [after norm] after(resid); [sphere] L2norm(resid) (out, rstd = 1 / norm)
  NormActs<T> unit_x;  // [sphere] A = L2norm(x) (out, rstd = 1 / norm)
  NormActs<T> unit_f;  // [sphere] B = L2norm(F(x))
};

template <typename T>
struct MlpActs {
  NormActs<T> in;      // [in norm] (scaled by c in place for LNS)
  T* pre = nullptr;    // (N, I_in) fc1 output (gated: [value | gate]); [sphere] times s_uv; see pre_saved
  // [GELU, fused forward] what `pre` holds after the forward: the fc1 output, or GELU's derivative at it (the
  // backward's epilogue then multiplies by it; kernels/linear_gelu.h)
  kernels::GeluSaved pre_saved = kernels::GeluSaved::PreActivation;
  T* pre_raw = nullptr;  // [sphere] (N, I_in) fc1 output before s_uv
  T* act = nullptr;    // (N, I) activation output, fc2's input; see act_rounded
  // [GELU, SwiGLU, GeGLU; bf16 products that take rounded operands] `act` holds the activation rounded to bf16, (N, I)
  // uint16 in the first half of its floats' bytes: only fc2's products read it, and they would round it
  // (kernels/linear_gelu.h, linear_glu.h)
  bool act_rounded = false;
  T* out = nullptr;    // (N,C) F(x)
  NormActs<T> out_norm;  // [out norm]
  T* resid = nullptr;  // (N,C) s * x + g * out(F(x)); [sphere] as for attention
  NormActs<T> after;   // [after norm]; [sphere] the sub-layer's output
  NormActs<T> unit_x, unit_f;  // [sphere]
};

template <typename T>
struct BlockActs {
  AttentionActs<T> attn;
  AttentionActs<T> cross;  // [cross_attention]
  MlpActs<T> mlp;
  const T* output = nullptr;  // (N,C) the block's output (mlp.after.out or mlp.resid)
};

// Working memory of block_backward, shared by all blocks of a stack (the backward walks them one at a time).
template <typename T>
struct BlockScratch {
  T* d_other = nullptr;  // (N,C) the second stream-gradient buffer (Post-LN norms ping-pong with it)
  T* d_in = nullptr;     // (N,C) gradient of F's input when an input norm follows
  T* d_qkv = nullptr;    // (N, Q+2K): fused dqkv, or dq (N,Q) | dk (N,K) | dv (N,K); cross: dk, dv are (Nc,K)
  T* d_qk_pre = nullptr; // [qk_norm] (N, Q+K), [hybrid] (N, Q+2K): gradients of the q/k(/v) projections' outputs
  T* d_y = nullptr;      // (N,Q)
  T* d_gate = nullptr;   // [attn_gate] (N,Q) d loss / d (inp W_g^T)
  T* d_act = nullptr;    // (N,I) [gated MLP, double]
  T* d_pre = nullptr;    // (N, I_in)
  T* d_branch = nullptr; // (N,C) [scaled, gated or out-normed sub-layers] d loss / d out(F); [sphere] d resid
  T* d_f = nullptr;      // (N,C) [out norm, sphere] d loss / d F
  T* attention = nullptr;  // attention kernels' work space, forward and backward
  T* d_context = nullptr;  // [cross_attention] (Nc,C) accumulates over all blocks
  T* d_first_v = nullptr;  // [value_residual] (N,K) d loss / d V_1, accumulated by blocks 2..L, read by block 1
};

// Sizes in elements, for the carving code; a (T*)nullptr base counts, a real base binds. `index` is the
// block's (0-based) place in the stack: Mix-LN and LNS blocks differ with it.
template <typename T>
long carve_block_acts(BlockActs<T>& a, T* base, const ModelConfig& config, const BlockDims& d, int index);
template <typename T>
long carve_block_scratch(BlockScratch<T>& s, T* base, const ModelConfig& config, const BlockDims& d);
// Elements of the attention kernels' work space (BlockInputs::attention_scratch) for these shapes.
size_t block_attention_scratch_size(const ModelConfig& config, const BlockDims& d);

// What every block of a stack shares in one forward/backward.
template <typename T>
struct BlockInputs {
  const ModelConfig* config = nullptr;
  BlockDims dims;
  const T* rope_cos = nullptr;  // (T, D/2) [RoPE]
  const T* rope_sin = nullptr;
  const T* context = nullptr;   // (Nc,C) [cross_attention]
  T* first_v = nullptr;         // (N,K) [value_residual] the first block's values: written by block 0's forward
  T* attention_scratch = nullptr;
  LinearSource::Work* linear_work = nullptr;  // for weights read through a LinearSource
  // The parameters rounded to bf16 (Model::rounded_params_to_write), where they are current; nullptr otherwise.
  // params_base: the arena they mirror, element for element.
  const uint16_t* rounded_params = nullptr;
  const T* params_base = nullptr;
  // The backward only: where the weight-gradient products leave their rows' sums of squares (model/grad_squares.h),
  // for the gradient arena that starts at grads_base; nullptr: none taken.
  GradSquares* grad_squares = nullptr;
  const T* grads_base = nullptr;
};

// A weight of the arena as the bf16 products read it: its rounded copy where BlockInputs has one, else nullptr
// (the products round it themselves).
template <typename T>
const uint16_t* rounded_weight(const BlockInputs<T>& in, const T* weight) {
  return in.rounded_params != nullptr && weight != nullptr ? in.rounded_params + (weight - in.params_base) : nullptr;
}

// Where a weight-gradient product that writes the last of `grad` in this backward leaves its rows' sums of squares
// (kernels/linear.h: dweight_squares), or nullptr.
template <typename T>
double* weight_squares(const BlockInputs<T>& in, const T* grad) {
  return in.grad_squares != nullptr && grad != nullptr ? in.grad_squares->rows_of(grad - in.grads_base) : nullptr;
}

// x (N,C) -> a.output (N,C); fills a. For a forward-only stack one BlockActs may serve every block in
// turn: x may be the previous block's output in the same BlockActs (it is read before it is overwritten).
template <typename T>
void block_forward(BlockActs<T>& a, const T* x, const BlockTensors<T>& w, const BlockInputs<T>& in, int index);

// d_stream (N,C): on entry d loss / d (block output); on exit d loss / d x. Accumulates (+=) into the
// block's parameter gradients g (zeroed once by the caller) and into s.d_context. x and a as in the forward.
// The gradient may end in s.d_other: the function swaps the two pointers so that d_stream names it.
template <typename T>
void block_backward(T*& d_stream, BlockScratch<T>& s, const BlockTensors<T>& g, const BlockActs<T>& a, const T* x,
                    const BlockTensors<T>& w, const BlockInputs<T>& in, int index);

// One sub-layer's branch alone, for stacks that do the residual themselves (hyper-connections, model/hyper.h):
// T(h) = out(F(in(h) * c)), without the residual and the after norm. The forward fills the sub-layer's
// activations in a and returns T(h) (N,C); the backward takes d_branch = d loss / d T(h), adds (+=)
// d loss / d h into dh (N,C) and accumulates into the sub-layer's parameter gradients g. Self-attention and
// MLP only; block_forward / block_backward are these plus the residual of the config's placement.
template <typename T>
const T* sublayer_branch_forward(BlockActs<T>& a, Sublayer which, const T* h, const BlockTensors<T>& w,
                                 const BlockInputs<T>& in, int index);
template <typename T>
void sublayer_branch_backward(T* dh, BlockScratch<T>& s, const BlockTensors<T>& g, const BlockActs<T>& a,
                              Sublayer which, const T* d_branch, const T* h, const BlockTensors<T>& w,
                              const BlockInputs<T>& in, int index);

// The config's norm kind (LayerNorm, RMSNorm, DyT, Derf) over N rows of C: forward fills n; backward
// accumulates (+=) into dx and the norm's parameter gradients g. Used for the final norm too.
template <typename T>
long carve_norm_acts(NormActs<T>& n, T* base, const ModelConfig& c, long N);
template <typename T>
void norm_forward(NormActs<T>& n, const T* x, const NormTensors<T>& w, const ModelConfig& c, long N);
template <typename T>
void norm_backward(T* dx, const NormTensors<T>& g, const T* dout, const T* x, const NormTensors<T>& w,
                   const NormActs<T>& n, const ModelConfig& c, long N);

}  // namespace blocklab
