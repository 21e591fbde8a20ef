#pragma once
// Hugging Face `config.json` for the decoder-only families blocklab can run forward:
//
//   model_type   block                                                     names in the weights
//   qwen3        RMSNorm pre-norm, GQA, RoPE, per-head q/k RMSNorm, SwiGLU   model.layers.N.self_attn.q_proj ...
//   qwen3_vl     the Qwen3 block; the language model's fields sit under      model.language_model.layers.N ...
//                `text_config` (the vision tower is not run)
//   qwen2        as qwen3 without q/k norm, with q/k/v biases               model.layers.N ...
//   llama        as qwen2 without biases (unless attention_bias/mlp_bias)    model.layers.N ...
//   gpt2         Pre-LN LayerNorm, learned positions, tanh-GELU MLP,         h.N.attn.c_attn ... (Conv1D:
//                fused qkv                                                   weights stored (in, out))
//
// Every missing required field, wrong type or unsupported option is an Error naming the file and key.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "model/config.h"
#include "model/rope_scaling.h"

namespace blocklab::hf {

enum class Family { Qwen3, Qwen2, Llama, GPT2 };

// A Hugging Face config.json: the architecture in the block engine's own vocabulary, and what only the
// Hugging Face format has (its model_type and family, which name the tensors; the position count).
struct Config {
  std::string model_type;  // top-level model_type as written ("qwen3_vl")
  Family family = Family::Qwen3;
  bool multimodal_wrapper = false;  // fields came from text_config (qwen3_vl)
  int max_positions = 0;  // GPT-2: size of the learned position table; others: informational
  RopeScaling rope_scaling;  // of the rope_theta frequencies; unused for GPT-2
  // Qwen3-VL's multimodal RoPE (mrope_section): for text-only input its three position streams are equal, and
  // it reduces to ordinary RoPE. Recorded for display only.
  bool multimodal_rope = false;
  // Every family is a Pre-LN block: block = the family's name, layers, width (hidden_size), heads, kv_heads,
  // head_dim, mlp_width (intermediate_size), vocab, norm (rmsnorm, or layernorm for GPT-2) and norm_eps, mlp
  // (swiglu, gelu_tanh or gelu), qk_norm, qkv_bias / proj_bias / mlp_bias, qkv (fused for GPT-2's c_attn),
  // positions (learned for GPT-2, else rope with rope_theta), tie_head (tie_word_embeddings). seq_len is 1:
  // positions are the caller's (embeddings, RoPE tables); shapes come per forward.
  blocklab::ModelConfig model;

  // Parameters of the language model (token embedding counted once when tied), from the config alone.
  int64_t parameter_count() const;
};

const char* family_name(Family);  // "qwen3", "qwen2", "llama", "gpt2"

// Parses config.json text; `where` (a path) prefixes every error message.
Config parse_config(std::string_view json_text, const std::string& where);
// `path` is a model directory (reads DIR/config.json) or a config file.
Config load_config(const std::filesystem::path& path);
// The config file for a model directory or file path (DIR/config.json, or path itself).
std::filesystem::path config_path(const std::filesystem::path& path);

}  // namespace blocklab::hf
