#include "hf/names.h"

#include "util/error.h"

namespace blocklab::hf {

namespace {

// Rows by kind: a tensor stored as blocklab stores it, a GPT-2 Conv1D weight (stored transposed), a row block
// of a fused blocklab tensor, the output head.
constexpr NameRow same(std::string_view hf, std::string_view blocklab, When when = When::Always) {
  return {hf, blocklab, when};
}
constexpr NameRow conv1d(std::string_view hf, std::string_view blocklab) {
  return {hf, blocklab, When::Always, true};
}
constexpr NameRow rows(std::string_view hf, std::string_view blocklab, int part, int parts,
                       When when = When::Always) {
  return {hf, blocklab, when, false, part, parts};
}
constexpr NameRow head(std::string_view hf, std::string_view blocklab) {
  return {hf, blocklab, When::Untied, false, 0, 1, true};
}

// GPT2LMHeadModel: Pre-LN with LayerNorm, learned positions, a fused c_attn and Conv1D layers throughout.
// Every bias is always there in GPT-2 (the config's flags are all true for it).
constexpr NameRow kGpt2Rows[] = {
    same("wte.weight", "tok_emb.weight"),
    same("wpe.weight", "pos_emb.weight", When::LearnedPositions),
    same("h.{N}.ln_1.weight", "blocks.{N}.norm1.weight"),
    same("h.{N}.ln_1.bias", "blocks.{N}.norm1.bias", When::NormBias),
    conv1d("h.{N}.attn.c_attn.weight", "blocks.{N}.attn.qkv.weight"),
    same("h.{N}.attn.c_attn.bias", "blocks.{N}.attn.qkv.bias", When::QkvBias),
    conv1d("h.{N}.attn.c_proj.weight", "blocks.{N}.attn.proj.weight"),
    same("h.{N}.attn.c_proj.bias", "blocks.{N}.attn.proj.bias", When::ProjBias),
    same("h.{N}.ln_2.weight", "blocks.{N}.norm2.weight"),
    same("h.{N}.ln_2.bias", "blocks.{N}.norm2.bias", When::NormBias),
    conv1d("h.{N}.mlp.c_fc.weight", "blocks.{N}.mlp.fc1.weight"),
    same("h.{N}.mlp.c_fc.bias", "blocks.{N}.mlp.fc1.bias", When::MlpBias),
    conv1d("h.{N}.mlp.c_proj.weight", "blocks.{N}.mlp.fc2.weight"),
    same("h.{N}.mlp.c_proj.bias", "blocks.{N}.mlp.fc2.bias", When::MlpBias),
    same("ln_f.weight", "final_norm.weight"),
    same("ln_f.bias", "final_norm.bias", When::NormBias),
    head("lm_head.weight", "head.weight"),
};

// LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM: Pre-LN with RMSNorm, RoPE, separate q/k/v projections
// (Qwen3: each q and k head RMSNorm-ed), a SwiGLU MLP whose up and gate projections are the value and gate rows
// of blocklab's fc1.
constexpr NameRow kLlamaRows[] = {
    same("embed_tokens.weight", "tok_emb.weight"),
    same("layers.{N}.input_layernorm.weight", "blocks.{N}.norm1.weight"),
    same("layers.{N}.self_attn.q_proj.weight", "blocks.{N}.attn.q.weight"),
    same("layers.{N}.self_attn.q_proj.bias", "blocks.{N}.attn.q.bias", When::QkvBias),
    same("layers.{N}.self_attn.k_proj.weight", "blocks.{N}.attn.k.weight"),
    same("layers.{N}.self_attn.k_proj.bias", "blocks.{N}.attn.k.bias", When::QkvBias),
    same("layers.{N}.self_attn.v_proj.weight", "blocks.{N}.attn.v.weight"),
    same("layers.{N}.self_attn.v_proj.bias", "blocks.{N}.attn.v.bias", When::QkvBias),
    same("layers.{N}.self_attn.q_norm.weight", "blocks.{N}.attn.q_norm.weight", When::QkNorm),
    same("layers.{N}.self_attn.k_norm.weight", "blocks.{N}.attn.k_norm.weight", When::QkNorm),
    same("layers.{N}.self_attn.o_proj.weight", "blocks.{N}.attn.proj.weight"),
    same("layers.{N}.self_attn.o_proj.bias", "blocks.{N}.attn.proj.bias", When::ProjBias),
    same("layers.{N}.post_attention_layernorm.weight", "blocks.{N}.norm2.weight"),
    rows("layers.{N}.mlp.gate_proj.weight", "blocks.{N}.mlp.fc1.weight", 1, 2),
    rows("layers.{N}.mlp.up_proj.weight", "blocks.{N}.mlp.fc1.weight", 0, 2),
    rows("layers.{N}.mlp.gate_proj.bias", "blocks.{N}.mlp.fc1.bias", 1, 2, When::MlpBias),
    rows("layers.{N}.mlp.up_proj.bias", "blocks.{N}.mlp.fc1.bias", 0, 2, When::MlpBias),
    same("layers.{N}.mlp.down_proj.weight", "blocks.{N}.mlp.fc2.weight"),
    same("layers.{N}.mlp.down_proj.bias", "blocks.{N}.mlp.fc2.bias", When::MlpBias),
    same("norm.weight", "final_norm.weight"),
    head("lm_head.weight", "head.weight"),
};

constexpr std::string_view kGpt2Prefixes[] = {"", "transformer."};
constexpr std::string_view kLlamaPrefixes[] = {"model.", ""};
constexpr std::string_view kLlamaWrappedPrefixes[] = {"model.language_model.", "language_model.model."};
constexpr std::string_view kLlamaWrappedTopPrefixes[] = {"", "language_model."};

constexpr std::string_view kBlock = "{N}";

// `name` with "{N}" replaced by the block index.
std::string spelled(std::string_view name, int block) {
  std::string s(name);
  const size_t at = s.find(kBlock);
  if (at != std::string::npos) s.replace(at, kBlock.size(), std::to_string(block));
  return s;
}

bool is_block_row(const NameRow& row) { return row.blocklab.find(kBlock) != std::string_view::npos; }

}  // namespace

const NameScheme& gpt2_names() {
  static const NameScheme scheme{"GPT-2", kGpt2Rows, kGpt2Prefixes, {}, {}, "transformer."};
  return scheme;
}

const NameScheme& llama_names() {
  static const NameScheme scheme{"Llama", kLlamaRows, kLlamaPrefixes, kLlamaWrappedPrefixes,
                                 kLlamaWrappedTopPrefixes, "model."};
  return scheme;
}

bool applies(When when, const blocklab::ModelConfig& c) {
  switch (when) {
    case When::Always: return true;
    case When::LearnedPositions: return c.positions == Positions::Learned;
    case When::NormBias: return c.norm != NormKind::RMSNorm;
    case When::QkvBias: return c.qkv_bias;
    case When::ProjBias: return c.proj_bias;
    case When::MlpBias: return c.mlp_bias;
    case When::QkNorm: return c.qk_norm;
    case When::Untied: return !c.tie_head;
  }
  return false;
}

std::vector<NamedTensor> named_tensors(const NameScheme& scheme, const blocklab::ModelConfig& config,
                                       std::string_view prefix, std::string_view top_prefix) {
  std::vector<NamedTensor> out;
  auto add = [&](const NameRow& row, int block) {
    if (!applies(row.when, config)) return;
    const std::string hf = spelled(row.hf, block);
    out.push_back({&row, std::string(row.top ? top_prefix : prefix) + hf, spelled(row.blocklab, block), block});
  };
  const std::span<const NameRow> rows = scheme.rows;
  size_t first = 0;  // the block rows: [first, last)
  while (first < rows.size() && !is_block_row(rows[first])) add(rows[first++], -1);
  size_t last = first;
  while (last < rows.size() && is_block_row(rows[last])) ++last;
  for (int l = 0; l < config.layers; ++l)
    for (size_t i = first; i < last; ++i) add(rows[i], l);
  for (size_t i = last; i < rows.size(); ++i) {
    BLOCKLAB_CHECK(!is_block_row(rows[i]), "a scheme's block rows must be listed together");
    add(rows[i], -1);
  }
  return out;
}

std::vector<int64_t> hf_shape(const NameRow& row, const ParamSpec& spec) {
  std::vector<int64_t> shape = spec.shape;
  BLOCKLAB_CHECK(!shape.empty() && shape[0] % row.parts == 0, "a row part must divide the tensor's rows");
  shape[0] /= row.parts;
  if (row.transposed) {
    BLOCKLAB_CHECK(shape.size() == 2, "only a matrix is stored transposed");
    std::swap(shape[0], shape[1]);
  }
  return shape;
}

std::vector<float> hf_data(const NameRow& row, const ParamSpec& spec, std::span<const float> whole) {
  BLOCKLAB_CHECK(static_cast<long>(whole.size()) == spec.numel, "tensor size does not match its shape");
  const int64_t rows_each = spec.shape[0] / row.parts, cols = spec.numel / spec.shape[0];
  const auto begin = whole.begin() + row.part * rows_each * cols;
  std::vector<float> part(begin, begin + rows_each * cols);
  if (!row.transposed) return part;
  // (rows, cols) -> (cols, rows)
  std::vector<float> t(part.size());
  for (int64_t r = 0; r < rows_each; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows_each + r] = part[r * cols + c];
  return t;
}

}  // namespace blocklab::hf
