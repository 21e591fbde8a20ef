#include "hf/config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/json_text.h"
#include "io/read_file.h"
#include "util/error.h"

namespace blocklab::hf {

namespace {

using json = nlohmann::json;

// Reads the fields of one JSON object (the top level or text_config) with errors naming the key.
class Fields {
 public:
  Fields(const json& obj, std::string where, std::string prefix)
      : obj_(obj), where_(std::move(where)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }
  const json* find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string name(const char* key) const { return "\"" + prefix_ + key + "\""; }

  int positive_int(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) throw Error(where_ + ": missing required field " + name(key));
    return to_positive_int(*v, key);
  }
  int positive_int_or(const char* key, int fallback) const {
    const json* v = find(key);
    return v == nullptr ? fallback : to_positive_int(*v, key);
  }
  double positive_number_or(const char* key, double fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) throw Error(where_ + ": field " + name(key) + " is not a number");
    const double x = v->get<double>();
    if (!(x > 0) || !std::isfinite(x)) throw Error(where_ + ": field " + name(key) + " must be positive");
    return x;
  }
  bool boolean_or(const char* key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) throw Error(where_ + ": field " + name(key) + " is not true/false");
    return v->get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) throw Error(where_ + ": field " + name(key) + " is not a string");
    return v->get<std::string>();
  }
  const std::string& where() const { return where_; }

 private:
  int to_positive_int(const json& v, const char* key) const {
    if (!v.is_number_integer()) {
      // Some configs write integers as 2560.0; accept exact integral floats.
      if (v.is_number_float()) {
        const double x = v.get<double>();
        if (x == std::floor(x) && x >= 1 && x <= std::numeric_limits<int>::max()) return static_cast<int>(x);
      }
      throw Error(where_ + ": field " + name(key) + " is not an integer");
    }
    const int64_t x = v.get<int64_t>();
    if (x < 1 || x > std::numeric_limits<int>::max())
      throw Error(where_ + ": field " + name(key) + " must be a positive integer (got " + std::to_string(x) + ")");
    return static_cast<int>(x);
  }

  const json& obj_;
  std::string where_, prefix_;
};

