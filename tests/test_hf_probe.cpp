// Tests for src/hf/probe: the top-k softmax of the logits probe, and the residual probe on a tiny
// Hugging Face fixture with the files it writes (the CLI tests compare its numbers with PyTorch's).
#include "probe/hf_probe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/metrics.h"
#include "io/safetensors.h"
#include "util/error.h"

using namespace blocklab;
namespace fs = std::filesystem;

namespace {
const fs::path kHf = fs::path(BLOCKLAB_TEST_DATA) / "hf";
}

TEST(HfProbe, TopTokensAreASoftmaxInDoubleWithTiesByID) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  double sum = 0;
  for (float z : logits) sum += std::exp(static_cast<double>(z));
  const auto top = probe::top_tokens(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1);  // 3.0 twice: the lower id first
  EXPECT_EQ(top[1].id, 3);
  EXPECT_EQ(top[2].id, 0);
  EXPECT_NEAR(top[0].probability, std::exp(3.0) / sum, 1e-15);
  EXPECT_NEAR(top[2].probability, std::exp(1.0) / sum, 1e-15);
  EXPECT_EQ(top[2].logit, 1.0f);
  // Large logits do not overflow: the maximum is subtracted first.
  const auto big = probe::top_tokens(std::vector<float>{1000.0f, 999.0f}, 5);
  ASSERT_EQ(big.size(), 2u);  // no more than the vocabulary
  EXPECT_NEAR(big[0].probability, 1 / (1 + std::exp(-1.0)), 1e-15);
  EXPECT_THROW(probe::top_tokens(logits, 0), Error);
  EXPECT_THROW(probe::top_tokens(std::vector<float>{}, 1), Error);
}

TEST(HfProbe, ResidualProbeMeasuresEveryLayerAndWritesItsFiles) {
  const hf::Model model = hf::Model::load(kHf / "qwen3");
  const int L = model.config().model.layers, C = model.config().model.width;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<int> seen;
  probe::ResidualProbeOptions options;
  options.save_hidden = true;
  options.on_layer = [&](const probe::ResidualLayerStats& s) { seen.push_back(s.layer); };
  const probe::ResidualProbeResult r = probe::probe_residual(model, tokens, options);
  ASSERT_EQ(static_cast<int>(r.layers.size()), L + 1);
  EXPECT_EQ(static_cast<int>(seen.size()), L + 1);
  EXPECT_EQ(seen.back(), L);
  EXPECT_EQ(r.hidden.size(), static_cast<size_t>(L + 1) * tokens.size() * C);
  EXPECT_EQ(r.layers[0].relative_update, 0.0);

  const fs::path dir = blocklab::testing::fresh_dir("hf_probe");
  probe::ResidualProbeRun run{(kHf / "qwen3").string(), std::nullopt, tokens, 1.5};
  const probe::WrittenFiles written = probe::write_residual_probe(dir, model, run, r);
  EXPECT_EQ(written.names, (std::vector<std::string>{"residual.csv", "residual.json", "hidden_states.safetensors"}));
  const io::MetricsTable csv = io::read_metrics((dir / "residual.csv").string());
  ASSERT_EQ(static_cast<int>(csv.rows.size()), L + 1);
  EXPECT_EQ(csv.rows[L][0], L);
  EXPECT_NEAR(csv.rows[L][1], r.layers[L].mean_vector_norm, 1e-8 * r.layers[L].mean_vector_norm);
  const auto json = nlohmann::json::parse(blocklab::testing::read_text(dir / "residual.json"));
  EXPECT_EQ(json["tokens"], nlohmann::json(tokens));
  EXPECT_EQ(json["layers"], L);
  EXPECT_FALSE(json.contains("text"));
  EXPECT_DOUBLE_EQ(json["total_seconds"].get<double>(), 1.5);
  const io::SafetensorsReader hidden((dir / "hidden_states.safetensors").string());
  EXPECT_EQ(hidden.at("hidden_states").shape, (std::vector<int64_t>{L + 1, 4, C}));
  EXPECT_EQ(hidden.read_f32("hidden_states"), r.hidden);
  EXPECT_EQ(hidden.read_i64("tokens"), (std::vector<int64_t>{1, 2, 3, 4}));

  // Without save_hidden nothing is kept, and the logits probe lists its top tokens.
  EXPECT_TRUE(probe::probe_residual(model, tokens).hidden.empty());
  probe::LogitsProbeOptions top;
  top.top = 3;
  const auto next = probe::probe_logits(model, tokens, top);
  ASSERT_EQ(next.size(), 3u);
  EXPECT_GE(next[0].logit, next[1].logit);
  EXPECT_GE(next[1].logit, next[2].logit);
}
