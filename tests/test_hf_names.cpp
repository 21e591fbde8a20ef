// The Hugging Face name tables (src/hf/names.h), which export and hf::Model both read: a row applies exactly
// where blocklab's model has its parameter, and together the rows cover every parameter of a model the format
// expresses; a model written through the table and read back through it gives blocklab's own logits, and every
// row is both written and read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "cli_runner.h"
#include "hf/export.h"
#include "hf/model.h"
#include "hf/names.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "train/run_config.h"
#include "util/error.h"
#include "util/threads.h"

using namespace blocklab;
namespace fs = std::filesystem;

namespace {

// A small model of `block` with extra keys (as the CLI's --key value).
ModelConfig small_model(const std::string& block, const std::vector<std::pair<std::string, std::string>>& keys = {}) {
  RunConfig c;
  set_config_value(c, "block", block);
  c.model.layers = 2;
  c.model.width = 32;
  c.model.heads = 4;
  c.model.vocab = 16;
  c.copy_len = 8;
  for (const auto& [key, value] : keys) set_config_value(c, key, value);
  resolve(c);
  return c.model;
}

struct Case {
  std::string what;
  ModelConfig model;
  const hf::NameScheme* names;
  std::optional<hf::ExportFormat> format;  // the format export writes it in; none for a Llama
};

// Models each scheme names: the presets, their tied and untied heads and optional biases, and a Llama with
// MLP biases (which only the llama scheme's reader takes: Qwen3ForCausalLM, the format export writes, has none).
std::vector<Case> cases() {
  return {
      {"gpt2 tied", small_model("gpt2"), &hf::gpt2_names(), hf::ExportFormat::GPT2},
      {"seed: gpt2 with exact gelu, untied", small_model("seed"), &hf::gpt2_names(), hf::ExportFormat::GPT2},
      {"qwen3 GQA 4:2, untied", small_model("qwen3", {{"kv_heads", "2"}}), &hf::llama_names(),
       hf::ExportFormat::Qwen3},
      {"qwen3 head_dim 16, attention biases, tied",
       small_model("qwen3", {{"head_dim", "16"}, {"tie_head", "true"}, {"qkv_bias", "true"}, {"proj_bias", "true"}}),
       &hf::llama_names(), hf::ExportFormat::Qwen3},
      {"llama with MLP biases", small_model("qwen3", {{"qk_norm", "false"}, {"mlp_bias", "true"}, {"kv_heads", "2"}}),
       &hf::llama_names(), std::nullopt},
  };
}

// blocklab's own model of `config` with seeded weights.
Model<float> seeded_model(const ModelConfig& config) {
  Model<float> m(config);
  m.init_weights(11);
  // Norm weights start at one and biases at zero: perturbed, so that a tensor read in the wrong place shows.
  const ParameterTable table(config);
  std::span<float> p = m.params();
  for (const ParamSpec& s : table.specs())
    for (long i = 0; i < s.numel; ++i) p[s.offset + i] += 0.01f * std::sin(0.7f * static_cast<float>(s.offset + i));
  return m;
}

std::span<const float> parameter(const Model<float>& m, const ParameterTable& table, const std::string& name) {
  const ParamSpec& s = table.at(name);
  return m.params().subspan(s.offset, s.numel);
}

// Writes `k`'s model as a Hugging Face directory: through export for the formats it writes, else (a Llama with
// MLP biases) the table's tensors under a Llama config.json of the same architecture.
void write_directory(const Case& k, const Model<float>& m, const fs::path& dir) {
  const ParameterTable table(k.model);
  auto lookup = [&](const std::string& name) { return parameter(m, table, name); };
  if (k.format) {
    hf::write_model_directory(dir, k.model, *k.format, lookup, nlohmann::json::object(), 0);
    return;
  }
  fs::create_directories(dir);
  nlohmann::json config = hf::hf_config_json(k.model, hf::ExportFormat::Qwen3);
  config["model_type"] = "llama";
  config["architectures"] = nlohmann::json::array({"LlamaForCausalLM"});
  config["mlp_bias"] = k.model.mlp_bias;
  std::ofstream(dir / "config.json") << config.dump(2);
  std::vector<std::vector<float>> data;
  std::vector<io::TensorToWrite> tensors;
  const std::vector<hf::NamedTensor> named = hf::named_tensors(*k.names, k.model, k.names->export_prefix, "");
  data.reserve(named.size());
  for (const hf::NamedTensor& t : named) {
    const ParamSpec& s = table.at(t.blocklab);
    data.push_back(hf::hf_data(*t.row, s, lookup(t.blocklab)));
    tensors.push_back(io::tensor_view(t.hf, hf::hf_shape(*t.row, s), std::span<const float>(data.back())));
  }
  io::write_safetensors((dir / "model.safetensors").string(), tensors);
}

}  // namespace

