// blocklab sweep: grid parsing, planning, parallel runs with identical numbers, resuming, and refusing
// a directory that holds another experiment.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "cli_runner.h"
#include "experiments/sweep.h"
#include "optional_parts.h"
#include "util/error.h"
#include "util/process.h"

using namespace blocklab;
namespace bt = blocklab::testing;
using namespace blocklab::experiments;
namespace fs = std::filesystem;

namespace {
RunConfig tiny() {
  RunConfig c;
  c.model.layers = 1;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.vocab = 8;
  c.copy_len = 4;
  c.batch = 4;
  c.steps = 20;
  c.lr = 3e-3;
  c.threads = 1;  // tiny models: more threads only add overhead on a busy machine
  return c;
}

SweepOptions tiny_sweep(const fs::path& out, int jobs) {
  SweepOptions o;
  o.base = tiny();
  o.grid = {parse_grid_axis("norm_placement=post,pre"), parse_grid_axis("warmup=0,5")};
  o.seeds = {0, 1};
  o.jobs = jobs;
  o.out = out.string();
  o.worker = BLOCKLAB_CLI;
  o.poll_seconds = 0.02;
  return o;
}

std::string metrics_of(const fs::path& out, const std::string& run) { return bt::read_text(out / run / "metrics.csv"); }
}  // namespace

TEST(SweepGrid, ParsesAxesAndRejectsBadOnes) {
  const GridAxis a = parse_grid_axis("norm-placement=post,pre");
  EXPECT_EQ(a.key, "norm_placement");
  EXPECT_EQ(a.values, (std::vector<std::string>{"post", "pre"}));
  for (const char* bad : {"warmup", "=1,2", "depth=1,2", "seed=1,2", "threads=1,2", "out=a,b", "warmup=0,,400",
                          "warmup=0,0", "layers=x", "norm_placement=middle"})
    EXPECT_THROW(parse_grid_axis(bad), Error) << bad;
}

TEST(SweepGrid, PlansTheCartesianProductTimesSeeds) {
  SweepOptions o = tiny_sweep("/tmp/unused", 1);
  const auto runs = plan_sweep(o);
  ASSERT_EQ(runs.size(), 8u);
  EXPECT_EQ(runs[0].name, "norm_placement=post+warmup=0+seed=0");
  EXPECT_EQ(runs[1].name, "norm_placement=post+warmup=0+seed=1");
  EXPECT_EQ(runs[2].name, "norm_placement=post+warmup=5+seed=0");
  EXPECT_EQ(runs[7].name, "norm_placement=pre+warmup=5+seed=1");
  EXPECT_EQ(runs[7].config.model.norm_placement, NormPlacement::Pre);
  EXPECT_EQ(runs[7].config.warmup, 5);
  EXPECT_EQ(runs[7].config.seed, 1u);
  EXPECT_EQ(runs[7].cell, 3u);
  EXPECT_EQ(runs[7].config.out, "/tmp/unused/norm_placement=pre+warmup=5+seed=1");
  o.seeds = {};
  EXPECT_THROW(plan_sweep(o), Error);
  o.seeds = {1, 1};
  EXPECT_THROW(plan_sweep(o), Error);
  o = tiny_sweep("/tmp/unused", 1);
  o.grid.push_back(parse_grid_axis("heads=2,3"));  // 3 does not divide 16: named with its run
  try {
    plan_sweep(o);
    ADD_FAILURE() << "accepted heads=3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("heads=3"), std::string::npos) << e.what();
  }
}

