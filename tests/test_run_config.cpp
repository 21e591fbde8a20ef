// The config key table: text parsing, TOML files, JSON round trip, validation messages.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "optional_parts.h"
#include "train/run_config.h"
#include "util/error.h"

using namespace blocklab;

namespace {
std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("blocklab_test_" + name);
  std::ofstream(path) << text;
  return path.string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(RunConfig, DefaultsAreTheSourceSetup) {
  RunConfig c;
  resolve(c);
  EXPECT_EQ(c.model.layers, 24);
  EXPECT_EQ(c.model.width, 128);
  EXPECT_EQ(c.model.heads, 4);
  EXPECT_EQ(c.model.vocab, 64);
  EXPECT_EQ(c.copy_len, 32);
  EXPECT_EQ(c.model.seq_len, 63);
  EXPECT_EQ(c.model.effective_init(), InitScheme::Xavier);
  EXPECT_DOUBLE_EQ(c.model.embed_init_std, 1.0);
  EXPECT_DOUBLE_EQ(c.lr, 1e-3);
}

TEST(RunConfig, SetsKeysFromText) {
  RunConfig c;
  set_config_value(c, "norm_placement", "post");
  set_config_value(c, "norm", "rmsnorm");
  set_config_value(c, "layers", "6");
  set_config_value(c, "lr", "2.5e-4");
  set_config_value(c, "seed", "7");
  EXPECT_EQ(c.model.norm_placement, NormPlacement::Post);
  EXPECT_EQ(c.model.norm, NormKind::RMSNorm);
  EXPECT_EQ(c.model.layers, 6);
  EXPECT_DOUBLE_EQ(c.lr, 2.5e-4);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_NE(error_of([&] { set_config_value(c, "layerz", "6"); }).find("unknown config key 'layerz'"), std::string::npos);
  EXPECT_NE(error_of([&] { set_config_value(c, "layers", "6.5"); }).find("expected an integer"), std::string::npos);
  EXPECT_NE(error_of([&] { set_config_value(c, "lr", "fast"); }).find("expected a finite number"), std::string::npos);
  EXPECT_NE(error_of([&] { set_config_value(c, "norm_placement", "middle"); }).find("unknown norm_placement"),
            std::string::npos);
  set_config_value(c, "norm", "derf");
  EXPECT_EQ(c.model.norm, NormKind::Derf);
  EXPECT_NE(error_of([&] { set_config_value(c, "norm", "erf"); }).find("(expected one of: layernorm, rmsnorm, dyt, derf)"),
            std::string::npos);
}

TEST(RunConfig, ValidationNamesTheProblem) {
  RunConfig c;
  c.model.heads = 3;
  EXPECT_NE(error_of([&] { resolve(c); }).find("heads (3) must divide width (128)"), std::string::npos);
  c = RunConfig{};
  c.batch = 0;
  EXPECT_NE(error_of([&] { resolve(c); }).find("batch must be positive"), std::string::npos);
  c = RunConfig{};
  c.model.seq_len = 10;
  EXPECT_NE(error_of([&] { resolve(c); }).find("does not match the copy task"), std::string::npos);
  c = RunConfig{};
  c.optimizer.weight_decay = 0.1;
  EXPECT_NE(error_of([&] { resolve(c); }).find("adamw"), std::string::npos);
}

TEST(RunConfig, TomlFileSetsKeysAndRejectsUnknownsAndWrongTypes) {
  BLOCKLAB_NEEDS_TOML();
  RunConfig c;
  apply_toml_file(c, write_temp("ok.toml", "norm_placement = \"post\"\nlayers = 6\nlr = 1e-4\nembed_init_std = 1\n"));
  EXPECT_EQ(c.model.norm_placement, NormPlacement::Post);
  EXPECT_EQ(c.model.layers, 6);
  EXPECT_DOUBLE_EQ(c.lr, 1e-4);
  EXPECT_DOUBLE_EQ(c.model.embed_init_std, 1.0);

  const std::string unknown = write_temp("unknown.toml", "layers = 6\ndepth = 3\n");
  EXPECT_NE(error_of([&] { apply_toml_file(c, unknown); }).find(unknown + ":2:1: unknown config key 'depth'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_toml_file(c, write_temp("type.toml", "layers = \"six\"\n")); })
                .find("layers must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_toml_file(c, write_temp("float.toml", "layers = 6.0\n")); })
                .find("layers must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_toml_file(c, write_temp("bad.toml", "layers = = 6\n")); }).find("bad.toml:1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_toml_file(c, "/nonexistent/blocklab.toml"); }), "");
}

