#include "model/parameters.h"

#include <cmath>

#include "util/error.h"

namespace blocklab {

namespace {

// Every parameter of a config, in table order: put(name, shape, role, block, part, sublayer). One list serves the
// table and the allocation-free count. Inside a block, `in` names the sub-layer whose tensors are being added.
template <typename Add>
void for_each_parameter(const ModelConfig& config, Add&& put) {
  std::optional<Sublayer> in;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamRole role, int block,
                 LinearPart part = LinearPart::None) { put(std::move(name), std::move(shape), role, block, part, in); };
  const int64_t C = config.width, V = config.vocab, T = config.seq_len, D = config.head_size();
  const int64_t Q = config.q_dim(), K = config.kv_dim(), I = config.mlp_hidden();
  const bool sphere = config.stream() == ResidualStream::Sphere;
  // A norm of `kind` over rows of `width`: weight, bias, DyT/Derf's alpha, Derf's shift.
  auto add_norm_of = [&](const std::string& prefix, NormKind kind, int64_t width, int block) {
    add(prefix + ".weight", {width}, ParamRole::NormWeight, block);
    if (kind != NormKind::RMSNorm) add(prefix + ".bias", {width}, ParamRole::NormBias, block);
    if (kind == NormKind::DyT || kind == NormKind::Derf) add(prefix + ".alpha", {1}, ParamRole::NormAlpha, block);
    if (kind == NormKind::Derf) add(prefix + ".shift", {1}, ParamRole::NormShift, block);
  };
  auto add_norm = [&](const std::string& prefix, int block) { add_norm_of(prefix, config.norm, C, block); };
  // The norms and residual terms of one sub-layer around its F (sub: "attn", "cross", "mlp").
  auto add_sublayer_norms = [&](const std::string& p, const std::string& norm_name, const std::string& sub,
                                const SublayerPlan& plan, int block) {
    if (plan.in_norm || plan.after_norm) add_norm(p + "." + norm_name, block);
    if (plan.out_norm) add_norm(p + "." + sub + "_out_norm", block);
    if (plan.learned_scale) add(p + "." + sub + "_omega", {C}, ParamRole::ResidualScale, block);
  };
  auto add_linear = [&](const std::string& prefix, int64_t out, int64_t in, bool bias, int block, LinearPart part) {
    add(prefix + ".weight", {out, in}, ParamRole::LinearWeight, block, part);
    if (bias) add(prefix + ".bias", {out}, ParamRole::LinearBias, block);
  };
  // Hyper-connections' mixing of one sub-layer (sub: "attn", "mlp").
  auto add_hyper = [&](const std::string& p, const std::string& sub, int block) {
    if (!config.hyper()) return;
    const int64_t n = config.residual_streams;
    const std::string h = p + "." + sub + "_hc.";
    add(h + "alpha_in", {n}, ParamRole::HyperInput, block);
    add(h + "alpha_res", {n, n}, ParamRole::HyperResidual, block);
    add(h + "beta", {n}, ParamRole::HyperOutput, block);
    if (!config.hc_dynamic) return;
    add_norm(h + "norm", block);
    add(h + "w_in", {C}, ParamRole::HyperDynamic, block);
    add(h + "w_res", {C, n}, ParamRole::HyperDynamic, block);
    add(h + "w_beta", {C}, ParamRole::HyperDynamic, block);
    add(h + "scale_alpha", {config.stream() == ResidualStream::ManifoldHyper ? 2 : 1}, ParamRole::HyperScale, block);
    add(h + "scale_beta", {1}, ParamRole::HyperScale, block);
  };
  add("tok_emb.weight", {V, C}, ParamRole::Embedding, -1, LinearPart::TokenEmbedding);
  if (config.positions == Positions::Learned)
    add("pos_emb.weight", {T, C}, ParamRole::Embedding, -1, LinearPart::PositionEmbedding);
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l);
    const SublayerPlan plan = config.sublayer_plan(l, Sublayer::Attention);
    in.reset();
    if (plan.gate) add(p + ".rezero_alpha", {1}, ParamRole::Gate, l);
    in = Sublayer::Attention;
    if (sphere) add(p + ".attn_alpha", {C}, ParamRole::SphereScale, l);
    add_hyper(p, "attn", l);
    add_sublayer_norms(p, "norm1", "attn", plan, l);
    if (config.qkv == QkvLayout::Fused) {
      add_linear(p + ".attn.qkv", Q + 2 * K, C, config.qkv_bias, l, LinearPart::QKV);
    } else {
      add_linear(p + ".attn.q", Q, C, config.qkv_bias, l, LinearPart::Query);
      add_linear(p + ".attn.k", K, C, config.qkv_bias, l, LinearPart::Key);
      add_linear(p + ".attn.v", K, C, config.qkv_bias, l, LinearPart::Value);
    }
    if (config.qk_norm) {  // RMSNorm over D, whatever the config's norm kind (Qwen3)
      add_norm_of(p + ".attn.q_norm", NormKind::RMSNorm, D, l);
      add_norm_of(p + ".attn.k_norm", NormKind::RMSNorm, D, l);
    }
    if (config.qkv_norm()) {  // HybridNorm: the config's norm kind over D
      add_norm_of(p + ".attn.q_norm", config.norm, D, l);
      add_norm_of(p + ".attn.k_norm", config.norm, D, l);
      add_norm_of(p + ".attn.v_norm", config.norm, D, l);
    }
    if (sphere) add(p + ".attn.s_qk", {Q}, ParamRole::SphereScale, l);
    if (config.attn_gate) add_linear(p + ".attn.gate", Q, C, false, l, LinearPart::Gate);
    if (config.value_residual && l > 0) add(p + ".attn.value_lambda", {2}, ParamRole::ValueMix, l);
    add_linear(p + ".attn.proj", C, Q, config.proj_bias, l, LinearPart::Output);
    if (config.cross_attention) {
      in = Sublayer::Cross;
      add_sublayer_norms(p, "cross_norm", "cross", config.sublayer_plan(l, Sublayer::Cross), l);
      add_linear(p + ".cross.q", Q, C, config.qkv_bias, l, LinearPart::Query);
      add_linear(p + ".cross.k", K, C, config.qkv_bias, l, LinearPart::Key);
      add_linear(p + ".cross.v", K, C, config.qkv_bias, l, LinearPart::Value);
      add_linear(p + ".cross.proj", C, Q, config.proj_bias, l, LinearPart::Output);
    }
    in = Sublayer::Mlp;
    add_hyper(p, "mlp", l);
    add_sublayer_norms(p, "norm2", "mlp", config.sublayer_plan(l, Sublayer::Mlp), l);
    if (sphere) add(p + ".mlp_alpha", {C}, ParamRole::SphereScale, l);
    add_linear(p + ".mlp.fc1", config.mlp_in_width(), C, config.mlp_bias, l, LinearPart::Fc1);
    if (sphere) add(p + ".mlp.s_uv", {config.mlp_in_width()}, ParamRole::SphereScale, l, LinearPart::Fc1);
    add_linear(p + ".mlp.fc2", C, I, config.mlp_bias, l, LinearPart::Fc2);
  }
  in.reset();
  if (config.has_final_norm()) add_norm("final_norm", -1);
  if (!config.tie_head) add("head.weight", {V, C}, ParamRole::LinearWeight, -1, LinearPart::Head);  // no bias
  if (sphere) add("head.s_z", {V}, ParamRole::SphereScale, -1);
}

}  // namespace

