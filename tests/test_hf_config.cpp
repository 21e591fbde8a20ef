// Hugging Face config.json parsing (src/hf/config.h): the published Qwen3-4B, Qwen3-VL-4B and GPT-2
// configs (tests/data/hf/configs) resolve to the right blocks and projection shapes; bad configs are
// clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hf/config.h"
#include "util/error.h"

namespace {

using blocklab::Error;
using namespace blocklab::hf;
namespace fs = std::filesystem;

const fs::path kConfigs = fs::path(BLOCKLAB_TEST_DATA) / "hf" / "configs";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

void expect_qwen3_4b_language_model(const Config& c) {
  EXPECT_EQ(c.family, Family::Qwen3);
  // the block engine's vocabulary: a Pre-LN qwen3 block with separate q/k/v and RoPE
  EXPECT_EQ(c.model.block, "qwen3");
  EXPECT_EQ(c.model.norm_placement, blocklab::NormPlacement::Pre);
  EXPECT_EQ(c.model.positions, blocklab::Positions::RoPE);
  EXPECT_EQ(c.model.qkv, blocklab::QkvLayout::Separate);
  EXPECT_EQ(c.model.layers, 36);
  EXPECT_EQ(c.model.width, 2560);
  EXPECT_EQ(c.model.mlp_hidden(), 9728);
  EXPECT_EQ(c.model.heads, 32);
  EXPECT_EQ(c.model.kv_heads, 8);
  EXPECT_EQ(c.model.head_size(), 128);   // not hidden / heads = 80
  EXPECT_EQ(c.model.q_dim(), 4096);   // q_proj 2560 -> 4096
  EXPECT_EQ(c.model.kv_dim(), 1024);  // k_proj, v_proj 2560 -> 1024
  EXPECT_EQ(c.model.vocab, 151936);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-6);
  EXPECT_EQ(c.model.norm, blocklab::NormKind::RMSNorm);
  EXPECT_EQ(c.model.mlp, blocklab::MlpKind::SwiGLU);
  EXPECT_TRUE(c.model.qk_norm);
  EXPECT_FALSE(c.model.qkv_bias);
  EXPECT_FALSE(c.model.proj_bias);
  EXPECT_TRUE(c.model.tie_head);
  EXPECT_EQ(c.rope_scaling.kind, blocklab::RopeScaling::Kind::None);
}

TEST(HfConfig, Qwen3_4B) {
  const Config c = load_config(kConfigs / "qwen3_4b.json");
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_FALSE(c.multimodal_wrapper);
  expect_qwen3_4b_language_model(c);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 1e6);
  // The published count: 4.02 B parameters (embedding tied, counted once).
  EXPECT_EQ(c.parameter_count(), 4'022'468'096);
}

TEST(HfConfig, Qwen3_VL_4B_LanguageModelFromTextConfig) {
  const Config c = load_config(kConfigs / "qwen3_vl_4b.json");
  EXPECT_EQ(c.model_type, "qwen3_vl");
  EXPECT_TRUE(c.multimodal_wrapper);
  expect_qwen3_4b_language_model(c);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 5e6);
  EXPECT_TRUE(c.multimodal_rope);
  EXPECT_EQ(c.parameter_count(), 4'022'468'096);
}

TEST(HfConfig, Gpt2Small) {
  const Config c = load_config(kConfigs / "gpt2.json");
  EXPECT_EQ(c.family, Family::GPT2);
  EXPECT_EQ(c.model.layers, 12);
  EXPECT_EQ(c.model.width, 768);
  EXPECT_EQ(c.model.heads, 12);
  EXPECT_EQ(c.model.head_size(), 64);
  EXPECT_EQ(c.model.mlp_hidden(), 3072);  // n_inner absent: 4 x n_embd
  EXPECT_EQ(c.max_positions, 1024);
  EXPECT_EQ(c.model.norm, blocklab::NormKind::LayerNorm);
  EXPECT_EQ(c.model.mlp, blocklab::MlpKind::GeluTanh);
  EXPECT_EQ(c.model.positions, blocklab::Positions::Learned);
  EXPECT_EQ(c.model.qkv, blocklab::QkvLayout::Fused);
  EXPECT_TRUE(c.model.qkv_bias && c.model.proj_bias && c.model.mlp_bias);
  EXPECT_TRUE(c.model.tie_head);
  EXPECT_EQ(c.parameter_count(), 124'439'808);  // GPT-2 small, the published 124 M
}