TEST(RunConfig, JsonRoundTrip) {
  RunConfig c;
  set_config_value(c, "norm_placement", "post");
  set_config_value(c, "warmup", "400");
  set_config_value(c, "lr", "0.0003");
  resolve(c);
  const nlohmann::json j = to_json(c);
  EXPECT_EQ(j["norm_placement"], "post");
  EXPECT_EQ(j["seq_len"], 63);
  RunConfig back;
  apply_json(back, j);
  resolve(back);
  EXPECT_EQ(to_json(back), j);
  EXPECT_THROW(apply_json(back, nlohmann::json{{"nope", 1}}), Error);
}

TEST(RunConfig, TomlTextEntryPointAndCheckpointKeys) {
  BLOCKLAB_NEEDS_TOML();
  RunConfig c;
  apply_toml_text(c, "width = 48\nnorm_placement = \"post\"\ncheckpoint_every = 25\non_nonfinite = \"skip\"\n", "inline.toml");
  EXPECT_EQ(c.model.width, 48);
  EXPECT_EQ(c.checkpoint_every, 25);
  EXPECT_EQ(c.on_nonfinite, NonFinitePolicy::Skip);
  EXPECT_EQ(error_of([&] { apply_toml_text(c, "width = [1, 2\n", "inline.toml"); }).rfind("inline.toml:1:", 0), 0u);
  EXPECT_NE(error_of([&] { apply_toml_text(c, "on_nonfinite = \"ignore\"\n", "x.toml"); }).find("unknown on_nonfinite"),
            std::string::npos);
  RunConfig negative;
  apply_toml_text(negative, "keep_checkpoints = -1\n", "x.toml");
  EXPECT_NE(error_of([&] { resolve(negative); }).find("keep_checkpoints must be >= 0"), std::string::npos);
}

// Non-ASCII text is fine in comments and string values; anywhere else it is a clean error (the TOML parser
// in use has undefined behaviour there, see reject_unsafe_non_ascii).
TEST(RunConfig, NonAsciiOnlyInCommentsAndStrings) {
  BLOCKLAB_NEEDS_TOML();
  RunConfig c;
  apply_toml_text(c, "\xEF\xBB\xBF# \xEC\x8B\xA4\xED\x97\x98 (experiment)\nout = \"runs/\xEC\x8B\xA4\xED\x97\x98\" # \xC3\xA9\r\nlayers = 3\n",
                  "utf8.toml");
  EXPECT_EQ(c.out, "runs/\xEC\x8B\xA4\xED\x97\x98");
  EXPECT_EQ(c.model.layers, 3);
  apply_toml_text(c, "out = 'caf\xC3\xA9'\n", "literal.toml");
  EXPECT_EQ(c.out, "caf\xC3\xA9");
  for (const std::string& bad : {std::string("\xCC\xAA"), std::string("la\xC3\xBD" "ers = 3\n"),
                                std::string("s = \"\"\"\\\n\xC2\xA7\"\"\"\n"), std::string("steps = 2_400ost\"x\xEF\xBB\x9D\"\n"),
                                std::string("out = \"\xC3\xA9\"\n[table]\n")}) {
    const std::string e = error_of([&] { apply_toml_text(c, bad, "bad.toml"); });
    EXPECT_EQ(e.rfind("bad.toml:", 0), 0u) << e;
  }
  EXPECT_NE(error_of([&] { apply_toml_text(c, "x = 1\ny\xC3\xA9 = 2\n", "bad.toml"); }).find("bad.toml:2:"), std::string::npos);
}

TEST(RunConfig, BlockPresetAppliesFirstInEverySource) {
  BLOCKLAB_NEEDS_TOML();
  // TOML: the preset sets the architecture, keys in the same file override it whatever their order.
  RunConfig toml;
  apply_toml_text(toml, "kv_heads = 2\nmlp = \"geglu\"\nblock = \"qwen3\"\nqk_norm = false\n", "test.toml");
  EXPECT_EQ(toml.model.block, "qwen3");
  EXPECT_EQ(toml.model.norm, NormKind::RMSNorm);
  EXPECT_EQ(toml.model.positions, Positions::RoPE);
  EXPECT_EQ(toml.model.mlp, MlpKind::GeGLU);
  EXPECT_EQ(toml.model.kv_heads, 2);
  EXPECT_FALSE(toml.model.qk_norm);
  EXPECT_FALSE(toml.model.qkv_bias);
  // JSON (a run's config.json): the same, and a round trip through to_json reproduces the config.
  RunConfig json;
  apply_json(json, nlohmann::json{{"tie_head", true}, {"block", "qwen3"}, {"kv_heads", 2}});
  EXPECT_TRUE(json.model.tie_head);
  EXPECT_EQ(json.model.qkv, QkvLayout::Separate);
  resolve(json);
  RunConfig again;
  apply_json(again, to_json(json));
  resolve(again);
  EXPECT_EQ(to_json(again), to_json(json));
  // Presets are complete: switching presets keeps nothing of the previous one.
  RunConfig c;
  set_config_value(c, "block", "sd");
  set_config_value(c, "block", "gpt2");
  EXPECT_FALSE(c.model.cross_attention);
  EXPECT_EQ(c.model.qkv, QkvLayout::Fused);
  EXPECT_EQ(c.model.mlp, MlpKind::GeluTanh);
  EXPECT_TRUE(c.model.tie_head);
  set_config_value(c, "block", "seed");
  RunConfig fresh;
  EXPECT_EQ(to_json(c), to_json(fresh));
  EXPECT_NE(error_of([&] { set_config_value(c, "block", "bert"); }).find("unknown block 'bert' (expected one of: seed"),
            std::string::npos);
}