void parse_rope(const Fields& f, const json* top_rope_theta, Config& c) {
  // rope_theta: in the (text) config, or (transformers v5) in rope_parameters, or at the top level.
  const json* params = f.find("rope_parameters");
  const json* scaling = f.find("rope_scaling");
  if (params != nullptr && !params->is_object())
    throw Error(f.where() + ": field " + f.name("rope_parameters") + " is not an object");
  if (scaling != nullptr && !scaling->is_object())
    throw Error(f.where() + ": field " + f.name("rope_scaling") + " is not an object");
  const json* rope = params != nullptr ? params : scaling;

  double theta = 10000.0;
  const json* theta_value = nullptr;
  if (f.has("rope_theta")) {
    theta_value = f.find("rope_theta");
  } else if (params != nullptr && params->contains("rope_theta")) {
    theta_value = &(*params)["rope_theta"];
  } else if (top_rope_theta != nullptr) {
    theta_value = top_rope_theta;
  }
  if (theta_value != nullptr) {
    if (!theta_value->is_number() || !(theta_value->get<double>() > 0))
      throw Error(f.where() + ": field " + f.name("rope_theta") + " must be a positive number");
    theta = theta_value->get<double>();
  }
  c.model.rope_theta = theta;
  if (f.has("partial_rotary_factor")) {
    const double p = f.positive_number_or("partial_rotary_factor", 1.0);
    if (p != 1.0) throw Error(f.where() + ": partial_rotary_factor " + std::to_string(p) + " is not supported");
  }
  if (rope == nullptr) return;

  const Fields r(*rope, f.where(), params != nullptr ? "rope_parameters." : "rope_scaling.");
  std::string type = r.string_or("rope_type", r.string_or("type", "default"));
  if (rope->contains("mrope_section")) c.multimodal_rope = true;
  if (type == "default" || (type == "mrope" && c.multimodal_rope)) return;  // mrope: plain RoPE for text
  if (type == "linear") {
    c.rope_scaling.kind = RopeScaling::Kind::Linear;
    c.rope_scaling.factor = r.positive_number_or("factor", 1.0);
    return;
  }
  if (type == "llama3") {
    c.rope_scaling.kind = RopeScaling::Kind::Llama3;
    c.rope_scaling.factor = r.positive_number_or("factor", 8.0);
    c.rope_scaling.low_freq_factor = r.positive_number_or("low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = r.positive_number_or("high_freq_factor", 4.0);
    c.rope_scaling.original_max_positions = r.positive_int_or("original_max_position_embeddings", 8192);
    if (!(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor))
      throw Error(f.where() + ": llama3 rope scaling needs high_freq_factor > low_freq_factor");
    return;
  }
  throw Error(f.where() + ": RoPE scaling type \"" + type +
              "\" is not supported (supported: default, linear, llama3)");
}

void parse_decoder(const Fields& f, const json* top_rope_theta, Config& hc) {
  blocklab::ModelConfig& c = hc.model;
  c.layers = f.positive_int("num_hidden_layers");
  c.width = f.positive_int("hidden_size");
  c.mlp_width = f.positive_int("intermediate_size");
  c.heads = f.positive_int("num_attention_heads");
  c.kv_heads = f.positive_int_or("num_key_value_heads", c.heads);
  c.vocab = f.positive_int("vocab_size");
  hc.max_positions = f.has("max_position_embeddings") ? f.positive_int("max_position_embeddings") : 0;
  if (f.has("head_dim")) {
    c.head_dim = f.positive_int("head_dim");
  } else {
    if (c.width % c.heads != 0)
      throw Error(f.where() + ": hidden_size " + std::to_string(c.width) + " is not divisible by num_attention_heads " +
                  std::to_string(c.heads) + " and there is no head_dim");
    c.head_dim = c.width / c.heads;
  }
  if (c.head_dim % 2 != 0)
    throw Error(f.where() + ": head_dim " + std::to_string(c.head_dim) + " must be even for rotary embeddings");
  if (c.heads % c.kv_heads != 0)
    throw Error(f.where() + ": num_attention_heads " + std::to_string(c.heads) +
                " is not a multiple of num_key_value_heads " + std::to_string(c.kv_heads));
  c.norm = NormKind::RMSNorm;
  c.norm_eps = f.positive_number_or("rms_norm_eps", 1e-6);
  const std::string act = f.string_or("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    throw Error(f.where() + ": hidden_act \"" + act + "\" is not supported (this block family uses silu)");
  c.mlp = MlpKind::SwiGLU;
  if (f.boolean_or("use_sliding_window", false))
    throw Error(f.where() + ": use_sliding_window is true; sliding-window attention is not supported");
  c.qkv = QkvLayout::Separate;
  c.positions = Positions::RoPE;
  parse_rope(f, top_rope_theta, hc);
}

void parse_gpt2(const Fields& f, Config& hc) {
  hc.family = Family::GPT2;
  blocklab::ModelConfig& c = hc.model;
  c.layers = f.positive_int("n_layer");
  c.width = f.positive_int("n_embd");
  c.heads = f.positive_int("n_head");
  c.kv_heads = c.heads;
  if (c.width % c.heads != 0)
    throw Error(f.where() + ": n_embd " + std::to_string(c.width) + " is not divisible by n_head " +
                std::to_string(c.heads));
  c.head_dim = c.width / c.heads;
  c.mlp_width = f.positive_int_or("n_inner", 4 * c.width);
  c.vocab = f.positive_int("vocab_size");
  hc.max_positions = f.positive_int("n_positions");
  c.norm = NormKind::LayerNorm;
  c.norm_eps = f.positive_number_or("layer_norm_epsilon", 1e-5);
  const std::string act = f.string_or("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") {
    c.mlp = MlpKind::GeluTanh;
  } else if (act == "gelu") {
    c.mlp = MlpKind::Gelu;
  } else {
    throw Error(f.where() + ": activation_function \"" + act +
                "\" is not supported (supported: gelu_new, gelu_pytorch_tanh, gelu_fast, gelu)");
  }
  if (f.boolean_or("scale_attn_by_inverse_layer_idx", false))
    throw Error(f.where() + ": scale_attn_by_inverse_layer_idx is not supported");
  if (!f.boolean_or("scale_attn_weights", true)) throw Error(f.where() + ": scale_attn_weights false is not supported");
  c.qkv = QkvLayout::Fused;
  c.positions = Positions::Learned;
  c.qkv_bias = c.proj_bias = c.mlp_bias = true;
  c.tie_head = f.boolean_or("tie_word_embeddings", true);
}

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::Qwen3: return "qwen3";
    case Family::Qwen2: return "qwen2";
    case Family::Llama: return "llama";
    case Family::GPT2: return "gpt2";
  }
  return "?";
}
int64_t Config::parameter_count() const {
  const blocklab::ModelConfig& c = model;
  const int64_t C = c.width, I = c.mlp_hidden(), V = c.vocab;
  int64_t per_layer = 0;
  int64_t total = V * C;               // token embedding
  if (!c.tie_head) total += V * C;     // lm_head
  if (family == Family::GPT2) {
    total += static_cast<int64_t>(max_positions) * C + 2 * C;  // wpe, ln_f
    per_layer = 2 * 2 * C                   // ln_1, ln_2
                + C * 3 * C + 3 * C         // c_attn
                + C * C + C                 // attn.c_proj
                + C * I + I                 // c_fc
                + I * C + C;                // mlp.c_proj
  } else {
    const int64_t Q = c.q_dim(), K = c.kv_dim();
    total += C;  // final norm
    per_layer = 2 * C                                  // input_layernorm, post_attention_layernorm
                + C * Q + 2 * C * K + Q * C            // q, k, v, o
                + (c.qkv_bias ? Q + 2 * K : 0) + (c.proj_bias ? C : 0)
                + (c.qk_norm ? 2 * static_cast<int64_t>(c.head_size()) : 0)
                + 3 * C * I + (c.mlp_bias ? 2 * I + C : 0);
  }
  return total + per_layer * c.layers;
}