TEST(HfConfig, DirectoryReadsConfigJson) {
  const Config c = load_config(fs::path(BLOCKLAB_TEST_DATA) / "hf" / "qwen2");
  EXPECT_EQ(c.family, Family::Qwen2);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 50000.0);  // from rope_parameters (transformers v5 layout)
  EXPECT_TRUE(c.model.qkv_bias);
  EXPECT_FALSE(c.model.proj_bias);
  EXPECT_EQ(c.model.head_size(), 4);  // no head_dim: hidden / heads
}

TEST(HfConfig, TieFlagOfTextConfigWins) {
  nlohmann::json j = read_json(kConfigs / "qwen3_vl_4b.json");
  j["tie_word_embeddings"] = true;
  j["text_config"]["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse_config(j.dump(), "c.json").model.tie_head);
  j["text_config"].erase("tie_word_embeddings");
  EXPECT_TRUE(parse_config(j.dump(), "c.json").model.tie_head);  // top level applies
  j["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse_config(j.dump(), "c.json").model.tie_head);
}

TEST(HfConfig, LlamaRopeScalingAndBiases) {
  nlohmann::json j = read_json(kConfigs / "qwen3_4b.json");
  j["model_type"] = "llama";
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const Config c = parse_config(j.dump(), "c.json");
  EXPECT_EQ(c.family, Family::Llama);
  EXPECT_FALSE(c.model.qk_norm);
  EXPECT_TRUE(c.model.qkv_bias && c.model.proj_bias && c.model.mlp_bias);
  EXPECT_EQ(c.rope_scaling.kind, blocklab::RopeScaling::Kind::Llama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
}

TEST(HfConfig, BadConfigsAreClearErrors) {
  const nlohmann::json good = read_json(kConfigs / "qwen3_4b.json");
  auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      parse_config(text, "my/config.json");
      ADD_FAILURE() << "no error, expected: " << needle;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.rfind("my/config.json: ", 0), 0u) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  auto with = [&](auto edit) {
    nlohmann::json j = good;
    edit(j);
    return j.dump();
  };
  expect_error("{", "not valid JSON");
  expect_error("[1, 2]", "not a JSON object");
  expect_error(with([](auto& j) { j.erase("model_type"); }), "missing \"model_type\"");
  expect_error(with([](auto& j) { j["model_type"] = "mamba"; }), "model_type \"mamba\" is not supported");
  expect_error(with([](auto& j) { j.erase("num_hidden_layers"); }), "missing required field \"num_hidden_layers\"");
  expect_error(with([](auto& j) { j["hidden_size"] = "big"; }), "\"hidden_size\" is not an integer");
  expect_error(with([](auto& j) { j["num_key_value_heads"] = 0; }), "must be a positive integer");
  expect_error(with([](auto& j) { j["num_key_value_heads"] = 5; }), "not a multiple of num_key_value_heads");
  expect_error(with([](auto& j) {
                 j.erase("head_dim");
                 j["num_attention_heads"] = 3;
                 j["num_key_value_heads"] = 1;
               }),
               "not divisible");
  expect_error(with([](auto& j) { j["head_dim"] = 7; }), "must be even");
  expect_error(with([](auto& j) { j["hidden_act"] = "relu"; }), "hidden_act");
  expect_error(with([](auto& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; }), "\"yarn\"");
  expect_error(with([](auto& j) { j["rope_theta"] = -1; }), "rope_theta");
  expect_error(with([](auto& j) { j["use_sliding_window"] = true; }), "sliding-window");
  expect_error(with([](auto& j) { j["tie_word_embeddings"] = "yes"; }), "tie_word_embeddings");
  expect_error(with([](auto& j) { j["model_type"] = "qwen3_vl"; }), "text_config");
  expect_error(with([](auto& j) {
                 j["model_type"] = "qwen3_vl";
                 j["text_config"] = {{"model_type", "qwen3_vl_text"}};
               }),
               "\"text_config.num_hidden_layers\"");
  nlohmann::json gpt2 = read_json(kConfigs / "gpt2.json");
  gpt2["activation_function"] = "swish";
  expect_error(gpt2.dump(), "activation_function");
  gpt2 = read_json(kConfigs / "gpt2.json");
  gpt2.erase("n_positions");
  expect_error(gpt2.dump(), "\"n_positions\"");
  EXPECT_THROW(load_config(kConfigs / "missing.json"), Error);
}

}  // namespace