TEST(RunConfig, BooleanKeysFromTextTomlAndJson) {
  BLOCKLAB_NEEDS_TOML();
  RunConfig c;
  set_config_value(c, "tie_head", "true");
  EXPECT_TRUE(c.model.tie_head);
  set_config_value(c, "tie_head", "0");
  EXPECT_FALSE(c.model.tie_head);
  EXPECT_NE(error_of([&] { set_config_value(c, "qk_norm", "yes"); }).find("qk_norm: expected true or false"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_toml_text(c, "qk_norm = 1\n", "t.toml"); }).find("qk_norm must be true or false"),
            std::string::npos);
  apply_toml_text(c, "cross_attention = true\n", "t.toml");
  EXPECT_TRUE(c.model.cross_attention);
  EXPECT_EQ(to_json(c).at("cross_attention"), true);
}

TEST(RunConfig, RejectsUnsupportedBlockCombinationsByName) {
  BLOCKLAB_NEEDS_TOML();
  auto error_for = [](const std::string& toml) {
    RunConfig c;
    c.copy_len = 4;
    apply_toml_text(c, toml, "t.toml");
    return error_of([&] { resolve(c); });
  };
  EXPECT_NE(error_for("block = \"qwen3\"\nqkv = \"fused\"\n").find("qk_norm needs qkv = separate"), std::string::npos);
  EXPECT_NE(error_for("heads = 4\nkv_heads = 3\n").find("kv_heads (3) must divide heads (4)"), std::string::npos);
  EXPECT_NE(error_for("positions = \"rope\"\nwidth = 12\nheads = 4\n").find("even head_dim"), std::string::npos);
  EXPECT_NE(error_for("heads = 3\n").find("heads (3) must divide width (128)"), std::string::npos);
  EXPECT_EQ(error_for("heads = 3\nhead_dim = 8\n"), "");  // D given: heads need not divide width
  EXPECT_NE(error_for("block = \"qwen3\"\nnorm_placement = \"hybrid\"\n")
                .find("qk_norm does not combine with norm_placement = hybrid"),
            std::string::npos);
  EXPECT_NE(error_for("block = \"sd\"\nnorm_placement = \"hybrid_star\"\n")
                .find("norm_placement = hybrid_star does not combine with cross_attention"),
            std::string::npos);
  EXPECT_EQ(error_for("block = \"qwen3\"\nqk_norm = false\nnorm_placement = \"hybrid_star\"\n"), "");
  EXPECT_EQ(error_for("block = \"sd\"\n"), "");           // context_len comes from the task
}

TEST(RunConfig, ExecutionKeysDoNotChangeResults) {
  std::vector<std::string> execution;
  for (const ConfigKey& k : config_keys())
    if (!k.changes_results) execution.push_back(k.name);
  EXPECT_EQ(execution, (std::vector<std::string>{"threads", "log_every", "out", "checkpoint_every", "keep_checkpoints",
                                                          "tensorboard", "weights", "stream_every", "probe_every",
                                                          "curvature_every", "curvature_per_block",
                                                          "update_probe_every", "update_probe_passes"}));
}

TEST(RunConfig, InitShowsTheSchemeThatRunsAndConfigJsonCarriesDerivedConstants) {
  RunConfig c;
  set_config_value(c, "norm_placement", "deepnorm");
  set_config_value(c, "layers", "6");
  resolve(c);
  const nlohmann::json j = to_json(c);
  EXPECT_EQ(j.at("init"), "deepnorm");
  EXPECT_NEAR(j.at("derived").at("deepnorm_alpha").get<double>(), 1.861, 1e-3);
  EXPECT_NEAR(j.at("derived").at("deepnorm_beta").get<double>(), 0.380, 1e-3);
  RunConfig back;
  apply_json(back, j);  // the derived entry is skipped, not an unknown key
  resolve(back);
  EXPECT_EQ(to_json(back), j);
  set_config_value(c, "norm_placement", "tfixup");
  EXPECT_EQ(to_json(c).at("init"), "tfixup");
  EXPECT_NEAR(to_json(c).at("derived").at("tfixup_scale").get<double>(), std::pow(54.0, -0.25), 1e-12);
  set_config_value(c, "init", "xavier");  // an explicit scheme wins over the placement's
  EXPECT_EQ(to_json(c).at("init"), "xavier");
  EXPECT_FALSE(to_json(c).contains("derived"));
}
