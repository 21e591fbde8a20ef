// The `blocklab probe residual`, `blocklab probe logits` and `blocklab inspect` commands on the tiny
// Hugging Face fixtures (tests/data/hf), run as a user would, including their error handling.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_runner.h"
#include "io/metrics.h"
#include "io/safetensors.h"
#include "optional_parts.h"

namespace {

using blocklab::testing::fresh_dir;
using blocklab::testing::read_text;
using blocklab::testing::run_cli;
namespace fs = std::filesystem;

const fs::path kHf = fs::path(BLOCKLAB_TEST_DATA) / "hf";

// The path in single quotes, for the shell (appended, not "'" + ..., which trips gcc 12's -Wrestrict).
std::string q(const fs::path& p) {
  std::string quoted = "'";
  quoted += p.string();
  quoted += '\'';
  return quoted;
}

bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

// A one-line error on stderr and exit status 2.
void expect_clean_error(const blocklab::testing::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.rfind("blocklab: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

std::vector<int64_t> reference_tokens(const std::string& model) {
  blocklab::io::SafetensorsReader r((kHf / model / "reference.safetensors").string());
  return r.read_i64("tokens");
}

std::string token_flag(const std::vector<int64_t>& tokens) {
  std::string s;
  for (int64_t t : tokens) {
    if (!s.empty()) s += ',';
    s += std::to_string(t);
  }
  return s;
}

TEST(CliProbe, ResidualNormsMatchTheReferenceHiddenStates) {
  // The CSV's norms, recomputed from the PyTorch reference's hidden states.
  for (const std::string model : {"qwen3", "gpt2"}) {
    const fs::path out = fresh_dir("probe_res_" + model);
    const std::vector<int64_t> tokens = reference_tokens(model);
    const auto r = run_cli("probe residual --model " + q(kHf / model) + " --tokens " + token_flag(tokens) + " --out " +
                           q(out) + " --force");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("random walk"), std::string::npos) << r.out;

    blocklab::io::SafetensorsReader ref((kHf / model / "reference.safetensors").string());
    const blocklab::io::TensorEntry& e = ref.at("hidden_states");
    const std::vector<double> h = ref.read_f64("hidden_states");
    const int64_t L1 = e.shape[0], T = e.shape[1], C = e.shape[2];
    const blocklab::io::MetricsTable csv = blocklab::io::read_metrics((out / "residual.csv").string());
    ASSERT_EQ(static_cast<int64_t>(csv.rows.size()), L1);
    const int c_mean = csv.column("mean_vector_norm"), c_tok = csv.column("mean_token_norm"),
              c_sqrt = csv.column("sqrt_layer_plus_1"), c_upd = csv.column("relative_update");
    ASSERT_GE(c_mean, 0);
    ASSERT_GE(c_tok, 0);
    ASSERT_GE(c_sqrt, 0);
    ASSERT_GE(c_upd, 0);
    for (int64_t l = 0; l < L1; ++l) {
      std::vector<double> mean(C, 0.0);
      double tok = 0, upd = 0;
      for (int64_t t = 0; t < T; ++t) {
        double sq = 0, dsq = 0, psq = 0;
        for (int64_t c = 0; c < C; ++c) {
          const double x = h[(l * T + t) * C + c];
          mean[c] += x / T;
          sq += x * x;
          if (l > 0) {
            const double p = h[((l - 1) * T + t) * C + c];
            dsq += (x - p) * (x - p);
            psq += p * p;
          }
        }
        tok += std::sqrt(sq) / T;
        if (l > 0) upd += std::sqrt(dsq / psq) / T;
      }
      double msq = 0;
      for (double m : mean) msq += m * m;
      const auto& row = csv.rows[l];
      EXPECT_EQ(row[0], l);
      EXPECT_NEAR(row[c_mean], std::sqrt(msq), 1e-5 * std::sqrt(msq)) << model << " layer " << l;
      EXPECT_NEAR(row[c_tok], tok, 1e-5 * tok) << model << " layer " << l;
      EXPECT_NEAR(row[c_upd], upd, 1e-5 * std::max(upd, 1e-3)) << model << " layer " << l;
      EXPECT_NEAR(row[c_sqrt], std::sqrt(l + 1.0), 1e-8);
    }
    const nlohmann::json summary = nlohmann::json::parse(read_text(out / "residual.json"));
    EXPECT_EQ(summary["tokens"].size(), static_cast<std::size_t>(T));
    EXPECT_EQ(summary["layers"].get<int64_t>(), L1 - 1);
    EXPECT_TRUE(fs::exists(out / "residual.gp"));
    if (have_gnuplot()) {
      EXPECT_GT(fs::file_size(out / "residual.png"), 1000u) << r.err;
      EXPECT_NE(read_text(out / "residual.svg").find("<svg"), std::string::npos);
    }
    fs::remove_all(out);
  }
}

TEST(CliProbe, ResidualFromTextWithHiddenStatesAndOverwriteProtection) {
  BLOCKLAB_NEEDS_TEXT();
  const fs::path out = fresh_dir("probe_text");
  const std::string cmd = "probe residual --model " + q(kHf / "qwen3") + " --text 'the cat sat on the mat' --out " +
                          q(out) + " --save-hidden --no-plot";
  const auto r = run_cli(cmd);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(fs::exists(out / "residual.png"));
  blocklab::io::SafetensorsReader h((out / "hidden_states.safetensors").string());
  const auto& e = h.at("hidden_states");
  const std::vector<int64_t> tokens = h.read_i64("tokens");
  EXPECT_EQ(e.shape, (std::vector<int64_t>{4, static_cast<int64_t>(tokens.size()), 32}));
  // With the fixture's 15 merges: t|he Ġcat Ġsat Ġ|on Ġthe Ġm|at ("o n" ranks before "Ġo n").
  EXPECT_EQ(tokens, (std::vector<int64_t>{116, 257, 261, 268, 32, 264, 258, 266, 260}));

  const auto again = run_cli(cmd);
  expect_clean_error(again, "already holds residual.csv");
  EXPECT_EQ(run_cli(cmd + " --force").status, 0);
  fs::remove_all(out);
}

TEST(CliProbe, LogitsListTheReferenceArgmaxFirst) {
  const std::vector<int64_t> tokens = reference_tokens("qwen3");
  blocklab::io::SafetensorsReader ref((kHf / "qwen3" / "reference.safetensors").string());
  const std::vector<double> logits = ref.read_f64("logits");
  const int V = 300;
  const double* last = logits.data() + (tokens.size() - 1) * V;
  const int argmax = static_cast<int>(std::max_element(last, last + V) - last);

  const auto r = run_cli("probe logits --model " + q(kHf / "qwen3") + " --tokens " + token_flag(tokens) + " --top 5");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::size_t at = r.out.find("rank");
  ASSERT_NE(at, std::string::npos) << r.out;
  std::istringstream rows(r.out.substr(at));
  std::string header, line;
  std::getline(rows, header);
  int n = 0, first_id = -1;
  while (std::getline(rows, line) && !line.empty()) {
    int rank = 0, id = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%d %d", &rank, &id), 2) << line;
    if (n == 0) first_id = id;
    ++n;
  }
  EXPECT_EQ(n, 5);
  EXPECT_EQ(first_id, argmax);
}

TEST(CliProbe, InspectModelDirectoryAndGoldenConfigs) {
  const auto dir = run_cli("inspect " + q(kHf / "qwen3_vl_bf16_sharded"));
  ASSERT_EQ(dir.status, 0) << dir.err;
  EXPECT_NE(dir.out.find("BF16, 2 shards"), std::string::npos) << dir.out;
  EXPECT_NE(dir.out.find("model.visual.patch_embed.proj.weight"), std::string::npos) << dir.out;

  for (const char* config : {"qwen3_4b.json", "qwen3_vl_4b.json"}) {
    const auto r = run_cli("inspect " + q(kHf / "configs" / config));
    ASSERT_EQ(r.status, 0) << r.err;
    for (const char* needle : {"blocks           36", "width            2560", "q_proj         2560 -> 4096",
                               "k_proj         2560 -> 1024", "2560 -> 9728 -> 2560", "4,022,468,096"})
      EXPECT_NE(r.out.find(needle), std::string::npos) << config << " lacks " << needle << "\n" << r.out;
  }
}

TEST(CliProbe, InspectWeightsFileListsTensors) {
  const fs::path shard = kHf / "qwen3_vl_bf16_sharded" / "model-00001-of-00002.safetensors";
  const auto r = run_cli("inspect " + q(shard));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("tensors, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("metadata:\n  format = pt"), std::string::npos) << r.out;
  const std::size_t at = r.out.find("  model.language_model.embed_tokens.weight ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find(" BF16 "), std::string::npos) << line;
  EXPECT_NE(line.find(" [64, 32] "), std::string::npos) << line;
  EXPECT_NE(line.find(" 4096"), std::string::npos) << line;
}

TEST(CliProbe, BadInputsGiveOneLineErrors) {
  BLOCKLAB_NEEDS_TEXT();
  const std::string model = q(kHf / "qwen3");
  const fs::path out = fresh_dir("probe_bad");
  const std::string dest = " --out " + q(out / "o") + " --force";

  expect_clean_error(run_cli("probe residual --model " + model + " --tokens 1,x,3" + dest), "\"x\"");
  expect_clean_error(run_cli("probe residual --model " + model + " --tokens 1,300" + dest), "token id 300");
  expect_clean_error(run_cli("probe residual --model " + model + dest), "--text");
  expect_clean_error(run_cli("probe residual --model " + q(out / "nothing") + " --tokens 1" + dest), "nothing");
  expect_clean_error(run_cli("probe logits --model " + q(kHf / "gpt2") + " --text hi"), "tokenizer.json");
  const auto both = run_cli("probe residual --model " + model + " --tokens 1 --text hi" + dest);
  EXPECT_EQ(both.status, 2);

  // Broken model directories: a missing shard, a truncated shard, an unknown model_type, a malformed tokenizer.
  const fs::path sharded = out / "sharded";
  fs::copy(kHf / "qwen3_vl_bf16_sharded", sharded, fs::copy_options::recursive);
  fs::remove(sharded / "model-00002-of-00002.safetensors");
  expect_clean_error(run_cli("probe residual --model " + q(sharded) + " --tokens 1,2" + dest), "missing shard");
  fs::copy_file(kHf / "qwen3_vl_bf16_sharded" / "model-00002-of-00002.safetensors",
                sharded / "model-00002-of-00002.safetensors");
  fs::resize_file(sharded / "model-00002-of-00002.safetensors",
                  fs::file_size(sharded / "model-00002-of-00002.safetensors") - 8);
  expect_clean_error(run_cli("probe logits --model " + q(sharded) + " --tokens 1,2"), "truncated");
  expect_clean_error(run_cli("inspect " + q(sharded)), "truncated");

  const fs::path unknown = out / "unknown";
  fs::copy(kHf / "qwen2", unknown, fs::copy_options::recursive);
  {
    std::ofstream(unknown / "config.json") << R"({"model_type": "mamba", "hidden_size": 8})";
  }
  expect_clean_error(run_cli("probe residual --model " + q(unknown) + " --tokens 1" + dest), "\"mamba\"");
  expect_clean_error(run_cli("inspect " + q(unknown)), "\"mamba\"");

  const fs::path badtok = out / "badtok";
  fs::copy(kHf / "qwen3", badtok, fs::copy_options::recursive);
  {
    std::ofstream(badtok / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [})";
  }
  expect_clean_error(run_cli("probe residual --model " + q(badtok) + " --text hello" + dest), "tokenizer.json");
  // With --tokens the tokenizer only labels output: a warning, and the probe runs.
  const auto warn = run_cli("probe logits --model " + q(badtok) + " --tokens 1,2 --top 2");
  EXPECT_EQ(warn.status, 0) << warn.err;
  EXPECT_NE(warn.err.find("warning"), std::string::npos) << warn.err;
  fs::remove_all(out);
}

}  // namespace
