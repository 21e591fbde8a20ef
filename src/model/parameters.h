#pragma once
// The parameter table: ONE list of {name, shape, role} from which the parameter, gradient and Adam
// moment arenas are all carved at the same offsets. Names follow PyTorch conventions
// (e.g. "blocks.3.mlp.fc2.weight") so weights map 1:1 to state_dicts and safetensors files.
//
//   tok_emb.weight (V,C)   pos_emb.weight (T,C) [learned positions]
//   blocks.N.norm1.*                    norm of the attention sub-layer (its input for Pre-LN, output for Post-LN)
//   blocks.N.attn_out_norm.*            [peri, reordered] norm of the attention's output
//   blocks.N.attn_omega (C)             [admin] learned residual scale;  blocks.N.rezero_alpha (1) [rezero]
//   blocks.N.attn.qkv.* (Q+2K, C)       fused [q | k | v]; or attn.q (Q,C), attn.k (K,C), attn.v (K,C)
//   blocks.N.attn.q_norm.weight (D), attn.k_norm.weight (D)   [qk_norm]
//   blocks.N.attn.{q,k,v}_norm.{weight,bias,alpha,shift} (D)   [hybrid, hybrid_star] the config's norm kind
//   blocks.N.attn.gate.weight (Q,C)     [attn_gate] no bias
//   blocks.N.attn.value_lambda (2)      [value_residual, blocks N >= 1] lambda1, lambda2
//   blocks.N.attn.proj.* (C, Q)
//   blocks.N.cross_norm.*, cross.q (Q,C), cross.k (K,C), cross.v (K,C), cross.proj (C,Q)   [cross_attention]
//   blocks.N.norm2.*                    norm of the MLP sub-layer; mlp_out_norm.*, mlp_omega as for attention
//   a norm's tensors: weight (C), bias (C) [layernorm, dyt, derf], alpha (1) [dyt, derf], shift (1) [derf]
//   blocks.N.mlp.fc1.* (I or 2I, C)     a gated MLP's rows are [value | gate]
//   blocks.N.mlp.fc2.* (C, I)
//   blocks.N.attn_hc.*, blocks.N.mlp_hc.*   [hc, mhc] the stream mixing around each sub-layer (model/hyper.h):
//     alpha_in (n) A_m, alpha_res (n,n) A_r [i][j], beta (n) B; dynamic: norm.*, w_in (C), w_res (C,n),
//     w_beta (C), scale_alpha (1; mhc: 2, input and residual), scale_beta (1)
//   blocks.N.attn_alpha (C), blocks.N.mlp_alpha (C)   [sphere stream] the eigen learning rates alpha_A, alpha_M
//   blocks.N.attn.s_qk (Q), blocks.N.mlp.s_uv (I or 2I), head.s_z (V)   [sphere stream] scales of q/k, fc1, logits
//   final_norm.* [Pre-LN]   head.weight (V,C) [untied]
// Q = H*D, K = Hkv*D. Biases and norm biases exist as the config's flags and norm kind say.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/config.h"

namespace blocklab {

enum class ParamRole {
  LinearWeight,
  LinearBias,
  NormWeight,
  NormBias,
  NormAlpha,      // DyT's and Derf's alpha
  NormShift,      // Derf's shift
  ResidualScale,  // Admin's omega
  Gate,           // ReZero's alpha
  ValueMix,       // value residual's lambda1, lambda2
  HyperInput,     // hyper-connections' A_m: e_(k mod n) for the k-th sub-layer
  HyperResidual,  // A_r: the identity
  HyperOutput,    // B: ones
  HyperDynamic,   // W_m, W_r, W_b: zero
  HyperScale,     // s_a, s_b: 0.01
  SphereScale,    // the sphere stream's alpha, s_qk, s_uv, s_z, stored at their `scale` (model/sphere.h)
  Embedding
};

// What a weight is in the model: a linear weight's layer in its block (init schemes scale some of them: DeepNorm,
// T-Fixup; the sphere stream normalises some by rows, others by columns), an embedding table, or (s_uv) the layer
// whose outputs a learned scale multiplies.
enum class LinearPart { None, Query, Key, Value, QKV, Output, Fc1, Fc2, Head, Gate, TokenEmbedding, PositionEmbedding };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  ParamRole role;
  long offset = 0;  // element offset in every arena
  long numel = 0;
  int block = -1;   // block index for blocks.N.*, -1 otherwise
  LinearPart part = LinearPart::None;
  std::optional<Sublayer> sublayer;    // the sub-layer a block tensor belongs to; none for the block's own (ReZero)
};

class ParameterTable {
 public:
  explicit ParameterTable(const ModelConfig& config);
  // How many tensors and (aligned) elements the table of a config has, without building it.
  struct Count {
    double tensors = 0, elements = 0;
  };
  static Count count(const ModelConfig& config);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  long total() const { return total_; }
  // nullptr when absent.
  const ParamSpec* find(std::string_view name) const;
  // Throws Error when absent.
  const ParamSpec& at(std::string_view name) const;

