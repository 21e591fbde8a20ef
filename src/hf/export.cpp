#include "hf/export.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE
#include <unistd.h>

#include <map>

#include "hf/names.h"
#include "hf/weights.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/parameters.h"
#include "util/error.h"
#include "util/shape.h"

namespace blocklab::hf {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string text(long v) { return std::to_string(v); }

// The first key the format cannot express, as "KEY is VALUE; WHY", or empty.
std::string qwen3_problem(const blocklab::ModelConfig& c) {
  if (c.cross_attention) return "cross_attention is true; Qwen3ForCausalLM has no cross-attention";
  if (c.attn_gate) return "attn_gate is true; Qwen3ForCausalLM has no attention output gate";
  if (c.value_residual) return "value_residual is true; Qwen3ForCausalLM has no value residual";
  if (c.norm_placement != NormPlacement::Pre)
    return "norm_placement is " + to_string(c.norm_placement) + "; Qwen3ForCausalLM is pre-norm (needs pre)";
  if (c.norm != NormKind::RMSNorm) return "norm is " + to_string(c.norm) + "; Qwen3ForCausalLM needs rmsnorm";
  if (c.positions != Positions::RoPE)
    return "positions is " + to_string(c.positions) + "; Qwen3ForCausalLM needs rope";
  if (c.mlp != MlpKind::SwiGLU) return "mlp is " + to_string(c.mlp) + "; Qwen3ForCausalLM needs swiglu";
  if (c.mlp_bias) return "mlp_bias is true; Qwen3's MLP has no biases (needs mlp_bias = false)";
  if (c.qkv_bias != c.proj_bias)
    return std::string("qkv_bias is ") + (c.qkv_bias ? "true" : "false") + " and proj_bias " +
           (c.proj_bias ? "true" : "false") + "; Qwen3's attention_bias sets both (they must be equal)";
  if (!c.qk_norm)
    return "qk_norm is false; Qwen3ForCausalLM normalises every q and k head (needs qk_norm = true)";
  return {};
}

std::string gpt2_problem(const blocklab::ModelConfig& c) {
  if (c.cross_attention) return "cross_attention is true; GPT2LMHeadModel has no cross-attention";
  if (c.attn_gate) return "attn_gate is true; GPT2LMHeadModel has no attention output gate";
  if (c.value_residual) return "value_residual is true; GPT2LMHeadModel has no value residual";
  if (c.norm_placement != NormPlacement::Pre)
    return "norm_placement is " + to_string(c.norm_placement) + "; GPT2LMHeadModel is pre-norm (needs pre)";
  if (c.norm != NormKind::LayerNorm) return "norm is " + to_string(c.norm) + "; GPT2LMHeadModel needs layernorm";
  if (c.positions != Positions::Learned)
    return "positions is " + to_string(c.positions) + "; GPT2LMHeadModel needs learned";
  if (c.qkv != QkvLayout::Fused) return "qkv is " + to_string(c.qkv) + "; GPT2LMHeadModel needs fused (c_attn)";
  if (c.kv_head_count() != c.heads)
    return "kv_heads is " + text(c.kv_head_count()) + "; GPT2LMHeadModel has no grouped-query attention (needs " +
           text(c.heads) + ", as many as heads)";
  if (c.q_dim() != c.width)
    return "head_dim is " + text(c.head_size()) + "; GPT2LMHeadModel needs width / heads = " +
           text(c.width / c.heads) + " (heads x head_dim = width)";
  if (c.qk_norm) return "qk_norm is true; GPT2LMHeadModel has no q/k norm";
  if (!c.qkv_bias) return "qkv_bias is false; GPT2LMHeadModel's c_attn has a bias";
  if (!c.proj_bias) return "proj_bias is false; GPT2LMHeadModel's attn.c_proj has a bias";
  if (!c.mlp_bias) return "mlp_bias is false; GPT2LMHeadModel's MLP has biases";
  if (c.mlp != MlpKind::GeluTanh && c.mlp != MlpKind::Gelu)
    return "mlp is " + to_string(c.mlp) + "; GPT2LMHeadModel needs gelu_tanh (or gelu)";
  return {};
}

// Swaps the two paths in one atomic step where the platform can (Linux's renameat2).
bool exchange(const fs::path& a, const fs::path& b) {
#ifdef RENAME_EXCHANGE
  return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0;
#else
  (void)a, (void)b;
  return false;
#endif
}

// Moves `tmp` into place as `out`, replacing what is there; `out`'s parent is fsynced afterwards.
void publish(const fs::path& tmp, const fs::path& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) {
    fs::rename(tmp, out, ec);
    if (ec) throw Error(out.string() + ": cannot rename " + tmp.string() + " into place: " + ec.message());
  } else if (exchange(tmp, out)) {
    // One atomic swap: the old directory now sits at tmp.
    fs::remove_all(tmp, ec);
  } else {
    // A file system (or a platform: the browser's) without RENAME_EXCHANGE: move the old directory aside first.
    const fs::path old = tmp.parent_path() / (tmp.filename().string() + ".old");
    fs::remove_all(old, ec);
    fs::rename(out, old, ec);
    if (ec) throw Error(out.string() + ": cannot move the old directory aside: " + ec.message());
    fs::rename(tmp, out, ec);
    if (ec) {
      std::error_code back;
      fs::rename(old, out, back);
      throw Error(out.string() + ": cannot rename " + tmp.string() + " into place: " + ec.message());
    }
    fs::remove_all(old, ec);
  }
  io::sync_directory(out.parent_path().empty() ? "." : out.parent_path().string());
}

}  // namespace

