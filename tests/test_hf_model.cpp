// Forward pass of Hugging Face models (src/hf/model.h) against the independent PyTorch implementation in
// tools/ref/make_hf_fixtures.py: tiny random-weight Qwen3 (F32, untied), Qwen3-VL (BF16, sharded, tied),
// Qwen2 (q/k/v biases, rope_parameters), Llama (F16, llama3 RoPE scaling) and GPT-2 (Conv1D, learned
// positions). Every layer's hidden state, the final norm and the logits must agree.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "hf/model.h"
#include "io/safetensors.h"
#include "model/rope_scaling.h"
#include "util/error.h"
#include "util/threads.h"

namespace {

using blocklab::Error;
using namespace blocklab::hf;
namespace fs = std::filesystem;

const fs::path kHf = fs::path(BLOCKLAB_TEST_DATA) / "hf";

// max |a - b| / max |b|: the error relative to the tensor's scale.
double relative_error(const float* a, const double* b, std::size_t n) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

struct Reference {
  std::vector<int32_t> tokens;
  std::vector<double> hidden, final_hidden, logits;
};

Reference read_reference(const fs::path& dir) {
  blocklab::io::SafetensorsReader r((dir / "reference.safetensors").string());
  Reference ref;
  for (int64_t t : r.read_i64("tokens")) ref.tokens.push_back(static_cast<int32_t>(t));
  ref.hidden = r.read_f64("hidden_states");
  ref.final_hidden = r.read_f64("final_hidden");
  ref.logits = r.read_f64("logits");
  return ref;
}

// Runs the model on the reference tokens and checks every layer; returns the largest relative error.
double check_parity(const std::string& name, double tolerance, bool stream_weights = false) {
  const fs::path dir = kHf / name;
  const Model model = Model::load(dir);
  const Reference ref = read_reference(dir);
  const blocklab::ModelConfig& c = model.config().model;
  const std::size_t T = ref.tokens.size(), C = c.width;
  EXPECT_EQ(ref.hidden.size(), (c.layers + 1) * T * C);

  std::vector<std::vector<float>> hidden;
  ForwardOptions opt;
  opt.stream_weights = stream_weights;
  opt.on_hidden = [&](int layer, std::span<const float> h) {
    EXPECT_EQ(layer, static_cast<int>(hidden.size()));
    hidden.emplace_back(h.begin(), h.end());
  };
  const ForwardResult r = model.forward(ref.tokens, opt);
  EXPECT_EQ(static_cast<int>(hidden.size()), c.layers + 1);
  double worst = 0;
  for (std::size_t l = 0; l < hidden.size(); ++l) {
    const double e = relative_error(hidden[l].data(), ref.hidden.data() + l * T * C, T * C);
    EXPECT_LT(e, tolerance) << name << " hidden state of layer " << l;
    worst = std::max(worst, e);
  }
  const double ef = relative_error(r.final_hidden.data(), ref.final_hidden.data(), T * C);
  const double el = relative_error(r.logits.data(), ref.logits.data(), ref.logits.size());
  EXPECT_EQ(r.logits.size(), ref.logits.size());
  EXPECT_LT(ef, tolerance) << name << " final norm";
  EXPECT_LT(el, tolerance) << name << " logits";
  worst = std::max({worst, ef, el});
  std::printf("[ parity   ] %-24s max relative error %.2e (hidden states, final norm, logits)\n", name.c_str(), worst);
  return worst;
}

// The task's bounds: 1e-4 relative for F32 weights, 1e-2 for BF16. Both sides compute from the same
// stored (rounded) weights, so the 16-bit models reach the F32 bound too; that is asserted as well.
TEST(HfModel, Qwen3F32MatchesReference) { check_parity("qwen3", 1e-4); }
TEST(HfModel, Qwen3VlBf16ShardedMatchesReference) {
  const double e = check_parity("qwen3_vl_bf16_sharded", 1e-2);
  EXPECT_LT(e, 1e-4);
}
TEST(HfModel, Qwen2WithBiasesMatchesReference) { check_parity("qwen2", 1e-4); }
TEST(HfModel, LlamaF16WithLlama3RopeMatchesReference) {
  const double e = check_parity("llama_f16", 1e-2);
  EXPECT_LT(e, 1e-4);
}
TEST(HfModel, Gpt2MatchesReference) { check_parity("gpt2", 1e-4); }

TEST(HfModel, StreamingWeightsGivesTheSameResult) {
  check_parity("qwen3_vl_bf16_sharded", 1e-4, true);
  check_parity("gpt2", 1e-4, true);
}

TEST(HfModel, LastPositionLogitsEqualTheLastRow) {
  const Model m = Model::load(kHf / "qwen3");
  const std::vector<int32_t> tokens{5, 17, 299, 3};
  const ForwardResult all = m.forward(tokens);
  ForwardOptions opt;
  opt.logits = LogitsFor::Last;
  const ForwardResult last = m.forward(tokens, opt);
  const int V = m.config().model.vocab;
  ASSERT_EQ(last.logits.size(), static_cast<std::size_t>(V));
  for (int v = 0; v < V; ++v) EXPECT_EQ(last.logits[v], all.logits[3 * V + v]);
  opt.logits = LogitsFor::None;
  EXPECT_TRUE(m.forward(tokens, opt).logits.empty());
}

TEST(HfModel, CausalPrefixGivesTheSameHiddenStates) {
  // Position t must not see later tokens: the prefix's hidden states equal the longer run's first rows.
  const Model m = Model::load(kHf / "gpt2");
  const std::vector<int32_t> longer{1, 2, 3, 4, 5, 6}, prefix{1, 2, 3};
  const ForwardResult a = m.forward(longer), b = m.forward(prefix);
  const int C = m.config().model.width;
  for (int i = 0; i < 3 * C; ++i) EXPECT_NEAR(a.final_hidden[i], b.final_hidden[i], 1e-6f);
}

TEST(HfModel, ThreadCountDoesNotChangeTheResult) {
  const Model m = Model::load(kHf / "qwen3");
  const std::vector<int32_t> tokens{9, 8, 7, 6, 5};
  blocklab::set_num_threads(1);
  const ForwardResult one = m.forward(tokens);
  blocklab::set_num_threads(2);
  const ForwardResult two = m.forward(tokens);
  blocklab::set_num_threads(0);
  for (std::size_t i = 0; i < one.logits.size(); ++i) EXPECT_NEAR(one.logits[i], two.logits[i], 1e-5f);
}

TEST(HfModel, BadTokensAreErrors) {
  const Model qwen = Model::load(kHf / "qwen3");
  const std::vector<int32_t> too_big{1, 300}, negative{-1}, empty;
  EXPECT_THROW(qwen.forward(too_big), Error);
  EXPECT_THROW(qwen.forward(negative), Error);
  EXPECT_THROW(qwen.forward(empty), Error);
  const Model gpt2 = Model::load(kHf / "gpt2");
  const std::vector<int32_t> seventeen(17, 1);  // n_positions is 16
  try {
    gpt2.forward(seventeen);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_positions"), std::string::npos) << e.what();
  }
}

TEST(HfModel, ParameterCountsAgreeWithConfig) {
  for (const char* name : {"qwen3", "qwen3_vl_bf16_sharded", "qwen2", "llama_f16", "gpt2"}) {
    const Model m = Model::load(kHf / name);
    EXPECT_EQ(m.parameter_count(), m.config().parameter_count()) << name;
  }
  const Model vl = Model::load(kHf / "qwen3_vl_bf16_sharded");
  ASSERT_EQ(vl.unused_tensors().size(), 1u);
  EXPECT_EQ(vl.unused_tensors()[0], "model.visual.patch_embed.proj.weight");
  EXPECT_EQ(vl.dtype_summary(), "BF16");
  EXPECT_EQ(vl.lm_head_name(), vl.embedding_name());  // tied
}

TEST(HfModel, RopeInverseFrequencies) {
  blocklab::RopeScaling c;
  std::vector<double> f = blocklab::rope_inv_freq(10000, 8, c);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[1], 0.1, 1e-15);
  EXPECT_NEAR(f[3], 0.001, 1e-15);
  c.kind = blocklab::RopeScaling::Kind::Linear;
  c.factor = 4;
  EXPECT_NEAR(blocklab::rope_inv_freq(10000, 8, c)[1], 0.025, 1e-15);
  // Llama 3: wavelengths above old_len / low_freq_factor are divided by factor, below
  // old_len / high_freq_factor kept, in between interpolated.
  c.kind = blocklab::RopeScaling::Kind::Llama3;
  c.factor = 8;
  c.low_freq_factor = 1;
  c.high_freq_factor = 4;
  c.original_max_positions = 16;
  f = blocklab::rope_inv_freq(10000, 8, c);
  const double wavelen0 = 2 * M_PI, smooth = (16 / wavelen0 - 1) / 3;
  EXPECT_NEAR(f[0], (1 - smooth) / 8 + smooth, 1e-15);
  EXPECT_NEAR(f[1], 0.1 / 8, 1e-15);
}

}  // namespace
