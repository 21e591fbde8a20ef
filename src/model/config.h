#pragma once
// The architecture of a transformer block (BlockConfig) and of a stack of them (ModelConfig). Variants are
// enums and flags switched inside one block_forward / block_backward, not a class per variant; presets
// (`seed`, `gpt2`, `qwen3`, `sd`) are plain functions that set them.
//
// A block is a list of sub-layers (self-attention, optional cross-attention, MLP); each sub-layer is
//   y = after( s * x + g * out( F( in(x) * c ) ) )
// where `in`, `out` and `after` are an optional norm each, s a residual scale (1, DeepNorm's constant,
// Admin's learned per-channel omega), g a branch gate (1, ReZero's learned alpha) and c LNS's 1/sqrt(l).
// A placement (docs/placements.md) is a small table of these per sub-layer (sublayer_plan below):
//   post      after = Norm                  pre       in = Norm (+ final norm)
//   peri      in = out = Norm (+ final)     reordered out = Norm (+ final)
//   deepnorm  after = Norm, s = (2N)^(1/4)  admin     after = Norm, s = omega (learned, per channel)
//   rezero    g = alpha (learned, per block, 0 at init), no norms     tfixup  no norms (init does the work)
//   mix       post for blocks l <= floor(N/4), pre after them (+ final)
//   lns       in = Norm, c = 1/sqrt(l) (+ final)
//   hybrid    HybridNorm: attention with no norm on x but Q, K, V normalised per head; the MLP's input
//             normalised and its residual taken from the normalised input, y = n + F(n), n = Norm(h)
//             (residual_from_norm) (+ final)
//   hybrid_star  hybrid, except block 0 is Pre-LN (attention in = Norm, still with the Q/K/V norms; MLP in = Norm)
//   hc, mhc   hyper-connections: in = Norm (+ final), the residual stream widened to n = residual_streams
//             streams mixed around each sub-layer (model/hyper.h); the block gives only each sub-layer's
//             branch T(h) = F(Norm(h)), the stack does the mixing
//   ngpt      nGPT (the normalized transformer): no norm layers, y = L2norm(A + |alpha| * (L2norm(F(x)) - A)),
//             A = L2norm(x), alpha a learned (C) vector per sub-layer (normalized_update); per-head unit q, k
//             times s_qk, fc1's outputs times s_uv, logits times s_z; weights renormalised after every
//             optimizer step (Model::normalize_weights)
#include <cmath>
#include <string>
#include <vector>