const char* export_format_name(ExportFormat f) {
  switch (f) {
    case ExportFormat::Auto: return "auto";
    case ExportFormat::Qwen3: return "qwen3";
    case ExportFormat::GPT2: return "gpt2";
    case ExportFormat::Blocklab: return "blocklab";
  }
  return "?";
}

ExportFormat parse_export_format(const std::string& name) {
  for (ExportFormat f : {ExportFormat::Auto, ExportFormat::Qwen3, ExportFormat::GPT2, ExportFormat::Blocklab})
    if (name == export_format_name(f)) return f;
  throw Error("unknown export format '" + name + "' (expected one of: auto, qwen3, gpt2, blocklab)");
}

ExportFormat default_export_format(const blocklab::ModelConfig& config) {
  if (config.block == "qwen3") return ExportFormat::Qwen3;
  if (config.block == "gpt2") return ExportFormat::GPT2;
  return ExportFormat::Blocklab;
}

void check_exportable(const blocklab::ModelConfig& config, ExportFormat format, const std::string& reason) {
  std::string problem;
  if (format == ExportFormat::Qwen3) problem = qwen3_problem(config);
  if (format == ExportFormat::GPT2) problem = gpt2_problem(config);
  if (format == ExportFormat::Auto) problem = "no format chosen";
  if (!problem.empty())
    throw Error(std::string("cannot export as Hugging Face ") + export_format_name(format) + " (" + reason +
                "): " + problem);
}

json hf_config_json(const blocklab::ModelConfig& c, ExportFormat format) {
  json j;  // keys sorted, as transformers writes them
  if (format == ExportFormat::Qwen3) {
    j = {{"architectures", json::array({"Qwen3ForCausalLM"})},
         {"attention_bias", c.qkv_bias},
         {"attention_dropout", 0.0},
         {"head_dim", c.head_size()},
         {"hidden_act", "silu"},
         {"hidden_size", c.width},
         {"initializer_range", 0.02},
         {"intermediate_size", c.mlp_hidden()},
         {"max_position_embeddings", c.seq_len},
         {"max_window_layers", c.layers},
         {"model_type", "qwen3"},
         {"num_attention_heads", c.heads},
         {"num_hidden_layers", c.layers},
         {"num_key_value_heads", c.kv_head_count()},
         {"rms_norm_eps", c.norm_eps},
         {"rope_scaling", nullptr},
         {"rope_theta", c.rope_theta},
         {"sliding_window", nullptr},
         {"tie_word_embeddings", c.tie_head},
         {"torch_dtype", "float32"},
         {"use_cache", true},
         {"use_sliding_window", false},
         {"vocab_size", c.vocab}};
  } else if (format == ExportFormat::GPT2) {
    j = {{"activation_function", c.mlp == MlpKind::Gelu ? "gelu" : "gelu_new"},
         {"architectures", json::array({"GPT2LMHeadModel"})},
         {"attn_pdrop", 0.0},  // blocklab trains without dropout
         {"bos_token_id", nullptr},  // the copy task has none (GPT2Config's default 50256 is outside the vocabulary)
         {"embd_pdrop", 0.0},
         {"eos_token_id", nullptr},
         {"initializer_range", 0.02},
         {"layer_norm_epsilon", c.norm_eps},
         {"model_type", "gpt2"},
         {"n_ctx", c.seq_len},
         {"n_embd", c.width},
         {"n_head", c.heads},
         {"n_inner", c.mlp_hidden()},
         {"n_layer", c.layers},
         {"n_positions", c.seq_len},
         {"reorder_and_upcast_attn", false},
         {"resid_pdrop", 0.0},
         {"scale_attn_by_inverse_layer_idx", false},
         {"scale_attn_weights", true},
         {"tie_word_embeddings", c.tie_head},
         {"torch_dtype", "float32"},
         {"use_cache", true},
         {"vocab_size", c.vocab}};
  } else {
    throw Error(std::string("hf_config_json: no Hugging Face config for format ") + export_format_name(format));
  }
  return j;
}