ParameterTable::ParameterTable(const ModelConfig& config) {
  for_each_parameter(config, [&](std::string name, std::vector<int64_t> shape, ParamRole role, int block,
                                 LinearPart part, std::optional<Sublayer> sublayer) {
    add(std::move(name), std::move(shape), role, block, part, sublayer);
  });
}

ParameterTable::Count ParameterTable::count(const ModelConfig& config) {
  Count c;
  for_each_parameter(config, [&](const std::string&, const std::vector<int64_t>& shape, ParamRole, int, LinearPart,
                                 std::optional<Sublayer>) {
    double numel = 1;
    for (int64_t d : shape) numel *= static_cast<double>(d);
    c.tensors += 1;
    c.elements += std::ceil(numel / 16) * 16;  // as add() aligns each tensor
  });
  return c;
}

void ParameterTable::add(std::string name, std::vector<int64_t> shape, ParamRole role, int block, LinearPart part,
                         std::optional<Sublayer> sublayer) {
  long numel = 1;
  for (int64_t d : shape) numel *= d;
  index_.emplace(name, specs_.size());
  specs_.push_back(ParamSpec{std::move(name), std::move(shape), role, total_, numel, block, part, sublayer});
  // Each tensor starts on a 64-byte boundary (16 floats) so kernels see aligned rows.
  total_ += (numel + 15) / 16 * 16;
}

