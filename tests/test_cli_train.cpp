// `blocklab train` end to end: outputs, flag/file precedence, and bad input (exit 2, one line, nothing written).
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/metrics.h"
#include "optional_parts.h"

using namespace blocklab::testing;
namespace fs = std::filesystem;

namespace {
const std::string kSmall = " --layers 1 --width 16 --heads 2 --vocab 6 --copy-len 4 --batch 4 --threads 1 ";

}  // namespace

TEST(CliTrain, WritesResolvedConfigAndMetrics) {
  BLOCKLAB_NEEDS_TOML();
  const fs::path dir = fresh_dir("train_ok");
  const fs::path toml = dir / "run.toml";
  std::ofstream(toml) << "norm_placement = \"post\"\nsteps = 50\nlr = 0.002\nwarmup = 5\n";
  const auto r = run_cli("train --config " + toml.string() + kSmall + " --steps 12 --out " + (dir / "run").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("done: 12 steps"), std::string::npos) << r.out;
  const auto config = nlohmann::json::parse(read_text(dir / "run" / "config.json"));
  EXPECT_EQ(config["norm_placement"], "post");  // from the file
  EXPECT_EQ(config["steps"], 12);               // the flag overrides the file
  EXPECT_EQ(config["warmup"], 5);
  EXPECT_DOUBLE_EQ(config["lr"].get<double>(), 0.002);
  EXPECT_EQ(config["seq_len"], 7);  // resolved from copy_len
  const auto metrics = blocklab::io::read_metrics((dir / "run" / "metrics.csv").string());
  ASSERT_GE(metrics.columns.size(), 4u);
  EXPECT_EQ(metrics.columns[0], "step");
  EXPECT_EQ(metrics.columns[1], "loss");
  EXPECT_EQ(metrics.columns[2], "lr");
  EXPECT_EQ(metrics.columns[3], "grad_norm");
  ASSERT_EQ(metrics.rows.size(), 12u);
  EXPECT_EQ(metrics.rows[0][0], 1);
  EXPECT_DOUBLE_EQ(metrics.rows[0][2], 0.002 / 5);  // warm-up from 0
  EXPECT_DOUBLE_EQ(metrics.rows[11][2], 0.002);
  EXPECT_GT(metrics.rows[0][3], 0);
  EXPECT_TRUE(fs::exists(dir / "run" / "summary.json"));
  // Same seed, same numbers: a second run is byte-identical.
  const auto again = run_cli("train --config " + toml.string() + kSmall + " --steps 12 --out " + (dir / "again").string());
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(read_text(dir / "run" / "metrics.csv"), read_text(dir / "again" / "metrics.csv"));
}

// Every block preset trains from the command line; --block applies before the keys given with it, and
// the resolved config.json names the preset and every key it set.
TEST(CliTrain, EveryBlockPresetTrainsAndOtherFlagsOverrideIt) {
  const fs::path dir = fresh_dir("train_blocks");
  for (const std::string block : {"seed", "gpt2", "qwen3", "sd"}) {
    const fs::path out = dir / block;
    // --kv-heads before --block still overrides the preset
    const auto r = run_cli("train" + kSmall + " --kv-heads 1 --block " + block + " --steps 3 --out " + out.string());
    ASSERT_EQ(r.status, 0) << block << ": " << r.err;
    const auto config = nlohmann::json::parse(read_text(out / "config.json"));
    EXPECT_EQ(config["block"], block);
    EXPECT_EQ(config["kv_heads"], 1);
    const auto metrics = blocklab::io::read_metrics((out / "metrics.csv").string());
    ASSERT_EQ(metrics.rows.size(), 3u) << block;
    for (const auto& row : metrics.rows) EXPECT_TRUE(std::isfinite(row[1])) << block;
    if (block == "qwen3") {
      EXPECT_EQ(config["positions"], "rope");
      EXPECT_EQ(config["mlp"], "swiglu");
      EXPECT_EQ(config["qk_norm"], true);
    }
    if (block == "sd") {
      EXPECT_EQ(config["cross_attention"], true);
    }
  }
}

