// Checkpoints end to end through `blocklab train` and `blocklab inspect`: bit-exact resume for both
// placements, metrics rows never duplicated, resume refusals, SIGTERM/SIGINT, the non-finite policies.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "io/checkpoint.h"
#include "io/metrics.h"
#include "io/safetensors.h"
#include "spawn.h"

using namespace blocklab::testing;
namespace fs = std::filesystem;
namespace io = blocklab::io;

namespace {

// Warm-up spans the resume point; clipping and AdamW's decay are on, so every part of the step is exercised.
const std::string kModel =
    " --layers 2 --width 16 --heads 2 --vocab 6 --copy-len 4 --batch 4 --lr 3e-3 --warmup 8"
    " --clip-grad-norm 0.5 --optimizer adamw --weight-decay 0.01 --seed 3 ";

// Every tensor of two safetensors files has the same dtype, shape and bytes (metadata may differ).
void expect_same_tensors(const fs::path& a, const fs::path& b) {
  const io::SafetensorsReader ra(a.string()), rb(b.string());
  ASSERT_EQ(ra.tensors().size(), rb.tensors().size());
  for (const auto& t : ra.tensors()) {
    const io::TensorEntry* u = rb.find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(t.dtype, u->dtype) << t.name;
    EXPECT_EQ(t.shape, u->shape) << t.name;
    const auto x = ra.bytes(t), y = rb.bytes(*u);
    ASSERT_EQ(x.size(), y.size()) << t.name;
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin())) << t.name << " differs";
  }
}

// The line of `text` that starts with `prefix`, with runs of spaces collapsed and the indent removed.
std::string squeezed_line(const std::string& text, const std::string& prefix) {
  const size_t begin = text.find("\n" + prefix);
  if (begin == std::string::npos) return "";
  const std::string line = text.substr(begin + 1, text.find('\n', begin + 1) - begin - 1);
  std::string out;
  for (char c : line)
    if (c != ' ' || (!out.empty() && out.back() != ' ')) out += c;
  return out;
}

struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  const char* name_;
};

}  // namespace

namespace {

// 2N steps straight through == N steps, then --resume to 2N: bit-identical losses at every step (the
// metrics files are byte-identical), byte-identical final weights and optimizer state.
void expect_resume_continues_bit_identically(const std::string& label, const std::string& model) {
  const fs::path dir = fresh_dir("resume_" + label);
  const std::string full = (dir / "full").string(), split = (dir / "split").string();
  auto r = run_cli("train" + model + " --threads 1 --steps 12 --checkpoint-every 6 --out " + full);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run_cli("train" + model + " --threads 1 --steps 6 --checkpoint-every 6 --out " + split);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run_cli("train --resume " + split + " --steps 12 --threads 2");  // results do not depend on threads
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("resuming"), std::string::npos) << r.out;

  EXPECT_EQ(read_text(dir / "full" / "metrics.csv"), read_text(dir / "split" / "metrics.csv"));
  EXPECT_EQ(io::read_metrics((dir / "split" / "metrics.csv").string()).rows.size(), 12u);
  const fs::path a = dir / "full" / "checkpoints" / "step_0000012", b = dir / "split" / "checkpoints" / "step_0000012";
  EXPECT_EQ(read_text(a / "model.safetensors"), read_text(b / "model.safetensors"));
  expect_same_tensors(a / "state.safetensors", b / "state.safetensors");
  const auto config = nlohmann::json::parse(read_text(dir / "split" / "config.json"));
  EXPECT_EQ(config["steps"], 12);  // rewritten with the extended length
  const auto summary = nlohmann::json::parse(read_text(dir / "split" / "summary.json"));
  EXPECT_EQ(summary["resumed_from_step"], 6);
  EXPECT_EQ(summary["steps"], 12);
  EXPECT_EQ(summary["final_loss"], nlohmann::json::parse(read_text(dir / "full" / "summary.json"))["final_loss"]);
}

}  // namespace

class Resume : public ::testing::TestWithParam<std::string> {};

