// blocklab inspect PATH:
//   a .safetensors file (a checkpoint's model.safetensors or state.safetensors, a model shard): the
//     tensors (name, dtype, shape, bytes) and metadata;
//   a Hugging Face model directory or its config.json: architecture, projection shapes, parameter
//     count, and (for a directory) the weights and tokenizer it holds.
// blocklab inspect --verify PATH: checks the checksums of a .safetensors file, a checkpoint directory, a
//   run directory (every checkpoint) or any directory of .safetensors files, and names the first damage.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "commands.h"
#include "hf/config.h"
#include "hf/model.h"
#include "text/tokenizer.h"
#include "hf/weights.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/shape.h"

namespace blocklab::cli {

namespace {

namespace fs = std::filesystem;

// 4022468096 -> "4,022,468,096"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (n < 0 ? "-" : "") + out;
}

std::string bytes_text(uint64_t b) {
  char buf[64];
  if (b >= (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(uint64_t{1} << 30));
  } else if (b >= (uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(uint64_t{1} << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(b));
  }
  return buf;
}

void row(const char* key, const std::string& value) { std::printf("%-16s %s\n", key, value.c_str()); }

void print_config(const hf::Config& hc) {
  const ModelConfig& c = hc.model;
  const std::string fam = hf::family_name(hc.family);
  row("model_type", hc.model_type + (hc.model_type != fam ? " (block family " + fam + ")" : "") +
                        (hc.multimodal_wrapper ? "; language model from text_config" : ""));
  row("blocks", std::to_string(c.layers));
  row("width", std::to_string(c.width));
  const int C = c.width;
  if (hc.family == hf::Family::GPT2) {
    row("attention", std::to_string(c.heads) + " heads x " + std::to_string(c.head_size()) + ", fused c_attn " +
                         std::to_string(C) + " -> " + std::to_string(3 * C));
  } else {
    std::string gqa = c.kv_heads == c.heads ? "multi-head" : "GQA " + std::to_string(c.heads / c.kv_heads) + ":1";
    row("attention", std::to_string(c.heads) + " query heads, " + std::to_string(c.kv_heads) +
                         " key/value heads (" + gqa + "), head_dim " + std::to_string(c.head_size()));
    row("  q_proj", std::to_string(C) + " -> " + std::to_string(c.q_dim()) + (c.qkv_bias ? " (+bias)" : ""));
    row("  k_proj", std::to_string(C) + " -> " + std::to_string(c.kv_dim()) + (c.qkv_bias ? " (+bias)" : ""));
    row("  v_proj", std::to_string(C) + " -> " + std::to_string(c.kv_dim()) + (c.qkv_bias ? " (+bias)" : ""));
    row("  o_proj", std::to_string(c.q_dim()) + " -> " + std::to_string(C) + (c.proj_bias ? " (+bias)" : ""));
  }
  row("mlp", to_string(c.mlp) + ", " + std::to_string(C) + " -> " +
                 std::to_string(c.mlp_hidden()) + " -> " + std::to_string(C));
  char eps[32];
  std::snprintf(eps, sizeof eps, "%g", c.norm_eps);
  row("norm", to_string(c.norm) + " (eps " + eps + "), pre-norm" +
                  (c.qk_norm ? "; per-head rmsnorm on q and k" : ""));
  if (hc.family == hf::Family::GPT2) {
    row("positions", "learned, " + std::to_string(hc.max_positions));
  } else {
    char theta[64];
    std::snprintf(theta, sizeof theta, "%g", c.rope_theta);
    std::string scaling = hc.rope_scaling.kind == RopeScaling::Kind::Linear   ? ", linear scaling"
                          : hc.rope_scaling.kind == RopeScaling::Kind::Llama3 ? ", llama3 scaling"
                                                                              : "";
    if (hc.multimodal_rope) scaling += ", multimodal sections (1-D for text)";
    row("positions", "rope (theta " + std::string(theta) + scaling + ")" +
                         (hc.max_positions ? ", max " + std::to_string(hc.max_positions) : ""));
  }
  row("vocab", std::to_string(c.vocab) + (c.tie_head ? ", tied embeddings" : ", separate lm_head"));
}

// One weights file: totals, metadata, then one line per tensor in file order.
int inspect_safetensors(const std::string& path) {
  io::SafetensorsReader r(path);
  std::size_t name_w = 4, shape_w = 5;  // at least the column titles
  long long elements = 0;
  unsigned long long data_bytes = 0;
  for (const io::TensorEntry& t : r.tensors()) {
    data_bytes += t.nbytes();
    elements += t.numel();
    name_w = std::max(name_w, t.name.size());
    shape_w = std::max(shape_w, format_shape(t.shape).size());
  }
  std::printf("%s: %zu tensors, %lld elements, %llu bytes of data (header %llu bytes)\n", path.c_str(),
              r.tensors().size(), elements, data_bytes, static_cast<unsigned long long>(r.data_offset()));
  if (!r.metadata().empty()) {
    std::puts("metadata:");
    for (const auto& [k, v] : r.metadata()) {
      if (k == io::kChecksumsKey)  // one checksum per tensor: say so rather than print them all
        std::printf("  %s = (one per tensor; check them with --verify)\n", k.c_str());
      else
        std::printf("  %s = %s\n", k.c_str(), v.c_str());
    }
  }
  if (!r.tensors().empty()) {
    std::printf("tensors:\n  %-*s  %-5s  %-*s  %s\n", static_cast<int>(name_w), "name", "dtype",
                static_cast<int>(shape_w), "shape", "bytes");
    for (const io::TensorEntry& t : r.tensors())
      std::printf("  %-*s  %-5s  %-*s  %llu\n", static_cast<int>(name_w), t.name.c_str(), io::dtype_name(t.dtype),
                  static_cast<int>(shape_w), format_shape(t.shape).c_str(), static_cast<unsigned long long>(t.nbytes()));
  }
  return 0;
}

int inspect(const std::string& path_text) {
  const fs::path path(path_text);
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path_text + ": no such file or directory");
  // A file other than a config.json is read as a weights file (checkpoints, model shards).
  if (!fs::is_directory(path, ec) && path.extension() != ".json") return inspect_safetensors(path_text);

  const hf::Config c = hf::load_config(path);
  std::printf("%s\n", hf::config_path(path).string().c_str());
  print_config(c);
  row("parameters", grouped(c.parameter_count()) + " (from config)");
  if (!fs::is_directory(path, ec)) return 0;

  const bool has_weights =
      fs::exists(path / "model.safetensors", ec) || fs::exists(path / "model.safetensors.index.json", ec);
  if (!has_weights) {
    row("weights", "none found (config only)");
  } else {
    const hf::Model m = hf::Model::load(path);
    const hf::WeightStore& w = m.weights();
    row("weights", m.dtype_summary() + ", " + std::to_string(w.files().size()) + (w.sharded() ? (w.files().size() == 1 ? " shard" : " shards") : " file") +
                       ", " + bytes_text(w.total_bytes()) + " of tensors; every tensor present with the expected shape");
    row("parameters", grouped(m.parameter_count()) + " (in the weights read by the language model)");
    if (!m.unused_tensors().empty()) {
      int64_t n = 0;
      for (const std::string& name : m.unused_tensors()) n += w.get(name).numel();
      row("not used", std::to_string(m.unused_tensors().size()) + " tensors, " + grouped(n) + " elements (e.g. " +
                          m.unused_tensors().front() + ")");
    }
  }
  if (fs::exists(path / "tokenizer.json", ec)) {
    const text::Tokenizer t = text::Tokenizer::load(path / "tokenizer.json");
    row("tokenizer", std::string("byte-level BPE, ") + grouped(t.vocab_size()) + " ids, " + grouped(t.merge_count()) +
                         " merges, " + text::pattern_name(t.pattern()) + " pre-tokenizer" + (t.normalizes_nfc() ? ", NFC" : ""));
  } else {
    row("tokenizer", "none (tokenizer.json not found; use --tokens)");
  }
  return 0;
}

// --verify on one file: throws Error at the first damaged tensor.
void verify_safetensors(const fs::path& path) {
  const io::SafetensorsReader r(path.string());
  if (r.verify_checksums())
    std::printf("%s: ok: %zu tensors, every checksum matches\n", path.c_str(), r.tensors().size());
  else
    std::printf("%s: readable, %zu tensors; no checksums (written by another tool), data not verified\n",
                path.c_str(), r.tensors().size());
}

void verify_checkpoint_dir(const fs::path& dir) {
  const auto notes = io::verify_checkpoint(dir);
  std::printf("%s: ok: sizes and checksums match what was written\n", dir.c_str());
  for (const std::string& n : notes) std::printf("  note: %s\n", n.c_str());
}

int verify(const std::string& path_text) {
  const fs::path path(path_text);
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path_text + ": no such file or directory");
  if (!fs::is_directory(path, ec)) {
    verify_safetensors(path);
    return 0;
  }
  if (fs::exists(path / "COMPLETE", ec) || fs::exists(path / "state.safetensors", ec)) {
    verify_checkpoint_dir(path);
    return 0;
  }
  if (fs::is_directory(io::checkpoints_dir(path), ec)) {  // a run: every checkpoint, newest last
    const auto all = io::list_checkpoint_dirs(path);
    if (all.empty()) throw Error(path_text + ": no checkpoint in " + io::checkpoints_dir(path).string());
    int damaged = 0;
    std::string first_error, newest_good;
    for (const io::CheckpointRef& c : all) {
      try {
        verify_checkpoint_dir(c.path);
        newest_good = c.path.filename().string();
      } catch (const Error& e) {
        std::printf("%s: DAMAGED: %s\n", c.path.c_str(), e.what());
        if (damaged++ == 0) first_error = e.what();
      }
    }
    if (damaged > 0)
      throw Error(std::to_string(damaged) + " of " + std::to_string(all.size()) + " checkpoints damaged (first: " +
                  first_error + "); " + (newest_good.empty() ? "none verifies" : "newest that verifies: " + newest_good));
    return 0;
  }
  // Any other directory (e.g. a Hugging Face model or an export): each of its .safetensors files.
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw Error(path_text + ": no checkpoint and no .safetensors file to verify");
  for (const fs::path& f : files) verify_safetensors(f);
  return 0;
}

}  // namespace

void register_inspect(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand(
      "inspect",
      "list the tensors (name, dtype, shape, bytes) and metadata of a weights file, or summarise a Hugging Face "
      "model directory (architecture, parameter count, weights, tokenizer)");
  auto path = std::make_shared<std::string>();
  auto check = std::make_shared<bool>(false);
  app->add_option("path", *path,
                  "a .safetensors file (e.g. a checkpoint's model.safetensors or state.safetensors), or a Hugging "
                  "Face model directory / its config.json")
      ->required()
      ->type_name("PATH");
  app->add_flag("--verify", *check,
                "check checksums instead of listing: a .safetensors file, a checkpoint directory, a run directory "
                "(each of its checkpoints) or a directory of .safetensors files; names the first damaged tensor, exit 2 "
                "when anything is damaged");
  commands.push_back({app, [path, check] { return *check ? verify(*path) : inspect(*path); }});
}

}  // namespace blocklab::cli