Config parse_config(std::string_view text, const std::string& where) {
  const json j = io::parse_json_object(text, where);
  const Fields top(j, where, "");
  if (!top.has("model_type"))
    throw Error(where + ": missing \"model_type\" (supported: qwen3, qwen3_vl, qwen2, llama, gpt2)");
  Config c;
  c.model_type = top.string_or("model_type", "");
  const std::string& mt = c.model_type;

  c.model.norm_placement = NormPlacement::Pre;
  c.model.seq_len = 1;
  if (mt == "gpt2") {
    parse_gpt2(top, c);
    c.model.block = family_name(c.family);
    return c;
  }
  if (mt == "qwen3" || mt == "qwen2" || mt == "llama") {
    c.family = mt == "qwen3" ? Family::Qwen3 : mt == "qwen2" ? Family::Qwen2 : Family::Llama;
    parse_decoder(top, nullptr, c);
    c.model.tie_head = top.boolean_or("tie_word_embeddings", false);
  } else if (mt == "qwen3_vl") {
    const json* text_config = top.find("text_config");
    if (text_config == nullptr) throw Error(where + ": model_type qwen3_vl needs a \"text_config\" object");
    if (!text_config->is_object()) throw Error(where + ": \"text_config\" is not an object");
    const Fields tf(*text_config, where, "text_config.");
    const std::string inner = tf.string_or("model_type", "qwen3_vl_text");
    if (inner != "qwen3_vl_text" && inner != "qwen3")
      throw Error(where + ": text_config.model_type \"" + inner + "\" is not supported under qwen3_vl");
    c.family = Family::Qwen3;
    c.multimodal_wrapper = true;
    parse_decoder(tf, top.find("rope_theta"), c);
    // The language model reads its own flag; the top-level one applies when text_config has none.
    c.model.tie_head = tf.boolean_or("tie_word_embeddings", top.boolean_or("tie_word_embeddings", false));
  } else {
    throw Error(where + ": model_type \"" + mt + "\" is not supported (supported: qwen3, qwen3_vl, qwen2, llama, gpt2)");
  }

  // Family-specific projections.
  const json& src = c.multimodal_wrapper ? j["text_config"] : j;
  const Fields fields(src, where, c.multimodal_wrapper ? "text_config." : "");
  blocklab::ModelConfig& m = c.model;
  m.block = family_name(c.family);
  m.qk_norm = c.family == Family::Qwen3;
  m.mlp_bias = c.family == Family::Llama && fields.boolean_or("mlp_bias", false);
  if (c.family == Family::Qwen2) {
    m.qkv_bias = true;  // Qwen2 always has q/k/v biases and none on o_proj
    m.proj_bias = false;
  } else {
    m.qkv_bias = m.proj_bias = fields.boolean_or("attention_bias", false);
  }
  return c;
}

std::filesystem::path config_path(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return path / "config.json";
  return path;
}

Config load_config(const std::filesystem::path& path) {
  const std::filesystem::path file = config_path(path);
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    throw Error(file.string() + ": not found (a Hugging Face model directory needs config.json)");
  return parse_config(io::read_file(file), file.string());
}

}  // namespace blocklab::hf
