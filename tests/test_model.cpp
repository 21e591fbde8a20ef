// Whole-model checks: every parameter's gradient against central differences (double precision) for
// {post, pre} x {layernorm, rmsnorm}, shapes and names of the parameter table, initialisation, and
// bit-identical results for any thread count.
#include <gtest/gtest.h>

#include <cmath>

#include "data/copy_task.h"
#include "gradcheck.h"
#include "model/model.h"
#include "util/error.h"
#include "util/threads.h"

using namespace blocklab;

namespace {
ModelConfig tiny_config(NormPlacement placement, NormKind norm) {
  ModelConfig c;
  c.norm_placement = placement;
  c.norm = norm;
  c.layers = 2;
  c.width = 8;
  c.heads = 2;
  c.vocab = 7;
  c.seq_len = 5;
  return c;
}

// Random values everywhere (biases and norm parameters too), so every term of the backward pass matters.
template <typename T>
void randomise(Model<T>& model, uint64_t seed) {
  Rng rng(seed);
  for (const ParamSpec& s : model.table().specs()) {
    auto p = model.param(s.name);
    const bool norm_weight = s.role == ParamRole::NormWeight;
    for (auto& x : p) x = static_cast<T>((norm_weight ? 1.0 : 0.0) + (norm_weight ? 0.2 : 0.5) * rng.normal());
  }
}
}  // namespace

class WholeModel : public ::testing::TestWithParam<std::tuple<NormPlacement, NormKind>> {};

TEST_P(WholeModel, EveryParameterGradientMatchesFiniteDifferences) {
  const auto [placement, norm] = GetParam();
  const ModelConfig config = tiny_config(placement, norm);
  const int B = 2;
  set_num_threads(1);  // thousands of tiny forward passes: threads would only add overhead
  Model<double> model(config, B, config.seq_len);
  randomise(model, 7);
  CopyTask task(config.vocab, 3, 11);
  Batch batch;
  task.next(batch, B);
  auto loss = [&] { return model.forward(batch.inputs.data(), batch.targets.data(), batch.loss_mask.data()); };
  loss();
  model.backward();
  std::vector<double> analytic(model.grads().begin(), model.grads().end());
  for (const ParamSpec& s : model.table().specs()) {
    auto p = model.param(s.name);
    std::vector<double> x(p.begin(), p.end());
    std::vector<double> g(analytic.begin() + s.offset, analytic.begin() + s.offset + s.numel);
    auto loss_at = [&] {
      std::copy(x.begin(), x.end(), p.begin());
      return loss();
    };
    blocklab::testing::expect_gradient_matches(s.name, x, g, loss_at, 1e-4, 1e-6);
    std::copy(x.begin(), x.end(), p.begin());
  }
}

TEST_P(WholeModel, ThreadCountDoesNotChangeResults) {
  const auto [placement, norm] = GetParam();
  ModelConfig config = tiny_config(placement, norm);
  config.width = 32;
  config.heads = 4;
  config.layers = 3;
  config.vocab = 16;
  config.seq_len = 15;
  const int B = 8;
  CopyTask task(config.vocab, 8, 5);
  Batch batch;
  task.next(batch, B);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Model<float> model(config, B, config.seq_len);
    model.init_weights(3);
    const float loss = model.forward(batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
    model.backward();
    return std::make_pair(loss, std::vector<float>(model.grads().begin(), model.grads().end()));
  };
  const auto one = run(1);
  const auto two = run(2);
  set_num_threads(0);
  EXPECT_EQ(one.first, two.first);
  ASSERT_EQ(one.second.size(), two.second.size());
  size_t differing = 0;
  for (size_t i = 0; i < one.second.size(); ++i) differing += one.second[i] != two.second[i];
  EXPECT_EQ(differing, 0u) << "gradients differ between 1 and 2 threads";
}

INSTANTIATE_TEST_SUITE_P(Variants, WholeModel,
                         ::testing::Combine(::testing::Values(NormPlacement::Post, NormPlacement::Pre),
                                            ::testing::Values(NormKind::LayerNorm, NormKind::RMSNorm)),
                         [](const auto& info) {
                           return to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param));
                         });

