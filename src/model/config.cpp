#include "model/config.h"

#include <array>
#include <cmath>
#include <utility>

#include "model/designs.h"
#include "util/error.h"

namespace blocklab {

namespace {

// Every enum's names in one table each, so that printing and parsing cannot disagree.
template <typename E, size_t N>
struct EnumNames {
  const char* what;
  std::array<std::pair<E, const char*>, N> names;

  std::string show(E e) const {
    for (const auto& [value, name] : names)
      if (value == e) return name;
    return "?";
  }
  E parse(const std::string& s) const {
    std::string accepted;
    for (const auto& [value, name] : names) {
      if (s == name) return value;
      accepted += (accepted.empty() ? "" : ", ") + std::string(name);
    }
    throw Error(std::string("unknown ") + what + " '" + s + "' (expected one of: " + accepted + ")");
  }
};

constexpr EnumNames<NormKind, 4> kNorms{"norm",
                                        {{{NormKind::LayerNorm, "layernorm"},
                                          {NormKind::RMSNorm, "rmsnorm"},
                                          {NormKind::DyT, "dyt"},
                                          {NormKind::Derf, "derf"}}}};
constexpr EnumNames<InitScheme, 5> kInits{"init",
                                         {{{InitScheme::Auto, "auto"},
                                           {InitScheme::Xavier, "xavier"},
                                           {InitScheme::GPT2, "gpt2"},
                                           {InitScheme::DeepNorm, "deepnorm"},
                                           {InitScheme::TFixup, "tfixup"}}}};
constexpr EnumNames<Positions, 2> kPositions{"positions", {{{Positions::Learned, "learned"}, {Positions::RoPE, "rope"}}}};
constexpr EnumNames<MlpKind, 4> kMlps{"mlp",
                                      {{{MlpKind::Gelu, "gelu"},
                                        {MlpKind::GeluTanh, "gelu_tanh"},
                                        {MlpKind::SwiGLU, "swiglu"},
                                        {MlpKind::GeGLU, "geglu"}}}};
constexpr EnumNames<QkvLayout, 2> kQkv{"qkv", {{{QkvLayout::Fused, "fused"}, {QkvLayout::Separate, "separate"}}}};
constexpr EnumNames<Precision, 2> kPrecisions{"precision", {{{Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}}}};

}  // namespace

void ModelConfig::validate() const {
  auto positive = [](const char* name, long v) {
    if (v <= 0) throw Error(std::string(name) + " must be positive, got " + std::to_string(v));
  };
  auto text = [](long v) { return std::to_string(v); };
  positive("layers", layers);
  positive("width", width);
  positive("heads", heads);
  positive("mlp_ratio", mlp_ratio);
  positive("vocab", vocab);
  positive("seq_len", seq_len);
  if (kv_heads < 0) throw Error("kv_heads must be >= 0 (0: as many as heads), got " + text(kv_heads));
  if (head_dim < 0) throw Error("head_dim must be >= 0 (0: width / heads), got " + text(head_dim));
  if (head_dim == 0 && width % heads != 0)
    throw Error("heads (" + text(heads) + ") must divide width (" + text(width) + ") unless head_dim is set");
  if (heads % kv_head_count() != 0)
    throw Error("kv_heads (" + text(kv_head_count()) + ") must divide heads (" + text(heads) + ")");
  // Sizes whose products must fit the int indices of the kernels; the int products themselves first.
  const double head = head_dim > 0 ? head_dim : static_cast<double>(width) / heads;
  if (static_cast<double>(mlp_ratio) * width > 1e9 || mlp_width > 1e9 || head * heads > 1e9)
    throw Error("model too large for 32-bit indices (width " + text(width) + ", mlp_ratio " + text(mlp_ratio) +
                ", heads " + text(heads) + ", head_dim " + text(head_dim) + ")");
  const double per_token = static_cast<double>(q_dim()) + 2.0 * kv_dim() + mlp_in_width() + width;
  if (per_token * seq_len > 2e9 || static_cast<double>(vocab) * width > 2e9 ||
      static_cast<double>(mlp_in_width()) * width > 2e9)
    throw Error("model too large for 32-bit indices (width " + text(width) + ", vocab " + text(vocab) + ")");
  if (qkv == QkvLayout::Fused && qk_norm)
    throw Error("qk_norm needs qkv = separate (the per-head q/k norms read contiguous q and k rows)");
  if (qkv_norm() && qk_norm)
    throw Error("qk_norm does not combine with norm_placement = " + to_string(norm_placement) +
                " (it normalises q, k and v per head itself)");
  if (qkv_norm() && cross_attention)
    throw Error("norm_placement = " + to_string(norm_placement) +
                " does not combine with cross_attention (HybridNorm defines self-attention and MLP sub-layers only)");
  if (positions == Positions::RoPE && head_size() % 2 != 0)
    throw Error("positions = rope needs an even head_dim, got " + text(head_size()));
  if (!(rope_theta > 1) || !std::isfinite(rope_theta)) throw Error("rope_theta must be a finite number > 1");
  if (cross_attention) {
    if (context_len <= 0 || context_len > seq_len)
      throw Error("cross_attention needs 1 <= context_len <= seq_len (" + text(seq_len) + "), got " +
                  text(context_len));
  }
  if (!(embed_init_std >= 0) || !std::isfinite(embed_init_std))
    throw Error("embed_init_std must be a finite number >= 0");
  if (!(norm_eps > 0) || !std::isfinite(norm_eps)) throw Error("norm_eps must be a finite number > 0");
  if (residual_streams < 1 || residual_streams > 64)
    throw Error("residual_streams must be in 1..64, got " + text(residual_streams));
  if (const auto check = design(norm_placement).check) check(*this);
  if (hyper() && cross_attention)
    throw Error("norm_placement = " + to_string(norm_placement) +
                " does not support cross_attention (the streams are mixed around self-attention and MLP only)");
}

bool BlockConfig::qkv_norm() const { return design(norm_placement).qkv_norm; }
ResidualStream BlockConfig::stream() const { return design(norm_placement).stream; }
bool ModelConfig::has_final_norm() const { return design(norm_placement).final_norm; }

SublayerPlan ModelConfig::sublayer_plan(int index, Sublayer which) const {
  return design(norm_placement).plan(*this, index, which);
}

double ModelConfig::deepnorm_alpha() const { return std::pow(2.0 * layers, 0.25); }
double ModelConfig::deepnorm_beta() const { return std::pow(8.0 * layers, -0.25); }

double ModelConfig::tfixup_scale() const { return std::pow(9.0 * layers, -0.25); }

// The sphere stream ignores the scheme: Model::init_weights gives it its own init whatever `init` says.
InitScheme ModelConfig::effective_init() const {
  if (init != InitScheme::Auto) return init;
  if (const InitScheme tied = design(norm_placement).init; tied != InitScheme::Auto) return tied;
  return base_init == InitScheme::Auto ? InitScheme::Xavier : base_init;
}

double ModelConfig::admin_omega_init() const {
  const double n = (cross_attention ? 3.0 : 2.0) * layers;
  return std::sqrt((n + 1) / std::log(n + 1) - 1);
}

const std::vector<std::string>& block_preset_names() {
  static const std::vector<std::string> names{"seed", "gpt2", "qwen3", "sd"};
  return names;
}

void apply_block_preset(ModelConfig& c, const std::string& name) {
  // Start every preset from the same architecture defaults, so that applying one never keeps a
  // previous preset's choices.
  auto base = [&c] {
    c.norm_placement = NormPlacement::Pre;
    c.norm = NormKind::LayerNorm;
    c.mlp = MlpKind::Gelu;
    c.qkv = QkvLayout::Fused;
    c.qkv_bias = c.proj_bias = c.mlp_bias = true;
    c.qk_norm = false;
    c.positions = Positions::Learned;
    c.rope_theta = 10000.0;
    c.cross_attention = false;
    c.norm_eps = 1e-5;
    c.tie_head = false;
    c.init = InitScheme::Auto;
    c.base_init = InitScheme::Xavier;
    c.embed_init_std = 1.0;
  };
  if (name == "seed") {
    base();
  } else if (name == "gpt2") {
    base();
    c.mlp = MlpKind::GeluTanh;
    c.tie_head = true;
    c.base_init = InitScheme::GPT2;
    c.embed_init_std = 0.02;
  } else if (name == "qwen3") {
    base();
    c.norm = NormKind::RMSNorm;
    c.norm_eps = 1e-6;
    c.qkv = QkvLayout::Separate;
    c.qkv_bias = c.proj_bias = c.mlp_bias = false;
    c.qk_norm = true;
    c.positions = Positions::RoPE;
    c.rope_theta = 1e6;
    c.mlp = MlpKind::SwiGLU;
    c.base_init = InitScheme::GPT2;
    c.embed_init_std = 0.02;
  } else if (name == "sd") {
    base();
    c.qkv = QkvLayout::Separate;
    c.qkv_bias = false;
    c.cross_attention = true;
    c.mlp = MlpKind::GeGLU;
  } else {
    std::string names;
    for (const auto& n : block_preset_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error("unknown block '" + name + "' (expected one of: " + names + ")");
  }
  c.block = name;
}

std::string to_string(NormPlacement p) { return design(p).name; }
std::string to_string(NormKind k) { return kNorms.show(k); }
std::string to_string(InitScheme s) { return kInits.show(s); }
std::string to_string(Positions p) { return kPositions.show(p); }
std::string to_string(MlpKind m) { return kMlps.show(m); }
std::string to_string(QkvLayout q) { return kQkv.show(q); }
std::string to_string(Precision p) { return kPrecisions.show(p); }

NormPlacement parse_norm_placement(const std::string& s) {
  std::string accepted;
  for (const Design& d : designs()) {
    if (s == d.name) return d.id;
    accepted += (accepted.empty() ? "" : ", ") + std::string(d.name);
  }
  throw Error("unknown norm_placement '" + s + "' (expected one of: " + accepted + ")");
}
NormKind parse_norm_kind(const std::string& s) { return kNorms.parse(s); }
InitScheme parse_init_scheme(const std::string& s) { return kInits.parse(s); }
Positions parse_positions(const std::string& s) { return kPositions.parse(s); }
MlpKind parse_mlp_kind(const std::string& s) { return kMlps.parse(s); }
QkvLayout parse_qkv_layout(const std::string& s) { return kQkv.parse(s); }
Precision parse_precision(const std::string& s) { return kPrecisions.parse(s); }

}  // namespace blocklab