namespace blocklab {

enum class NormPlacement { Post, Pre, Peri, Reordered, DeepNorm, Admin, ReZero, TFixup, Mix, LNS, Hybrid, HybridStar,
                           Hc, Mhc, NGPT };
// DyT: weight * tanh(alpha * x) + bias in a norm's place; Derf: weight * erf(alpha * x + shift) + bias
// The residual stream, one axis of a design (model/designs.h): one stream added to (every design but these),
// n streams mixed around each sub-layer (hc; mhc with doubly stochastic mixing, model/hyper.h), or one stream
// kept on the unit sphere (ngpt, model/sphere.h).
enum class ResidualStream { Single, Hyper, ManifoldHyper, Sphere };
enum class NormKind { LayerNorm, RMSNorm, DyT, Derf };
// Initialisation of the weights (Model::init_weights):
//   xavier    Linear weights Xavier-uniform (Glorot & Bengio; Xiong et al.), embeddings N(0, embed_init_std^2)
//   gpt2      Linear weights N(0, 0.02^2)
//   deepnorm  DeepNet (Wang et al. 2022), decoder-only: Xavier-normal, gain b = (8N)^(-1/4) on W_v, W_o, fc1,
//             fc2 (self- and cross-attention), gain 1 on W_q, W_k and the head
//   tfixup    T-Fixup (Huang et al. 2020), decoder rule: Xavier-uniform, then W_v, W_o, fc1, fc2 times
//             (9N)^(-1/4); embeddings N(0, C^-1) times (9N)^(-1/4)
//   auto      the scheme the placement ties (deepnorm -> deepnorm, tfixup -> tfixup), else the preset's base
enum class InitScheme { Auto, Xavier, GPT2, DeepNorm, TFixup };
enum class Positions { Learned, RoPE };  // a learned (T, C) table added to the embeddings, or rotary q/k
enum class MlpKind { Gelu, GeluTanh, SwiGLU, GeGLU };  // exact-erf GELU, tanh GELU, gated SiLU, gated GELU
enum class QkvLayout { Fused, Separate };  // one (Q+2K, C) projection [q | k | v], or three
// The precision of the linear layers' products (not an architecture key: no preset sets it). bf16 is mixed
// precision: GEMM operands rounded to bf16, float accumulation; weights, gradients, optimizer state, the
// residual stream, norms, attention, softmax and loss stay float (kernels/bf16_gemm.h). Double-precision
// models ignore it.
enum class Precision { Fp32, Bf16 };

struct BlockConfig {
  NormPlacement norm_placement = NormPlacement::Pre;
  NormKind norm = NormKind::LayerNorm;
  int width = 128;    // C
  int heads = 4;      // H query heads
  int kv_heads = 0;   // Hkv key/value heads (grouped-query attention); 0: = heads
  int head_dim = 0;   // D; 0: width / heads
  int mlp_ratio = 4;  // MLP hidden width I = mlp_ratio * C (a gated MLP's first layer is 2I wide)
  int mlp_width = 0;  // I when it is not a multiple of C (Hugging Face models' intermediate_size); 0: mlp_ratio * C
  MlpKind mlp = MlpKind::Gelu;
  QkvLayout qkv = QkvLayout::Fused;
  bool qkv_bias = true;   // biases of the q/k/v projections (self- and cross-attention)
  bool proj_bias = true;  // bias of the attention output projections
  bool mlp_bias = true;   // biases of the MLP layers
  bool qk_norm = false;   // RMSNorm over D on every q and k head before RoPE (Qwen3), weights (D)
  // Gated attention (Qiu et al. 2025): the self-attention's output, heads concatenated (N,Q), times
  // sigmoid(u W_g^T) element by element before the output projection; u is the attention's input (the
  // sub-layer's normalised input where the placement has an input norm, the stream otherwise), W_g (Q,C)
  // without bias. Cross-attention is not gated.
  bool attn_gate = false;
  // Value residual (ResFormer, Zhou et al. 2025): in blocks l >= 2 the self-attention's values are
  // V_l <- lambda1 V_l + lambda2 V_1, V_1 block 1's values (after its projection), lambda1, lambda2 learned
  // per block, both 0.5 at init; block 1 keeps its own values.
  bool value_residual = false;
  Positions positions = Positions::Learned;
  double rope_theta = 10000.0;  // RoPE base: inv_freq[i] = theta^(-2i/D)
  // A cross-attention sub-layer between self-attention and MLP (Stable Diffusion's BasicTransformerBlock):
  // queries from the stream, keys and values from a context sequence of context_len positions.
  bool cross_attention = false;
  double norm_eps = 1e-5;

  int kv_head_count() const { return kv_heads == 0 ? heads : kv_heads; }
  int head_size() const { return head_dim == 0 ? width / heads : head_dim; }
  int q_dim() const { return heads * head_size(); }         // Q = H * D
  int kv_dim() const { return kv_head_count() * head_size(); }  // K = Hkv * D
  int mlp_hidden() const { return mlp_width > 0 ? mlp_width : mlp_ratio * width; }  // I
  bool gated_mlp() const { return mlp == MlpKind::SwiGLU || mlp == MlpKind::GeGLU; }
  int mlp_in_width() const { return gated_mlp() ? 2 * mlp_hidden() : mlp_hidden(); }  // fc1's outputs
  // HybridNorm (hybrid, hybrid_star): the self-attention's Q, K, V each normalised per head (rows of D) by the
  // config's norm kind, before RoPE and before the value-residual mix (the design row's qkv_norm)
  bool qkv_norm() const;
  // The residual stream the design keeps (the design row's stream).
  ResidualStream stream() const;
};

// The sub-layers of a block, in order.
enum class Sublayer { Attention, Cross, Mlp };

// What one sub-layer of a block computes around its F (see the top of this file).
struct SublayerPlan {
  bool in_norm = false, out_norm = false, after_norm = false;
  double residual_scale = 1;   // s when constant (DeepNorm's a)
  bool learned_scale = false;  // s = omega, a learned (C) vector per sub-layer (Admin)
  bool gate = false;           // g = alpha, a learned scalar per block shared by its sub-layers (ReZero)
  double in_scale = 1;         // c (LNS: 1/sqrt(l))
  // HybridNorm's MLP: the residual adds F to the normalised input, y = in(x) + F(in(x)) (needs in_norm)
  bool residual_from_norm = false;
  // The sphere stream: y = U(A + |alpha| * (U(F(x)) - A)), A = U(x), U(v) = v / ||v||, alpha a learned (C)
  // vector; no norm layers (model/sphere.h)
  bool normalized_update = false;