// A grid over the text task's data: the base (task = text without data) is complete only with the grid's key.
TEST(SweepGrid, AGridCanGiveTheTextTasksData) {
  BLOCKLAB_NEEDS_TEXT();
  const std::string data = std::string(BLOCKLAB_TEST_DATA) + "/web_ruth_jonah.txt";
  const fs::path dir = bt::fresh_dir("sweep_text");
  std::ofstream(dir / "short.txt") << bt::read_text(data).substr(0, 5000);
  SweepOptions o = tiny_sweep(dir / "s", 1);
  o.base.task = "text";
  o.base.model.seq_len = 16;
  o.grid = {parse_grid_axis("data=" + data + "," + (dir / "short.txt").string())};
  o.seeds = {0};
  const auto runs = plan_sweep(o);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].config.data, (dir / "short.txt").string());
  EXPECT_EQ(runs[1].config.model.vocab, 256);
  const nlohmann::json settings = sweep_settings(o);
  EXPECT_FALSE(settings["base"].contains("data"));
  EXPECT_EQ(settings["base"]["task"], "text");
  EXPECT_EQ(sweep_settings(o), settings);  // the same sweep, the same settings
}

// A text sweep: summary.csv adds the validation losses and the text's unigram entropy, and "learned" means a
// final (10-step mean) loss below that entropy, not the copy task's 0.1 ln V.
TEST(Sweep, TextRunsReportValidationLossAndTheirOwnLearnedThreshold) {
  BLOCKLAB_NEEDS_TEXT();
  const fs::path dir = bt::fresh_dir("sweep_text_runs");
  SweepOptions o = tiny_sweep(dir / "s", 2);
  o.base.task = "text";
  o.base.data = std::string(BLOCKLAB_TEST_DATA) + "/web_ruth_jonah.txt";
  o.base.model.width = 32;
  o.base.model.seq_len = 32;
  o.base.batch = 8;
  o.base.eval_every = 20;
  o.grid = {parse_grid_axis("steps=5,120")};
  o.seeds = {0};
  const SweepResult result = run_sweep(o);
  ASSERT_EQ(result.runs.size(), 2u);
  for (const auto& r : result.runs) {
    ASSERT_TRUE(r.unigram_entropy.has_value()) << r.run.name;
    ASSERT_TRUE(r.min_val_loss.has_value()) << r.run.name;
    const bool below = r.curve.smoothed_final_loss < *r.unigram_entropy;
    EXPECT_EQ(r.curve.outcome == probe::Outcome::Learned, below)
        << r.run.name << ": final " << r.curve.smoothed_final_loss << ", unigram entropy " << *r.unigram_entropy;
  }
  // 5 steps stay near ln 256 (never-started); 120 steps at lr 3e-3 get below the entropy of about 3.1 nats
  // (measured: 2.5)
  EXPECT_EQ(result.runs[0].curve.outcome, probe::Outcome::NeverStarted);
  EXPECT_EQ(result.runs[1].curve.outcome, probe::Outcome::Learned);
  const std::string csv = bt::read_text(dir / "s" / "summary.csv");
  EXPECT_NE(csv.find(",outcome,seconds,final_val_loss,min_val_loss,min_val_loss_step,unigram_entropy\n"), std::string::npos)
      << csv;
  const std::string figure = bt::read_text(dir / "s" / "loss.svg");
  if (figure.empty()) GTEST_SKIP() << "no figure drawn (gnuplot missing?): the numbers above were checked";
  EXPECT_NE(figure.find("Text loss (web_ruth_jonah.txt"), std::string::npos);
  EXPECT_NE(figure.find("unigram entropy = "), std::string::npos);
  EXPECT_NE(figure.find("seed 0 validation"), std::string::npos);
}