std::vector<ExportedTensor> export_tensors(const blocklab::ModelConfig& c, ExportFormat format,
                                           const ParamLookup& param) {
  const ParameterTable table(c);
  // A parameter, with its size checked against the table.
  auto get = [&](const std::string& name) {
    const std::span<const float> t = param(name);
    if (static_cast<long>(t.size()) != table.at(name).numel)
      throw Error("tensor " + name + " has " + text(static_cast<long>(t.size())) + " elements, expected " +
                  text(table.at(name).numel));
    return t;
  };
  std::vector<ExportedTensor> out;
  if (format == ExportFormat::Blocklab) {
    for (const ParamSpec& s : table.specs()) {
      const std::span<const float> t = get(s.name);
      out.push_back({s.name, s.shape, {t.begin(), t.end()}});
    }
    return out;
  }
  check_exportable(c, format, std::string("format ") + export_format_name(format));
  // The format's names (hf/names.h), the output head outside the language model's prefix.
  const NameScheme& names = format == ExportFormat::GPT2 ? gpt2_names() : llama_names();
  for (const NamedTensor& t : named_tensors(names, c, names.export_prefix, "")) {
    const ParamSpec& s = table.at(t.blocklab);
    out.push_back({t.hf, hf_shape(*t.row, s), hf_data(*t.row, s, get(t.blocklab))});
  }
  return out;
}

std::vector<ExportFormat> also_expressible(const blocklab::ModelConfig& config) {
  std::vector<ExportFormat> out;
  for (ExportFormat f : {ExportFormat::Qwen3, ExportFormat::GPT2})
    if ((f == ExportFormat::Qwen3 ? qwen3_problem(config) : gpt2_problem(config)).empty()) out.push_back(f);
  return out;
}

fs::path output_directory(const fs::path& out, bool force) {
  std::error_code ec;
  fs::path target = out.lexically_normal();
  if (!target.empty() && target.filename().empty()) target = target.parent_path();  // "dir/" -> "dir"
  if (target.empty() || target.filename() == "." || target.filename() == "..")
    throw Error("--out '" + out.string() + "': name a directory to create");
  if (fs::exists(target, ec)) {
    if (!fs::is_directory(target, ec)) throw Error(out.string() + ": exists and is not a directory");
    if (!fs::is_empty(target, ec) && !force)
      throw Error(out.string() + ": exists and is not empty; choose another --out or pass --force to replace it");
  }
  return target;
}

WrittenModel write_model_directory(const fs::path& target, const blocklab::ModelConfig& model, ExportFormat format,
                                   const ParamLookup& param, const json& blocklab_config, int64_t step) {
  const std::vector<ExportedTensor> tensors = export_tensors(model, format, param);
  WrittenModel result;
  std::error_code ec;
  // --- write into a temporary directory beside `target`, then rename it into place -----------------------
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) throw Error(parent.string() + ": cannot create directory: " + ec.message());
  const fs::path tmp = parent / ("." + target.filename().string() + ".export." + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) throw Error(tmp.string() + ": cannot create directory: " + ec.message());
  try {
    const json config = format == ExportFormat::Blocklab ? blocklab_config : hf_config_json(model, format);
    const std::string config_json = config.dump(2) + "\n";
    io::write_file_atomic((tmp / "config.json").string(), config_json);
    std::vector<io::TensorToWrite> views;
    views.reserve(tensors.size());
    for (const ExportedTensor& t : tensors) {
      views.push_back(io::tensor_view(t.name, t.shape, std::span<const float>(t.data)));
      result.parameters += static_cast<int64_t>(t.data.size());
    }
    std::map<std::string, std::string> metadata{{"format", "pt"}};
    if (format == ExportFormat::Blocklab) metadata["step"] = std::to_string(step);
    io::write_safetensors((tmp / "model.safetensors").string(), views, metadata);
    io::sync_directory(tmp.string());
    publish(tmp, target);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  result.directory = target;
  result.files = {"config.json", "model.safetensors"};
  result.tensors = tensors.size();
  return result;
}

}  // namespace blocklab::hf
