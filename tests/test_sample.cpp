// Sampling from a trained run (train/sample.h): greedy is the forward's argmax, top-k stays in the top k,
// temperature draws follow the softmax, a seed fixes the sample, the window slides, and the weights come
// from the run's final model or its newest checkpoint that verifies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "cli_runner.h"
#include "io/checkpoint.h"
#include "model/model.h"
#include "optional_parts.h"
#include "train/run.h"
#include "train/sample.h"
#include "util/error.h"

using namespace blocklab;
namespace fs = std::filesystem;

namespace {

ModelConfig small_model(int seq_len = 12) {
  ModelConfig m;
  m.layers = 2;
  m.width = 16;
  m.heads = 2;
  m.vocab = 11;
  m.seq_len = seq_len;
  m.norm_placement = NormPlacement::Pre;
  return m;
}

// The argmax of the last position's logits of one plain forward over exactly these tokens.
int32_t reference_argmax(const Model<float>& model, const std::vector<int32_t>& tokens) {
  const int n = static_cast<int>(tokens.size()), V = model.config().vocab;
  Activations<float> acts = model.make_activations(1, n);
  const std::vector<float> all = model.forward_logits(acts, tokens.data());
  const auto logits = std::span<const float>(all).subspan(static_cast<size_t>(n - 1) * V, V);
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

RunConfig text_run(const fs::path& out, int steps) {
  RunConfig c;
  c.task = "text";
  c.data = (fs::path(BLOCKLAB_TEST_DATA) / "web_ruth_jonah.txt").string();
  c.model.layers = 1;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.seq_len = 16;
  c.batch = 4;
  c.steps = steps;
  c.eval_every = 5;
  c.threads = 1;
  c.out = out.string();
  return c;
}

}  // namespace

TEST(Sample, GreedyEqualsTheArgmaxOfTheForwardsLogitsAndTheWindowSlides) {
  Model<float> model(small_model(12));
  model.init_weights(3);
  std::vector<int32_t> text = {1, 4, 1, 5, 9};
  SampleOptions greedy;
  greedy.temperature = 0;
  greedy.tokens = 20;  // 25 tokens in all: the window of 12 slides
  const std::vector<int32_t> added = generate(model, text, greedy);
  ASSERT_EQ(added.size(), 20u);
  for (int32_t id : added) {
    const std::vector<int32_t> window(text.end() - std::min<size_t>(text.size(), 12), text.end());
    EXPECT_EQ(id, reference_argmax(model, window));
    text.push_back(id);
  }
  // A prompt longer than the window: only its last seq_len tokens count.
  std::vector<int32_t> long_prompt(30, 2);
  std::vector<int32_t> tail(long_prompt.end() - 12, long_prompt.end());
  long_prompt[0] = 7;  // outside the window
  greedy.tokens = 3;
  EXPECT_EQ(generate(model, long_prompt, greedy), generate(model, tail, greedy));
}

TEST(Sample, TopKNeverPicksOutsideTheTopK) {
  Rng values(11);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(50);
    for (float& v : logits) v = static_cast<float>(values.normal());
    std::vector<int32_t> order(50);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    for (int k : {1, 3, 10}) {
      const std::set<int32_t> top(order.begin(), order.begin() + k);
      Rng rng(trial);
      std::set<int32_t> seen;
      for (int draw = 0; draw < 300; ++draw) {
        const int32_t id = choose_token(logits, /*temperature=*/5.0, k, rng);  // hot: tails are likely
        ASSERT_TRUE(top.count(id)) << "k " << k << " picked " << id;
        seen.insert(id);
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(k));  // and every one of the k is reachable
    }
  }
}