 private:
  void add(std::string name, std::vector<int64_t> shape, ParamRole role, int block, LinearPart part,
           std::optional<Sublayer> sublayer);
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, size_t> index_;
  long total_ = 0;
};

// A norm's parameters: weight (C), bias (C) or nullptr (RMSNorm), alpha (1) for DyT and Derf, shift (1) for Derf.
template <typename T>
struct NormTensors {
  T* weight = nullptr;
  T* bias = nullptr;
  T* alpha = nullptr;
  T* shift = nullptr;
};

// A linear layer whose weight lives outside the arenas, e.g. memory-mapped in its stored dtype (BF16) in a
// Hugging Face shard; forward only, float only. src/hf/ implements it over its weight files.
class LinearSource {
 public:
  // Work space the caller of a forward pass owns and every source of that pass shares (grown as needed),
  // so that memory does not grow with the number of layers.
  struct Work {
    std::vector<float> scratch, part;
  };
  virtual ~LinearSource() = default;
  // out (N, out) = inp (N, in) @ W^T, overwritten (no bias).
  virtual void forward(float* out, const float* inp, int N, Work& work) const = 0;
};

// A linear layer's parameters: weight (out, in) in an arena, or a source to read it from; bias (out) or nullptr.
template <typename T>
struct LinearTensors {
  T* weight = nullptr;
  T* bias = nullptr;
  const LinearSource* source = nullptr;  // set instead of weight for weights read in place (forward only)
};

// An attention sub-layer: fused qkv, or q/k/v (cross-attention: always separate); nullptr where absent.
template <typename T>
struct AttentionTensors {
  NormTensors<T> norm;      // in or after norm, as the placement says
  NormTensors<T> out_norm;  // [peri, reordered]
  T* omega = nullptr;       // (C) [admin]
  LinearTensors<T> qkv, q, k, v, proj;
  LinearTensors<T> gate;  // (Q,C) [attn_gate, self-attention only]
  T* value_lambda = nullptr;  // (2) [value_residual, blocks after the first]
  NormTensors<T> q_norm;  // (D) per-head norms: [qk_norm] RMSNorm weight only; [hybrid, hybrid_star] the
  NormTensors<T> k_norm;  // config's norm kind (weight, bias, alpha, shift as it has them)
  NormTensors<T> v_norm;  // [hybrid, hybrid_star]
  T* sphere_alpha = nullptr;  // (C) [sphere stream, self-attention] alpha_A (stored)
  T* s_qk = nullptr;          // (Q) [sphere stream, self-attention] (stored)
};

template <typename T>
struct MlpTensors {
  NormTensors<T> norm;
  NormTensors<T> out_norm;
  T* omega = nullptr;
  LinearTensors<T> fc1, fc2;
  T* sphere_alpha = nullptr;  // (C) [sphere stream] alpha_M (stored)
  T* s_uv = nullptr;          // (I_in) [sphere stream] (stored)
};

// The stream mixing of one sub-layer under hyper-connections (model/hyper.h); nullptr where absent.
template <typename T>
struct HyperTensors {
  T* alpha_in = nullptr;   // (n) A_m
  T* alpha_res = nullptr;  // (n,n) A_r, [i][j]: from stream i to stream j
  T* beta = nullptr;       // (n) B
  NormTensors<T> norm;     // [dynamic] the norm of each stream
  T* w_in = nullptr;       // [dynamic] (C) W_m
  T* w_res = nullptr;      // [dynamic] (C,n) W_r
  T* w_beta = nullptr;     // [dynamic] (C) W_b
  T* scale_alpha = nullptr;  // [dynamic] (1) s_a; mhc: (2) the input's and the residual's
  T* scale_beta = nullptr;   // [dynamic] (1) s_b
};

// Typed pointers into one arena (parameters or gradients or a moment), resolved once by name.
template <typename T>
struct BlockTensors {
  AttentionTensors<T> attn;
  AttentionTensors<T> cross;  // all nullptr without cross-attention
  MlpTensors<T> mlp;
  T* rezero_alpha = nullptr;  // (1) [rezero]
  HyperTensors<T> attn_hc, mlp_hc;  // [hc, mhc]
};

template <typename T>
struct ModelTensors {
  T* tok_emb;  // (V, C)
  T* pos_emb;  // (T, C), nullptr with RoPE
  std::vector<BlockTensors<T>> blocks;
  NormTensors<T> final_norm;  // Pre-LN only, else nullptr
  T* head_weight;             // (V, C); tok_emb when tied
  T* head_scale = nullptr;    // (V) [sphere stream] s_z (stored)
};

template <typename T>
ModelTensors<T> bind_tensors(const ParameterTable& table, const ModelConfig& config, T* arena);

}  // namespace blocklab