TEST(Sweep, RunsInParallelWithIdenticalNumbersAndSkipsFinishedRuns) {
  const fs::path dir = bt::fresh_dir("sweep");
  const SweepResult one = run_sweep(tiny_sweep(dir / "jobs1", 1));
  const SweepResult two = run_sweep(tiny_sweep(dir / "jobs2", 2));
  ASSERT_EQ(one.runs.size(), 8u);
  ASSERT_EQ(two.runs.size(), 8u);
  for (const auto& r : one.runs) {
    EXPECT_FALSE(r.reused);
    const std::string m = metrics_of(dir / "jobs1", r.run.name);
    EXPECT_EQ(std::count(m.begin(), m.end(), '\n'), 21);
    EXPECT_EQ(m, metrics_of(dir / "jobs2", r.run.name)) << r.run.name;  // byte-identical
  }
  // summary.csv: one row per run with an outcome label.
  std::ifstream summary(dir / "jobs1" / "summary.csv");
  std::string header, row;
  std::getline(summary, header);
  EXPECT_EQ(header,
            "run,norm_placement,warmup,seed,steps,final_loss,min_loss,min_loss_step,first_step_below_0.01,outcome,seconds");
  int rows = 0;
  while (std::getline(summary, row)) {
    ++rows;
    EXPECT_EQ(std::count(row.begin(), row.end(), ','), 10) << row;
    const std::string outcome = row.substr(0, row.rfind(',')).substr(row.substr(0, row.rfind(',')).rfind(',') + 1);
    EXPECT_TRUE(probe::parse_outcome(outcome).has_value()) << row;
  }
  EXPECT_EQ(rows, 8);
  EXPECT_TRUE(fs::exists(dir / "jobs1" / "loss.gp"));
  // Each worker trained exactly its planned config (written by the sweep, read with --config-json).
  for (const auto& r : two.runs) {
    nlohmann::json planned = to_json(r.run.config), trained =
        nlohmann::json::parse(bt::read_text(dir / "jobs2" / r.run.name / "config.json"));
    planned.erase("threads");
    trained.erase("threads");
    EXPECT_EQ(trained, planned) << r.run.name;
  }

  // A re-run skips every finished run (their files are not touched) ...
  const auto log_time = fs::last_write_time(dir / "jobs1" / one.runs[0].run.name / "train.log");
  const SweepResult again = run_sweep(tiny_sweep(dir / "jobs1", 2));
  for (const auto& r : again.runs) EXPECT_TRUE(r.reused);
  EXPECT_EQ(fs::last_write_time(dir / "jobs1" / one.runs[0].run.name / "train.log"), log_time);

  // ... and redoes an unfinished one (here: killed before it wrote summary.json) with the same numbers.
  const std::string victim = one.runs[5].run.name;
  const std::string before = metrics_of(dir / "jobs1", victim);
  fs::remove(dir / "jobs1" / victim / "summary.json");
  std::ofstream(dir / "jobs1" / victim / "metrics.csv") << "step,loss\n1,4.0\n";  // a partial file
  std::vector<std::string> lines;
  const SweepResult resumed = run_sweep(tiny_sweep(dir / "jobs1", 2), [&](const std::string& s) { lines.push_back(s); });
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("7 already finished, 1 to run"), std::string::npos) << lines[0];
  EXPECT_EQ(metrics_of(dir / "jobs1", victim), before);
  int fresh = 0;
  for (const auto& r : resumed.runs) fresh += r.reused ? 0 : 1;
  EXPECT_EQ(fresh, 1);
}

TEST(Sweep, RefusesADirectoryHoldingAnotherExperiment) {
  const fs::path dir = bt::fresh_dir("sweep_refuse");
  SweepOptions o = tiny_sweep(dir / "s", 2);
  o.grid = {parse_grid_axis("warmup=0,5")};
  o.seeds = {0};
  o.base.steps = 5;
  run_sweep(o);
  SweepOptions other = o;
  other.base.lr = 1e-2;  // another sweep
  try {
    run_sweep(other);
    ADD_FAILURE() << "accepted a different sweep";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("base.lr"), std::string::npos) << e.what();
  }
  other = o;
  other.jobs = 1;  // how runs execute does not change the experiment
  EXPECT_NO_THROW(run_sweep(other));
  fs::create_directories(dir / "train_run");
  std::ofstream(dir / "train_run" / "config.json") << "{}";
  o.out = (dir / "train_run").string();
  EXPECT_THROW(run_sweep(o), Error);
}

