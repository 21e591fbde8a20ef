#pragma once
// The Hugging Face tensor names, one table per naming scheme, read by both directions: hf::Model (model.h)
// finds a checkpoint's tensors through it, and export (export.h) writes blocklab's parameters under it. Each
// row pairs a Hugging Face tensor with blocklab's parameter (the names of model/parameters.h) and the facts
// that tell their layouts apart, so that no other file spells a Hugging Face tensor name.
//
//   scheme  families                            the language model's tensors sit under
//   gpt2    gpt2                                "" or "transformer." (export writes "transformer.")
//   llama   llama, qwen2, qwen3 (q/k norms)     "model." or ""; qwen3_vl's: "model.language_model." or
//                                               "language_model.model." (export writes "model.")
//
// The rows themselves are in names.cpp. "{N}" in a name stands for the block index; rows with it are a block's
// and repeat for every block, in the order they are listed. The output head (lm_head.weight) sits outside the
// language model's prefix.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"

namespace blocklab::hf {

// When a row's tensor exists: the config flag that gives blocklab's model the parameter, so that a row applies
// exactly when blocklab's parameter table has its tensor.
enum class When {
  Always,
  LearnedPositions,  // positions = learned (GPT-2's wpe)
  NormBias,          // a norm with a bias (LayerNorm)
  QkvBias,           // qkv_bias
  ProjBias,          // proj_bias (the attention's output projection)
  MlpBias,           // mlp_bias
  QkNorm,            // qk_norm (Qwen3's per-head RMSNorm of q and k)
  Untied             // tie_head = false (a separate output head)
};

struct NameRow {
  std::string_view hf;        // after the scheme's prefix, e.g. "h.{N}.attn.c_attn.weight"
  std::string_view blocklab;  // e.g. "blocks.{N}.attn.qkv.weight"
  When when = When::Always;
  // Stored (in, out), the transpose of blocklab's (out, in): GPT-2's Conv1D layers.
  bool transposed = false;
  // The Hugging Face tensor is part `part` of `parts` equal row blocks of blocklab's tensor (along its first
  // dimension): a gated MLP's fc1 is [value | gate] = [up_proj | gate_proj].
  int part = 0, parts = 1;
  // Outside the language model's prefix (the output head).
  bool top = false;
};

struct NameScheme {
  const char* label;  // "GPT-2", "Llama", for messages
  std::span<const NameRow> rows;
  // The language model's prefixes, in the order import tries them; the multimodal wrapper's (Qwen3-VL), and
  // where its output head may sit. Empty where the scheme has no such wrapper.
  std::span<const std::string_view> prefixes, wrapped_prefixes, wrapped_top_prefixes;
  std::string_view export_prefix;  // the prefix export writes
};

const NameScheme& gpt2_names();
const NameScheme& llama_names();  // Llama, Qwen2, Qwen3, and Qwen3-VL's language model

// Whether a row's tensor exists in a model of `config`.
bool applies(When when, const blocklab::ModelConfig& config);

// One row spelled out for one block (or for the model's own tensors, block -1).
struct NamedTensor {
  const NameRow* row = nullptr;
  std::string hf;        // with its prefix
  std::string blocklab;  // as in blocklab's parameter table
  int block = -1;
};

// The scheme's tensors in a model of `config`, in the order export writes them: the rows before the block rows,
// the block rows for block 0, 1, ..., then the rows after them; only the rows that apply. `prefix` goes before
// every Hugging Face name but the top rows', which get `top_prefix`.
std::vector<NamedTensor> named_tensors(const NameScheme& scheme, const blocklab::ModelConfig& config,
                                       std::string_view prefix, std::string_view top_prefix);

// The shape of a row's tensor as the Hugging Face checkpoint stores it, for blocklab's parameter `spec`: its row
// part, transposed where the row says so.
std::vector<int64_t> hf_shape(const NameRow& row, const ParamSpec& spec);

// A row's tensor as the Hugging Face checkpoint stores it (shape hf_shape), from blocklab's parameter `spec`
// whose data is `whole`.
std::vector<float> hf_data(const NameRow& row, const ParamSpec& spec, std::span<const float> whole);

}  // namespace blocklab::hf