TEST(Sample, TemperatureDrawsFollowTheSoftmax) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  for (double temperature : {0.5, 1.0, 2.0}) {
    std::vector<double> p(4);
    double total = 0;
    for (int i = 0; i < 4; ++i) total += p[i] = std::exp(logits[i] / temperature);
    Rng rng(5);
    std::vector<int> counts(4, 0);
    const int draws = 40000;
    for (int d = 0; d < draws; ++d) ++counts[choose_token(logits, temperature, 0, rng)];
    for (int i = 0; i < 4; ++i) {
      const double expected = p[i] / total, sd = std::sqrt(expected * (1 - expected) / draws);
      EXPECT_NEAR(counts[i] / double(draws), expected, 5 * sd) << "temperature " << temperature << " id " << i;
    }
  }
  Rng rng(0);
  EXPECT_EQ(choose_token(logits, 0.0, 0, rng), 0);  // greedy
  EXPECT_EQ(choose_token(std::vector<float>{1.0f, 3.0f, 3.0f}, 0.0, 0, rng), 1);  // ties: the first
}

TEST(Sample, TheSameSeedGivesTheSameSample) {
  Model<float> model(small_model());
  model.init_weights(4);
  const std::vector<int32_t> prompt = {3, 1, 4};
  SampleOptions o;
  o.tokens = 30;
  o.temperature = 1.5;
  o.top_k = 6;
  o.seed = 42;
  const auto a = generate(model, prompt, o), b = generate(model, prompt, o);
  EXPECT_EQ(a, b);
  o.seed = 43;
  EXPECT_NE(generate(model, prompt, o), a);
}

TEST(Sample, BadOptionsAndPromptsAreRefusedByName) {
  Model<float> model(small_model());
  model.init_weights(0);
  SampleOptions o;
  auto message = [&](const std::vector<int32_t>& prompt, SampleOptions opts) -> std::string {
    try {
      generate(model, prompt, opts);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message({}, o).find("the prompt has no tokens"), std::string::npos);
  EXPECT_NE(message({3, 11}, o).find("prompt token id 11 is outside the model's vocab 0..10"), std::string::npos);
  o.top_k = 12;
  EXPECT_NE(message({1}, o).find("top_k must be in 0..11"), std::string::npos);
  o.top_k = 0;
  o.temperature = -1;
  EXPECT_NE(message({1}, o).find("temperature must be"), std::string::npos);
  o.temperature = 1;
  o.tokens = 0;
  EXPECT_NE(message({1}, o).find("tokens must be at least 1"), std::string::npos);
  EXPECT_EQ(parse_id_list("1, 2,3"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_THROW(parse_id_list("1,,2"), Error);
  EXPECT_THROW(parse_id_list("a"), Error);
  EXPECT_THROW(parse_id_list("-1"), Error);
}

TEST(LoadRunModel, TakesTheFinalModelOrALaterCheckpointThatVerifies) {
  BLOCKLAB_NEEDS_TEXT();
  const fs::path dir = blocklab::testing::fresh_dir("sample_load");
  RunConfig c = text_run(dir / "run", 6);
  c.checkpoint_every = 3;
  train_run(c, false);
  RunModel final_run = load_run_model(dir / "run");
  EXPECT_EQ(final_run.weights.filename(), "model.safetensors");
  EXPECT_EQ(final_run.weights.parent_path(), dir / "run");
  EXPECT_EQ(final_run.step, 6);
  ASSERT_TRUE(final_run.tokenizer);
  EXPECT_TRUE(final_run.tokenizer->is_bytes());
  EXPECT_EQ(final_run.config.model.vocab, 256);

  // The final model and the step-6 checkpoint hold the same weights.
  fs::remove(dir / "run" / "model.safetensors");
  RunModel from_checkpoint = load_run_model(dir / "run");
  EXPECT_EQ(from_checkpoint.weights.parent_path().filename(), io::checkpoint_name(6));
  EXPECT_EQ(from_checkpoint.step, 6);
  const auto a = final_run.model.params(), b = from_checkpoint.model.params();
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));

  // A damaged newest checkpoint is passed over (with a note) for the one before it.
  {
    std::fstream f(dir / "run" / "checkpoints" / io::checkpoint_name(6) / "model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x55');
  }
  RunModel older = load_run_model(dir / "run");
  EXPECT_EQ(older.step, 3);
  EXPECT_FALSE(older.notes.empty());

  // Nothing to load: a clear error.
  fs::remove_all(dir / "run" / "checkpoints");
  try {
    load_run_model(dir / "run");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no weights to sample from"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_run_model(dir / "nonexistent"), Error);
}