TEST(Sweep, ReportsRunsThatFailWithTheirLog) {
  const fs::path dir = bt::fresh_dir("sweep_fail");
  SweepOptions o = tiny_sweep(dir / "s", 2);
  o.worker = "/bin/false";  // a worker that exits 1 without training
  try {
    run_sweep(o);
    ADD_FAILURE() << "failed runs were not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8 of 8 runs failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("train.log"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(dir / "s" / "summary.csv"));  // written even so (no rows)
}

TEST(Sweep, CliBadInputExitsTwo) {
  const fs::path dir = bt::fresh_dir("sweep_cli");
  const std::string small = " --layers 1 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 4 --steps 3 ";
  struct Case {
    std::string args, expected;
  };
  for (const Case& c : std::vector<Case>{{"--grid depth=1,2", "unknown config key 'depth'"},
                                         {"--seeds ''", "the list is empty"},
                                         {"--grid warmup=0,x", "warmup"},
                                         {"--grid warmup=0 --grid warmup=5", "appears twice"}}) {
    const auto r = bt::run_cli("sweep" + small + c.args + " --out " + (dir / "bad").string());
    EXPECT_EQ(r.status, 2) << c.args;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.args << ": " << r.err;
    EXPECT_FALSE(fs::exists(dir / "bad")) << c.args;
  }
  ASSERT_EQ(bt::run_cli("gradnorm --layers 1 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 2 --seeds 0 --threads 1 --out " +
                             (dir / "g").string())
                .status,
            0);
  const auto r = bt::run_cli("sweep" + small + "--seeds 0 --out " + (dir / "g").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("holds a different experiment (gradnorm"), std::string::npos) << r.err;
}

TEST(Sweep, AnInterruptedSweepContinuesWithTheSameNumbers) {
  const fs::path dir = bt::fresh_dir("sweep_interrupt");
  // Steps long enough (~0.5 ms each, ~1 s per run) that the poll below interrupts the workers mid-run on a
  // quiet machine too; a width-16 model finished its 2500 steps in 0.2 s, before the poll could see it.
  const std::string args = std::string("sweep --layers 2 --width 48 --heads 2 --vocab 8 --copy-len 8 --batch 8 --steps 2000 ") +
                           "--grid norm_placement=post,pre --seeds 0 --jobs 2 --out ";
  // Reference: uninterrupted.
  ASSERT_EQ(bt::run_cli(args + (dir / "ref").string()).status, 0);
  // Interrupted with SIGINT while its workers train, then continued.
  const std::string out = (dir / "cut").string();
  const pid_t pid = spawn_process({{BLOCKLAB_CLI, "sweep", "--layers", "2", "--width", "48", "--heads", "2", "--vocab", "8",
                                    "--copy-len", "8", "--batch", "8", "--steps", "2000", "--grid",
                                    "norm_placement=post,pre", "--seeds", "0", "--jobs", "2", "--out", out},
                                   "", (dir / "cut.log").string(), true, false});
  // wait until both workers have written some steps, then interrupt
  for (int i = 0; i < 1000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto m = fs::path(out) / "norm_placement=pre+seed=0" / "metrics.csv";
    if (fs::exists(m) && bt::read_text(m).size() > 2000) break;
  }
  ::kill(pid, SIGINT);
  const int status = wait_process(pid);
  ASSERT_EQ(status, 130) << bt::read_text(dir / "cut.log");
  // the workers stopped after a step, wrote a checkpoint and an "interrupted" summary
  EXPECT_FALSE(run_finished(out + "/norm_placement=pre+seed=0"));
  EXPECT_TRUE(fs::exists(fs::path(out) / "norm_placement=pre+seed=0" / "checkpoints"));
  const auto again = bt::run_cli(args + out);
  ASSERT_EQ(again.status, 0) << again.err;
  for (const char* run : {"norm_placement=post+seed=0", "norm_placement=pre+seed=0"})
    EXPECT_EQ(metrics_of(dir / "ref", run), metrics_of(out, run)) << run;
}
