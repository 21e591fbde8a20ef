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

namespace blocklab::hf {

enum class Family { Qwen3, Qwen2, Llama, GPT2 };
enum class NormKind { RMSNorm, LayerNorm };
enum class Activation { SiLU, GeluTanh, GeluErf };  // SiLU means the gated SwiGLU MLP

struct RopeConfig {
  enum class Scaling { None, Linear, Llama3 };
  double theta = 10000.0;
  Scaling scaling = Scaling::None;
  double factor = 1.0;                 // Linear and Llama3
  double low_freq_factor = 1.0;        // Llama3
  double high_freq_factor = 4.0;       // Llama3
  int original_max_positions = 8192;   // Llama3
  // Qwen3-VL's multimodal RoPE (mrope_section): for text-only input its three position streams are
  // equal, and it reduces to ordinary RoPE. Recorded for display only.
  bool multimodal = false;
};

struct ModelConfig {
  std::string model_type;  // top-level model_type as written ("qwen3_vl")
  Family family = Family::Qwen3;
  bool multimodal_wrapper = false;  // fields came from text_config (qwen3_vl)
  int layers = 0;
  int hidden = 0;
  int intermediate = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  int max_positions = 0;  // GPT-2: size of the learned position table; others: informational
  double norm_eps = 1e-6;
  NormKind norm = NormKind::RMSNorm;
  Activation activation = Activation::SiLU;
  RopeConfig rope;           // unused for GPT-2
  bool tie_word_embeddings = false;
  bool qk_norm = false;      // Qwen3: RMSNorm over head_dim on every q and k head, before RoPE
  bool qkv_bias = false;     // biases on the q, k, v projections
  bool o_bias = false;       // bias on the attention output projection
  bool mlp_bias = false;     // biases on the MLP projections

  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
  // Parameters of the language model (token embedding counted once when tied), from the config alone.
  int64_t parameter_count() const;
};

const char* family_name(Family);         // "qwen3", "qwen2", "llama", "gpt2"
const char* norm_name(NormKind);         // "rmsnorm", "layernorm"
const char* activation_name(Activation); // "swiglu", "gelu_tanh", "gelu"

// Parses config.json text; `where` (a path) prefixes every error message.
ModelConfig parse_config(std::string_view json_text, const std::string& where);
// `path` is a model directory (reads DIR/config.json) or a config file.
ModelConfig load_config(const std::filesystem::path& path);
// The config file for a model directory or file path (DIR/config.json, or path itself).
std::filesystem::path config_path(const std::filesystem::path& path);

}  // namespace blocklab::hf