TEST(ParameterTable, NamesAndShapesFollowPyTorch) {
  ModelConfig c;  // 24 x 128, 4 heads, V 64, T 63, Pre-LN LayerNorm
  ParameterTable table(c);
  EXPECT_EQ(table.at("tok_emb.weight").shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(table.at("pos_emb.weight").shape, (std::vector<int64_t>{63, 128}));
  EXPECT_EQ(table.at("blocks.3.mlp.fc2.weight").shape, (std::vector<int64_t>{128, 512}));
  EXPECT_EQ(table.at("blocks.23.attn.qkv.weight").shape, (std::vector<int64_t>{384, 128}));
  EXPECT_EQ(table.at("final_norm.bias").shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(table.at("head.weight").shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(table.find("head.bias"), nullptr);
  EXPECT_EQ(table.find("blocks.24.norm1.weight"), nullptr);
  long numel = 0;
  for (const auto& s : table.specs()) numel += s.numel;
  // per block: 2 norms (2C each) + qkv (3C^2+3C) + proj (C^2+C) + fc1 (4C^2+4C) + fc2 (4C^2+C)
  const long C = 128, per_block = 4 * C + 12 * C * C + 9 * C;
  EXPECT_EQ(numel, 64 * C + 63 * C + 24 * per_block + 2 * C + 64 * C);

  c.norm_placement = NormPlacement::Post;
  c.norm = NormKind::RMSNorm;
  ParameterTable post(c);
  EXPECT_EQ(post.find("final_norm.weight"), nullptr);
  EXPECT_EQ(post.find("blocks.0.norm1.bias"), nullptr);
  EXPECT_NE(post.find("blocks.0.norm1.weight"), nullptr);
  EXPECT_THROW(post.at("nope"), Error);
}

TEST(ModelInit, XavierBoundsZeroBiasesUnitNorms) {
  ModelConfig c = tiny_config(NormPlacement::Pre, NormKind::LayerNorm);
  c.width = 64;
  c.heads = 4;
  Model<float> model(c, 1, c.seq_len);
  model.init_weights(42);
  auto qkv = model.param("blocks.0.attn.qkv.weight");  // (192, 64)
  const double bound = std::sqrt(6.0 / (192 + 64));
  double sumsq = 0;
  for (float x : qkv) {
    EXPECT_LE(std::abs(x), bound);
    sumsq += x * x;
  }
  // U(-a, a) has variance a^2/3
  EXPECT_NEAR(sumsq / qkv.size(), bound * bound / 3, 0.1 * bound * bound / 3);
  for (float x : model.param("blocks.1.mlp.fc1.bias")) EXPECT_EQ(x, 0.f);
  for (float x : model.param("blocks.1.norm2.weight")) EXPECT_EQ(x, 1.f);
  auto emb = model.param("tok_emb.weight");
  double esq = 0;
  for (float x : emb) esq += x * x;
  EXPECT_NEAR(esq / emb.size(), 1.0, 0.15);  // N(0, 1) by default
  // Same seed, same weights; another seed, other weights.
  Model<float> again(c, 1, c.seq_len), other(c, 1, c.seq_len);
  again.init_weights(42);
  other.init_weights(43);
  EXPECT_TRUE(std::equal(model.params().begin(), model.params().end(), again.params().begin()));
  EXPECT_FALSE(std::equal(model.params().begin(), model.params().end(), other.params().begin()));
}

TEST(ModelConfig, RejectsBadShapes) {
  ModelConfig c;
  c.heads = 5;
  EXPECT_THROW(c.validate(), Error);
  c = ModelConfig{};
  c.layers = 0;
  EXPECT_THROW(c.validate(), Error);
  c = ModelConfig{};
  EXPECT_THROW(Model<float>(c, 0, 10), Error);
  EXPECT_THROW(Model<float>(c, 1, 64), Error);  // longer than the position table
}

TEST(ModelForward, RejectsOutOfRangeTokens) {
  ModelConfig c = tiny_config(NormPlacement::Pre, NormKind::LayerNorm);
  Model<float> model(c, 1, c.seq_len);
  std::vector<int32_t> inputs = {0, 1, 2, 7, 0}, targets = {1, 2, 3, 4, 5};
  std::vector<uint8_t> mask = {0, 0, 1, 1, 1};
  EXPECT_THROW(model.forward(inputs.data(), targets.data(), mask.data()), Error);
  inputs[3] = 1;
  std::vector<uint8_t> none(5, 0);
  EXPECT_THROW(model.forward(inputs.data(), targets.data(), none.data()), Error);
  EXPECT_NO_THROW(model.forward(inputs.data(), targets.data(), mask.data()));
}