  bool plain() const {
    return residual_scale == 1 && !learned_scale && !gate && in_scale == 1 && !out_norm && !normalized_update;
  }
};

struct ModelConfig : BlockConfig {
  std::string block = "seed";  // the preset the architecture keys started from
  int layers = 24;
  int vocab = 64;     // V
  int seq_len = 63;   // T, the longest sequence the model reads (the position table's length)
  int context_len = 0;  // cross-attention: the first context_len embedded positions form the context
  bool tie_head = false;  // logits = final stream @ tok_emb^T (no head.weight)
  InitScheme init = InitScheme::Auto;
  InitScheme base_init = InitScheme::Xavier;  // what auto means for placements without a scheme of their own
  double embed_init_std = 1.0;  // token/position embeddings ~ N(0, embed_init_std^2); 1.0 = nn.Embedding
  Precision precision = Precision::Fp32;
  // Hyper-connections (norm_placement hc or mhc; model/hyper.h): the expansion rate n, and whether the mixing
  // weights depend on the token (dynamic) or are learned constants only (static).
  int residual_streams = 4;
  bool hc_dynamic = true;

  // Hyper-connections of either kind (hc, mhc): the stack mixes n streams around each sub-layer.
  bool hyper() const { return stream() == ResidualStream::Hyper || stream() == ResidualStream::ManifoldHyper; }
  bool has_final_norm() const;
  // The plan of sub-layer `which` of block `index` (0-based; Mix-LN, LNS and HybridNorm* depend on it).
  // Every placement but hybrid and hybrid_star gives all sub-layers of a block the same plan.
  SublayerPlan sublayer_plan(int index, Sublayer which) const;
  // DeepNorm's residual scale a = (2N)^(1/4) and init gain b = (8N)^(-1/4) for N = layers.
  double deepnorm_alpha() const;
  double deepnorm_beta() const;
  // Admin's initial omega: sqrt((n+1)/ln(n+1) - 1), n = the number of residual sub-layers.
  double admin_omega_init() const;
  // The scheme init_weights applies: init, with auto resolved.
  InitScheme effective_init() const;
  // T-Fixup's scale (9N)^(-1/4).
  double tfixup_scale() const;

  // Throws Error naming the first invalid field or unsupported combination, in one line.
  void validate() const;
};

// Presets: set every architecture key (placement, norm, qkv layout, biases, q/k-norm, positions, MLP,
// cross-attention, eps, init, tied head) to the named block's; sizes (layers, width, heads, kv_heads,
// head_dim, mlp_ratio, vocab) are left as they are.
//   seed   Xiong et al.'s copy-task model: Pre-LN LayerNorm, fused qkv with biases, learned positions,
//          exact GELU, Xavier init, untied head
//   gpt2   Pre-LN LayerNorm, fused qkv with biases, learned positions, tanh GELU, N(0, 0.02) init, tied head
//   qwen3  RMSNorm (eps 1e-6), separate q/k/v/o without biases, per-head q/k RMSNorm, RoPE (theta 1e6),
//          SwiGLU, final norm, N(0, 0.02) init, untied head (set tie_head for the tied small models)
//   sd     Stable Diffusion 1.x BasicTransformerBlock: LayerNorm; self-attention (q/k/v without bias),
//          cross-attention over a context, GEGLU feed-forward; learned positions
void apply_block_preset(ModelConfig& config, const std::string& name);
const std::vector<std::string>& block_preset_names();

std::string to_string(NormPlacement);
std::string to_string(NormKind);
std::string to_string(InitScheme);
std::string to_string(Positions);
std::string to_string(MlpKind);
std::string to_string(QkvLayout);
std::string to_string(Precision);
// Parse from the names above; throw Error listing the accepted names otherwise.
NormPlacement parse_norm_placement(const std::string&);
NormKind parse_norm_kind(const std::string&);
InitScheme parse_init_scheme(const std::string&);
Positions parse_positions(const std::string&);
MlpKind parse_mlp_kind(const std::string&);
QkvLayout parse_qkv_layout(const std::string&);
Precision parse_precision(const std::string&);

}  // namespace blocklab