TEST(HfNames, RowsApplyExactlyWhereBlocklabHasTheParameter) {
  for (const Case& k : cases()) {
    // Each parameter's row parts, from the rows that apply.
    std::map<std::string, std::set<int>> parts;
    std::map<std::string, int> part_count;
    for (const hf::NamedTensor& t : hf::named_tensors(*k.names, k.model, "", "")) {
      EXPECT_TRUE(parts[t.blocklab].insert(t.row->part).second) << k.what << ": " << t.hf << " twice";
      part_count[t.blocklab] = t.row->parts;
    }
    const ParameterTable table(k.model);
    for (const ParamSpec& s : table.specs()) {
      ASSERT_TRUE(parts.count(s.name)) << k.what << ": no row for " << s.name;
      EXPECT_EQ(static_cast<int>(parts[s.name].size()), part_count[s.name]) << k.what << ": " << s.name;
    }
    for (const auto& [name, p] : parts) EXPECT_NE(table.find(name), nullptr) << k.what << ": row for no " << name;
  }
}

TEST(HfNames, WrittenAndReadBackGivesOurLogitsAndUsesEveryRow) {
  set_num_threads(1);
  std::map<const hf::NameRow*, int> written, read;
  for (const Case& k : cases()) {
    const Model<float> ours = seeded_model(k.model);
    const fs::path dir = blocklab::testing::fresh_dir("hf_names") / "model";
    write_directory(k, ours, dir);
    const hf::Model back = hf::Model::load(dir);
    EXPECT_TRUE(back.unused_tensors().empty()) << k.what;

    // Every tensor in the file is one the table names, and the reader read each of them.
    const io::SafetensorsReader file((dir / "model.safetensors").string());
    const ParameterTable table(k.model);
    const std::vector<hf::NamedTensor> named = hf::named_tensors(*k.names, k.model, k.names->export_prefix, "");
    ASSERT_EQ(file.tensors().size(), named.size()) << k.what;
    int64_t elements = 0;
    for (const hf::NamedTensor& t : named) {
      ASSERT_NE(file.find(t.hf), nullptr) << k.what << ": " << t.hf;
      elements += table.at(t.blocklab).numel / t.row->parts;
      if (k.format) ++written[t.row];
      ++read[t.row];
    }
    EXPECT_EQ(back.parameter_count(), elements) << k.what;

    // The same logits as our own forward pass, at every position.
    const int T = k.model.seq_len, V = k.model.vocab;
    std::vector<int32_t> tokens(T);
    for (int t = 0; t < T; ++t) tokens[t] = (5 * t + 3) % V;
    Activations<float> acts = ours.make_activations(1, T);
    const std::vector<float> logits = ours.forward_logits(acts, tokens.data());
    const hf::ForwardResult r = back.forward(tokens);
    ASSERT_EQ(r.logits.size(), logits.size()) << k.what;
    double largest = 0, diff = 0;
    for (size_t i = 0; i < r.logits.size(); ++i) {
      largest = std::max(largest, std::abs(static_cast<double>(logits[i])));
      diff = std::max(diff, std::abs(static_cast<double>(r.logits[i]) - logits[i]));
    }
    EXPECT_LT(diff, 1e-4 * std::max(1.0, largest)) << k.what;
  }
  // Every row is read back; every row but the Llama MLP biases' (no format export writes has them) is written.
  for (const hf::NameScheme* names : {&hf::gpt2_names(), &hf::llama_names()})
    for (const hf::NameRow& row : names->rows) {
      EXPECT_TRUE(read.count(&row)) << names->label << ": " << row.hf << " never read";
      const bool import_only = names == &hf::llama_names() && row.when == hf::When::MlpBias;
      EXPECT_EQ(written.count(&row) == 0, import_only) << names->label << ": " << row.hf;
    }
}

TEST(HfNames, MissingEmbeddingNamesEveryPrefixTried) {
  const fs::path dir = blocklab::testing::fresh_dir("hf_names_noembed");
  const ModelConfig config = small_model("gpt2");
  std::ofstream(dir / "config.json") << hf::hf_config_json(config, hf::ExportFormat::GPT2).dump(2);
  const std::vector<float> zeros(4);
  io::write_safetensors((dir / "model.safetensors").string(), {io::tensor_view("other.weight", {4}, zeros)});
  try {
    hf::Model::load(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no GPT-2 token embedding (expected \"wte.weight\" or "
                                         "\"transformer.wte.weight\")"),
              std::string::npos)
        << e.what();
  }
}
