#include "model/parameters.h"

#include "util/error.h"

namespace blocklab {

ParameterTable::ParameterTable(const ModelConfig& config) {
  const int64_t C = config.width, V = config.vocab, T = config.seq_len, hidden = config.mlp_hidden();
  auto add_norm = [&](const std::string& prefix, int block) {
    add(prefix + ".weight", {C}, ParamRole::NormWeight, block);
    if (config.norm_has_bias()) add(prefix + ".bias", {C}, ParamRole::NormBias, block);
  };
  auto add_linear = [&](const std::string& prefix, int64_t out, int64_t in, int block) {
    add(prefix + ".weight", {out, in}, ParamRole::LinearWeight, block);
    add(prefix + ".bias", {out}, ParamRole::LinearBias, block);
  };
  add("tok_emb.weight", {V, C}, ParamRole::Embedding, -1);
  add("pos_emb.weight", {T, C}, ParamRole::Embedding, -1);
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l);
    add_norm(p + ".norm1", l);
    add_linear(p + ".attn.qkv", 3 * C, C, l);
    add_linear(p + ".attn.proj", C, C, l);
    add_norm(p + ".norm2", l);
    add_linear(p + ".mlp.fc1", hidden, C, l);
    add_linear(p + ".mlp.fc2", C, hidden, l);
  }
  if (config.has_final_norm()) add_norm("final_norm", -1);
  add("head.weight", {V, C}, ParamRole::LinearWeight, -1);  // untied, no bias
}

void ParameterTable::add(std::string name, std::vector<int64_t> shape, ParamRole role, int block) {
  long numel = 1;
  for (int64_t d : shape) numel *= d;
  index_.emplace(name, specs_.size());
  specs_.push_back(ParamSpec{std::move(name), std::move(shape), role, total_, numel, block});
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
  auto ptr = [&](const std::string& name) { return arena + table.at(name).offset; };
  auto optional = [&](const std::string& name) -> T* {
    const ParamSpec* s = table.find(name);
    return s == nullptr ? nullptr : arena + s->offset;
  };
  ModelTensors<T> t{};
  t.tok_emb = ptr("tok_emb.weight");
  t.pos_emb = ptr("pos_emb.weight");
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = "blocks." + std::to_string(l);
    t.blocks.push_back(BlockTensors<T>{
        ptr(p + ".norm1.weight"), optional(p + ".norm1.bias"), ptr(p + ".attn.qkv.weight"),
        ptr(p + ".attn.qkv.bias"), ptr(p + ".attn.proj.weight"), ptr(p + ".attn.proj.bias"),
        ptr(p + ".norm2.weight"), optional(p + ".norm2.bias"), ptr(p + ".mlp.fc1.weight"),
        ptr(p + ".mlp.fc1.bias"), ptr(p + ".mlp.fc2.weight"), ptr(p + ".mlp.fc2.bias")});
  }
  t.final_norm_weight = optional("final_norm.weight");
  t.final_norm_bias = optional("final_norm.bias");
  t.head_weight = ptr("head.weight");
  return t;
}

template ModelTensors<float> bind_tensors<float>(const ParameterTable&, const ModelConfig&, float*);
template ModelTensors<double> bind_tensors<double>(const ParameterTable&, const ModelConfig&, double*);

}  // namespace blocklab