const ParamSpec* ParameterTable::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &specs_[it->second];
}

const ParamSpec& ParameterTable::at(std::string_view name) const {
  const ParamSpec* spec = find(name);
  if (spec == nullptr) throw Error("no parameter named '" + std::string(name) + "'");
  return *spec;
}

template <typename T>
ModelTensors<T> bind_tensors(const ParameterTable& table, const ModelConfig& config, T* arena) {
  auto optional = [&](const std::string& name) -> T* {
    const ParamSpec* s = table.find(name);
    return s == nullptr ? nullptr : arena + s->offset;
  };
  auto norm = [&](const std::string& p) {
    return NormTensors<T>{optional(p + ".weight"), optional(p + ".bias"), optional(p + ".alpha"),
                          optional(p + ".shift")};
  };
  auto linear = [&](const std::string& p) { return LinearTensors<T>{optional(p + ".weight"), optional(p + ".bias")}; };
  auto attention = [&](const std::string& p, const std::string& norm_name, const std::string& sub) {
    AttentionTensors<T> a;
    a.norm = norm(p + norm_name);
    a.out_norm = norm(p + sub + "_out_norm");
    a.omega = optional(p + sub + "_omega");
    a.qkv = linear(p + sub + ".qkv");
    a.q = linear(p + sub + ".q");
    a.k = linear(p + sub + ".k");
    a.v = linear(p + sub + ".v");
    a.proj = linear(p + sub + ".proj");
    a.gate = linear(p + sub + ".gate");
    a.value_lambda = optional(p + sub + ".value_lambda");
    a.q_norm = norm(p + sub + ".q_norm");
    a.k_norm = norm(p + sub + ".k_norm");
    a.v_norm = norm(p + sub + ".v_norm");
    a.s_qk = optional(p + sub + ".s_qk");
    return a;
  };
  ModelTensors<T> t{};
  t.tok_emb = arena + table.at("tok_emb.weight").offset;
  t.pos_emb = optional("pos_emb.weight");
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l);
    BlockTensors<T> b;
    b.attn = attention(p, ".norm1", ".attn");
    b.cross = attention(p, ".cross_norm", ".cross");
    b.mlp = MlpTensors<T>{norm(p + ".norm2"), norm(p + ".mlp_out_norm"), optional(p + ".mlp_omega"),
                          linear(p + ".mlp.fc1"), linear(p + ".mlp.fc2")};
    b.rezero_alpha = optional(p + ".rezero_alpha");
    b.attn.sphere_alpha = optional(p + ".attn_alpha");
    b.mlp.sphere_alpha = optional(p + ".mlp_alpha");
    b.mlp.s_uv = optional(p + ".mlp.s_uv");
    auto hyper = [&](const std::string& h) {
      return HyperTensors<T>{optional(h + "alpha_in"), optional(h + "alpha_res"), optional(h + "beta"), norm(h + "norm"),
                             optional(h + "w_in"),     optional(h + "w_res"),     optional(h + "w_beta"),
                             optional(h + "scale_alpha"), optional(h + "scale_beta")};
    };
    b.attn_hc = hyper(p + ".attn_hc.");
    b.mlp_hc = hyper(p + ".mlp_hc.");
    t.blocks.push_back(b);
  }
  t.final_norm = norm("final_norm");
  t.head_weight = config.tie_head ? t.tok_emb : arena + table.at("head.weight").offset;
  t.head_scale = optional("head.s_z");
  return t;
}

template ModelTensors<float> bind_tensors<float>(const ParameterTable&, const ModelConfig&, float*);
template ModelTensors<double> bind_tensors<double>(const ParameterTable&, const ModelConfig&, double*);

}  // namespace blocklab