TEST_P(Resume, ContinuesBitIdentically) {
  expect_resume_continues_bit_identically(GetParam(), kModel + " --norm-placement " + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Placements, Resume, ::testing::Values("post", "pre"));

// The same for every other optimizer, its own keys set away from their defaults (they come back from the
// checkpoint's config).
class ResumeOptimizer : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(ResumeOptimizer, ContinuesBitIdentically) {
  const std::string model = " --layers 2 --width 16 --heads 2 --vocab 6 --copy-len 4 --batch 4 --lr 3e-3 --warmup 8"
                            " --clip-grad-norm 0.5 --seed 3 --optimizer " + GetParam().second;
  expect_resume_continues_bit_identically(GetParam().first, model);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, ResumeOptimizer,
    ::testing::Values(std::pair<std::string, std::string>{"adam_v0grad", "adam --adam-v0 grad --beta2 0.99"},
                      std::pair<std::string, std::string>{"radam", "radam --weight-decay 0.01 --adam-v0 grad"},
                      std::pair<std::string, std::string>{"sgd",
                                                          "sgd --momentum 0.8 --nesterov true --weight-decay 0.01"},
                      std::pair<std::string, std::string>{"lion", "lion --lion-beta2 0.98 --weight-decay 0.1"},
                      std::pair<std::string, std::string>{
                          "muon", "muon --muon-lr 0.03 --muon-momentum 0.9 --muon-nesterov false --muon-ns-steps 4 "
                                  "--muon-weight-decay 0.1 --weight-decay 0.01"}),
    [](const auto& info) { return info.param.first; });

TEST(ResumeCli, DropsMetricsRowsAfterTheCheckpointNeverDuplicates) {
  const fs::path dir = fresh_dir("resume_metrics");
  const fs::path run = dir / "run";
  auto r = run_cli("train" + kModel + " --threads 1 --steps 10 --checkpoint-every 4 --keep-checkpoints 0 --out " + run.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string original = read_text(run / "metrics.csv");
  // As if killed after step 10's row was written but before its checkpoint completed.
  fs::remove_all(run / "checkpoints" / "step_0000010");
  r = run_cli("train --resume " + run.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("step_0000008"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(run / "metrics.csv"), original);
  const auto table = io::read_metrics((run / "metrics.csv").string());
  ASSERT_EQ(table.rows.size(), 10u);
  for (size_t i = 0; i < table.rows.size(); ++i) EXPECT_EQ(table.rows[i][0], static_cast<double>(i + 1));
}

struct Refusal {
  std::string name, args, expected;
};
class ResumeRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(ResumeRefusal, ExitsTwoWithOneLine) {
  const fs::path dir = fresh_dir("resume_refusal_" + GetParam().name);
  ASSERT_EQ(run_cli("train" + kModel + " --threads 1 --steps 4 --checkpoint-every 2 --out " + (dir / "run").string()).status, 0);
  ASSERT_EQ(run_cli("train" + kModel + " --threads 1 --steps 2 --out " + (dir / "plain").string()).status, 0);
  const std::string metrics_before = read_text(dir / "run" / "metrics.csv");
  expect_refused(run_cli("train " + substitute(GetParam().args, {{"{dir}", dir.string()}})), GetParam().expected);
  EXPECT_EQ(read_text(dir / "run" / "metrics.csv"), metrics_before);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ResumeRefusal,
    ::testing::Values(Refusal{"width", "--resume {dir}/run --width 32", "width is 16 in the checkpoint"},
                      Refusal{"lr", "--resume {dir}/run --lr 0.1", "lr is 0.003 in the checkpoint"},
                      Refusal{"toml", "--resume {dir}/run --config {dir}/../no_such.toml", "no_such.toml"},
                      Refusal{"out", "--resume {dir}/run --out {dir}/elsewhere", "drop --out"},
                      Refusal{"force", "--resume {dir}/run --force", "--force cannot be combined"},
                      Refusal{"fewer_steps", "--resume {dir}/run --steps 3", "below the checkpoint's step 4"},
                      Refusal{"no_checkpoint", "--resume {dir}/plain", "no complete checkpoint"},
                      Refusal{"no_run", "--resume {dir}/missing", "no such run directory"}),
    [](const auto& info) { return info.param.name; });

TEST(ResumeCli, ForceDiscardsTheOldRunsCheckpoints) {
  const fs::path dir = fresh_dir("force_checkpoints");
  const std::string out = (dir / "run").string();
  ASSERT_EQ(run_cli("train" + kModel + " --threads 1 --steps 4 --checkpoint-every 2 --out " + out).status, 0);
  ASSERT_EQ(io::list_checkpoints(out).size(), 2u);
  EXPECT_EQ(run_cli("train" + kModel + " --threads 1 --steps 2 --out " + out).status, 2);
  ASSERT_EQ(run_cli("train" + kModel + " --threads 1 --steps 2 --force --out " + out).status, 0);
  EXPECT_TRUE(io::list_checkpoints(out).empty());
  EXPECT_EQ(run_cli("train --resume " + out).status, 2);
}

class StopSignal : public ::testing::TestWithParam<int> {};

// SIGTERM/SIGINT: the step in progress finishes, a checkpoint is written, the exit status is 128 + signal,
// and resuming from that checkpoint gives the same numbers as a run that was never stopped.
TEST_P(StopSignal, WritesACheckpointAndExitsCleanly) {
  const int sig = GetParam();
  const fs::path dir = fresh_dir(std::string("signal_") + (sig == SIGTERM ? "term" : "int"));
  const fs::path run = dir / "run";
  const std::vector<std::string> args = {"train",    "--layers", "2",   "--width", "16",  "--heads",        "2",
                                         "--vocab",  "6",        "--copy-len", "4", "--batch", "4", "--lr", "3e-3",
                                         "--threads", "1",       "--steps", "1000000", "--out", run.string()};
  const pid_t pid = spawn_cli(args, (dir / "log.txt").string());
  ASSERT_GT(pid, 0);
  const bool started = wait_until([&] { return line_count(read_text(run / "metrics.csv")) >= 4; },
                                  std::chrono::seconds(20));
  ::kill(pid, sig);
  const int status = wait_child(pid);
  ASSERT_TRUE(started) << read_text(dir / "log.txt");
  EXPECT_EQ(status, 128 + sig) << read_text(dir / "log.txt");
  EXPECT_NE(read_text(dir / "log.txt").find("resume with: blocklab train --resume"), std::string::npos);

  const auto checkpoints = io::list_checkpoints(run);
  ASSERT_EQ(checkpoints.size(), 1u);
  const int step = static_cast<int>(checkpoints[0].step);
  const auto table = io::read_metrics((run / "metrics.csv").string());
  ASSERT_EQ(table.rows.size(), static_cast<size_t>(step));  // the checkpoint is at the last finished step
  EXPECT_EQ(nlohmann::json::parse(read_text(run / "summary.json"))["status"], "interrupted");

  // Resume for 3 more steps; compare with one uninterrupted run of the same length.
  const std::string steps = std::to_string(step + 3);
  auto r = run_cli("train --resume " + run.string() + " --steps " + steps);
  ASSERT_EQ(r.status, 0) << r.err;
  r = run_cli("train --layers 2 --width 16 --heads 2 --vocab 6 --copy-len 4 --batch 4 --lr 3e-3 --threads 1 --steps " +
              steps + " --out " + (dir / "straight").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(run / "metrics.csv"), read_text(dir / "straight" / "metrics.csv"));
}

INSTANTIATE_TEST_SUITE_P(Signals, StopSignal, ::testing::Values(SIGTERM, SIGINT),
                         [](const auto& info) { return info.param == SIGTERM ? "sigterm" : "sigint"; });

TEST(NonFiniteCli, AbortNamesStepAndTensorKeepsMetricsExitsOne) {
  const fs::path dir = fresh_dir("nonfinite_abort");
  const ScopedEnv inject("BLOCKLAB_INJECT_NONFINITE", "3:blocks.0.attn.proj.bias");
  const auto r = run_cli("train" + kModel + " --threads 1 --steps 8 --out " + (dir / "run").string());
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("step 3: non-finite gradient in blocks.0.attn.proj.bias"), std::string::npos) << r.err;
  // one line, the last on stderr (progress lines come before it)
  const size_t last_line = r.err.rfind('\n', r.err.size() - 2);
  EXPECT_EQ(r.err.substr(last_line + 1).rfind("blocklab: error: step 3: ", 0), 0u) << r.err;
  const auto table = io::read_metrics((dir / "run" / "metrics.csv").string());
  ASSERT_EQ(table.rows.size(), 3u);
  EXPECT_TRUE(std::isnan(table.rows[2][table.column("grad_norm")]));
  const auto summary = nlohmann::json::parse(read_text(dir / "run" / "summary.json"));
  EXPECT_EQ(summary["status"], "nonfinite");
  EXPECT_NE(summary["error"].get<std::string>().find("blocks.0.attn.proj.bias"), std::string::npos);
}

TEST(NonFiniteCli, SkipCountsSkippedStepsAndLeavesTheOptimizerStepCount) {
  const fs::path dir = fresh_dir("nonfinite_skip");
  const fs::path run = dir / "run";
  {
    const ScopedEnv inject("BLOCKLAB_INJECT_NONFINITE", "3,5");
    const auto r = run_cli("train" + kModel + " --threads 1 --steps 8 --checkpoint-every 4 --on-nonfinite skip --out " +
                           run.string());
    ASSERT_EQ(r.status, 0) << r.err;
  }
  const auto table = io::read_metrics((run / "metrics.csv").string());
  ASSERT_EQ(table.columns, (std::vector<std::string>{"step", "loss", "lr", "grad_norm", "skipped"}));
  std::vector<double> skipped;
  for (const auto& row : table.rows) skipped.push_back(row[4]);
  EXPECT_EQ(skipped, (std::vector<double>{0, 0, 1, 1, 2, 2, 2, 2}));
  EXPECT_EQ(nlohmann::json::parse(read_text(run / "summary.json"))["skipped_steps"], 2);
  const io::SafetensorsReader state((run / "checkpoints" / "step_0000008" / "state.safetensors").string());
  EXPECT_EQ(state.read_i64("adam.step")[0], 6);
  EXPECT_EQ(state.read_i64("skipped_steps")[0], 2);

  // A resumed run keeps counting from the checkpoint (step 4, one skipped) and matches the run above.
  const std::string original = read_text(run / "metrics.csv");
  fs::remove_all(run / "checkpoints" / "step_0000008");
  {
    const ScopedEnv inject("BLOCKLAB_INJECT_NONFINITE", "5");
    ASSERT_EQ(run_cli("train --resume " + run.string()).status, 0);
  }
  EXPECT_EQ(read_text(run / "metrics.csv"), original);
}

TEST(NonFiniteCli, MalformedInjectionIsBadInput) {
  const fs::path dir = fresh_dir("nonfinite_bad_env");
  for (const std::string value : {"x", "0", "3:no.such.tensor", "3,,4"}) {
    const ScopedEnv inject("BLOCKLAB_INJECT_NONFINITE", value);
    const auto r = run_cli("train" + kModel + " --threads 1 --steps 4 --out " + (dir / "run").string());
    EXPECT_EQ(r.status, 2) << value << ": " << r.err;
    EXPECT_FALSE(fs::exists(dir / "run" / "metrics.csv")) << value;
  }
}

TEST(InspectCli, ListsTensorsAndMetadataOfACheckpoint) {
  const fs::path dir = fresh_dir("inspect");
  ASSERT_EQ(run_cli("train" + kModel + " --threads 1 --steps 2 --checkpoint-every 2 --out " + (dir / "run").string()).status, 0);
  const fs::path checkpoint = dir / "run" / "checkpoints" / "step_0000002";
  auto r = run_cli("inspect " + (checkpoint / "model.safetensors").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("format = pt"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step = 2"), std::string::npos) << r.out;
  for (const std::string row : {"tok_emb.weight", "blocks.1.mlp.fc1.weight", "head.weight"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  // name, dtype, shape and bytes on one line
  EXPECT_EQ(squeezed_line(r.out, "  blocks.0.attn.qkv.weight "), "blocks.0.attn.qkv.weight F32 [48, 16] 3072") << r.out;
  r = run_cli("inspect " + (checkpoint / "state.safetensors").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("format_version = 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rng.data"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("I64"), std::string::npos) << r.out;

  std::ofstream(dir / "garbage.safetensors") << "not a safetensors file at all";
  for (const std::string& bad : {(dir / "garbage.safetensors").string(), (dir / "missing.safetensors").string()}) {
    expect_refused(run_cli("inspect " + bad), bad);
  }
}