TEST(CliTrain, ConfigJsonRunsAResolvedConfigAgainAndFlagsOverrideIt) {
  const fs::path dir = fresh_dir("train_config_json");
  ASSERT_EQ(run_cli("train" + kSmall + " --norm-placement post --warmup 3 --steps 6 --out " + (dir / "a").string()).status, 0);
  // The resolved config.json of run a, rerun elsewhere: the same numbers and the same config.json.
  const auto r = run_cli("train --config-json " + (dir / "a" / "config.json").string() + " --out " + (dir / "b").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(dir / "a" / "metrics.csv"), read_text(dir / "b" / "metrics.csv"));
  auto a = nlohmann::json::parse(read_text(dir / "a" / "config.json"));
  auto b = nlohmann::json::parse(read_text(dir / "b" / "config.json"));
  EXPECT_EQ(b["out"], (dir / "b").string());
  a.erase("out");
  b.erase("out");
  EXPECT_EQ(a, b);
  // Without --out the run goes where the file says: a, which already holds a run.
  const auto again = run_cli("train --config-json " + (dir / "a" / "config.json").string() + " --steps 8");
  EXPECT_EQ(again.status, 2);
  EXPECT_NE(again.err.find("already holds a run"), std::string::npos) << again.err;
  ASSERT_EQ(run_cli("train --config-json " + (dir / "a" / "config.json").string() + " --steps 8 --force").status, 0);
  EXPECT_EQ(nlohmann::json::parse(read_text(dir / "a" / "config.json"))["steps"], 8);
  EXPECT_EQ(nlohmann::json::parse(read_text(dir / "a" / "config.json"))["warmup"], 3);
  // It replaces the defaults, not a TOML file or a checkpoint's config.
  EXPECT_EQ(run_cli("train --config-json " + (dir / "a" / "config.json").string() + " --config x.toml").status, 2);
  EXPECT_EQ(run_cli("train --config-json " + (dir / "a" / "config.json").string() + " --resume " + (dir / "a").string())
                .status,
            2);
}

TEST(CliTrain, RefusesToOverwriteARunUnlessForced) {
  const fs::path dir = fresh_dir("train_twice");
  const std::string args = "train" + kSmall + " --steps 2 --out " + dir.string();
  ASSERT_EQ(run_cli(args).status, 0);
  const auto second = run_cli(args);
  EXPECT_EQ(second.status, 2);
  EXPECT_NE(second.err.find("already holds a run"), std::string::npos) << second.err;
  EXPECT_EQ(run_cli(args + " --force").status, 0);
}

struct BadInput {
  std::string name, args, expected;
};

class CliTrainBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliTrainBadInput, ExitsTwoWithOneLineAndWritesNothing) {
  if (GetParam().args.find("--config") != std::string::npos) BLOCKLAB_NEEDS_TOML();
  const fs::path dir = fresh_dir("bad_" + GetParam().name);
  const fs::path out = dir / "out";
  std::ofstream(dir / "bad.toml") << "layers = [1, 2\n";
  std::ofstream(dir / "unknown.toml") << "depth = 3\n";
  std::ofstream(dir / "type.toml") << "width = \"wide\"\n";
  std::ofstream(dir / "a_file") << "x";
  std::ofstream(dir / "bad.json") << "{\"layers\": 2,";
  std::ofstream(dir / "unknown.json") << "{\"depth\": 3}";
  const std::string args = substitute(GetParam().args, {{"{dir}", dir.string()}, {"{out}", out.string()}});
  expect_refused(run_cli("train" + kSmall + " --steps 2 " + args), GetParam().expected);
  expect_no_run_written(out);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliTrainBadInput,
    ::testing::Values(BadInput{"heads", "--heads 3 --out {out}", "heads (3) must divide width (16)"},
                      BadInput{"zero_layers", "--layers 0 --out {out}", "layers must be positive"},
                      BadInput{"negative_batch", "--batch -4 --out {out}", "batch must be positive"},
                      BadInput{"placement", "--norm-placement middle --out {out}", "unknown norm_placement 'middle'"},
                      BadInput{"norm", "--norm batchnorm --out {out}", "unknown norm 'batchnorm'"},
                      BadInput{"block", "--block bert --out {out}", "unknown block 'bert' (expected one of: seed, gpt2"},
                      BadInput{"qk_norm_fused", "--block qwen3 --qkv fused --out {out}", "qk_norm needs qkv = separate"},
                      BadInput{"kv_heads", "--heads 4 --kv-heads 3 --out {out}", "kv_heads (3) must divide heads (4)"},
                      BadInput{"bool", "--tie-head maybe --out {out}", "tie_head: expected true or false"},
                      BadInput{"not_a_number", "--lr fast --out {out}", "lr: expected a finite number"},
                      BadInput{"unknown_flag", "--depth 3 --out {out}", "depth"},
                      BadInput{"malformed_toml", "--config {dir}/bad.toml --out {out}", "bad.toml:"},
                      BadInput{"unknown_toml_key", "--config {dir}/unknown.toml --out {out}", "unknown config key 'depth'"},
                      BadInput{"wrong_toml_type", "--config {dir}/type.toml --out {out}", "width must be an integer"},
                      BadInput{"missing_toml", "--config {dir}/missing.toml --out {out}", "missing.toml"},
                      BadInput{"malformed_json", "--config-json {dir}/bad.json --out {out}", "bad.json: not valid JSON"},
                      BadInput{"unknown_json_key", "--config-json {dir}/unknown.json --out {out}",
                               "unknown.json: unknown config key 'depth'"},
                      BadInput{"missing_json", "--config-json {dir}/missing.json --out {out}", "missing.json: cannot read"},
                      BadInput{"out_is_a_file", "--out {dir}/a_file/run", "cannot create directory"},
                      BadInput{"unwritable_out", "--out /proc/blocklab_run", "/proc/blocklab_run"}),
    [](const auto& info) { return info.param.name; });
