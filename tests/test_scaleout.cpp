// Scale-out: the sweep's plan / run / merge verbs (as a batch scheduler drives them), runs killed and run
// again, fingerprint refusal, the MPI task farm, and data-parallel training whose bits do not depend on
// the number of ranks or threads. The MPI tests skip, saying why, when MPI is not installed.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "experiments/sweep.h"
#include "spawn.h"
#include "util/mpi.h"
#include "util/process.h"
#include "util/rng.h"

using namespace blocklab;
namespace bt = blocklab::testing;
namespace fs = std::filesystem;

namespace {

const std::string kTiny = " --layers 1 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 4 --lr 3e-3 --threads 1 ";

// summary.csv without its last column (seconds: wall time, the one thing that differs between runs)
std::string summary_numbers(const fs::path& dir) {
  std::istringstream in(bt::read_text(dir / "summary.csv"));
  std::string line, out;
  while (std::getline(in, line)) out += line.substr(0, line.rfind(',')) + "\n";
  return out;
}

std::string cli(const std::string& args) {
  const auto r = bt::run_cli(args);
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out << r.err;
  return r.out;
}

// Why MPI tests cannot run here, or "" when they can.
std::string mpi_missing() {
  if (!mpi::built_with_mpi()) return "this blocklab was built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
  if (find_executable("mpirun").empty()) return "mpirun is not installed (apt-get install openmpi-bin)";
  return "";
}

// mpirun -np K blocklab ARGS, with the environment a container needs as root.
bt::CliResult mpirun(int ranks, const std::string& args) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  ::setenv("OMPI_MCA_btl", "self,vader", 1);
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
  ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the MPI library's own allocations under the sanitizer build
  static int counter = 0;
  const fs::path dir = fs::temp_directory_path();
  const fs::path out = dir / ("blocklab_mpi_out_" + std::to_string(::getpid()) + "_" + std::to_string(counter));
  const fs::path err = dir / ("blocklab_mpi_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string cmd = "mpirun --oversubscribe --bind-to none -np " + std::to_string(ranks) + " " + BLOCKLAB_CLI + " " +
                          args + " >" + out.string() + " 2>" + err.string();
  const int raw = std::system(cmd.c_str());
  bt::CliResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = bt::read_text(out);
  r.err = bt::read_text(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

// The newest checkpoint of a run: its name and every byte of its files (the config in the metadata leaves
// out the directory and the thread count, so that nothing in it depends on where or how wide the run ran).
std::string checkpoint_bytes(const fs::path& run) {
  const auto checkpoints = fs::path(run) / "checkpoints";
  std::vector<fs::path> steps;
  for (const auto& e : fs::directory_iterator(checkpoints))
    if (e.path().filename().string().rfind("step_", 0) == 0) steps.push_back(e.path());
  EXPECT_FALSE(steps.empty()) << run;
  if (steps.empty()) return "";
  std::sort(steps.begin(), steps.end());
  std::string out = steps.back().filename().string() + "\n";
  for (const char* name : {"model.safetensors", "state.safetensors", "COMPLETE"})
    out += std::string(name) + "\n" + bt::read_text(steps.back() / name);
  return out;
}

}  // namespace

TEST(SweepVerbs, PlanRunMergeGivesTheSummaryOfTheOneCommandSweep) {
  const fs::path dir = bt::fresh_dir("sweep_verbs");
  const std::string grid = kTiny + "--steps 20 --grid norm_placement=post,pre --seeds 0,1 --out ";
  cli("sweep" + grid + (dir / "one").string() + " --jobs 2");

  const std::string steps = cli("sweep plan" + grid + (dir / "three").string());
  EXPECT_NE(steps.find("planned 4 runs"), std::string::npos) << steps;
  const std::string plan = bt::read_text(dir / "three" / "plan.jsonl");
  EXPECT_EQ(std::count(plan.begin(), plan.end(), '\n'), 4);
  cli("sweep plan" + grid + (dir / "three").string());  // planning again changes nothing
  EXPECT_EQ(bt::read_text(dir / "three" / "plan.jsonl"), plan);

  // merge before anything ran: every run listed as not done, exit 1
  auto merged = bt::run_cli("sweep merge " + (dir / "three").string());
  EXPECT_EQ(merged.status, 1);
  EXPECT_NE(merged.out.find("not done: 3 norm_placement=pre+seed=1 (not started)"), std::string::npos) << merged.out;

  // an array job: one process per index, in any order; index 2 from SLURM_ARRAY_TASK_ID
  for (const char* index : {"3", "0", "1"}) cli("sweep run " + (dir / "three").string() + " --index " + index);
  ::setenv("SLURM_ARRAY_TASK_ID", "2", 1);
  const std::string from_env = cli("sweep run " + (dir / "three").string());
  ::unsetenv("SLURM_ARRAY_TASK_ID");
  EXPECT_NE(from_env.find("run 2 norm_placement=pre+seed=0: trained"), std::string::npos) << from_env;
  cli("sweep merge " + (dir / "three").string());
  const std::string summary = summary_numbers(dir / "one");
  EXPECT_EQ(summary_numbers(dir / "three"), summary);
  EXPECT_EQ(std::count(summary.begin(), summary.end(), '\n'), 5);

  // idempotent: a finished run is not touched
  const fs::path run0 = dir / "three" / "norm_placement=post+seed=0";
  const std::string metrics = bt::read_text(run0 / "metrics.csv");
  const auto written = fs::last_write_time(run0 / "result.json");
  const std::string again = cli("sweep run " + (dir / "three").string() + " --range 0:4");
  EXPECT_NE(again.find("run 0 norm_placement=post+seed=0: already done"), std::string::npos) << again;
  EXPECT_EQ(bt::read_text(run0 / "metrics.csv"), metrics);
  EXPECT_EQ(fs::last_write_time(run0 / "result.json"), written);
}

TEST(SweepVerbs, BadIndicesAndEditedPlansAreRefused) {
  const fs::path dir = bt::fresh_dir("sweep_verbs_bad");
  const std::string out = (dir / "s").string();
  cli("sweep plan" + kTiny + "--steps 3 --grid warmup=0,1 --seeds 0 --out " + out);
  for (const std::string args : {" --index 2", " --index x", " --range 1:1", " --range 0:5", ""}) {
    ::unsetenv("SLURM_ARRAY_TASK_ID");
    const auto r = bt::run_cli("sweep run " + out + args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
  }
  EXPECT_EQ(bt::run_cli("sweep run " + (dir / "nothing").string() + " --index 0").status, 2);
  // a plan whose config was edited by hand no longer matches its fingerprint
  std::string plan = bt::read_text(fs::path(out) / "plan.jsonl");
  const size_t at = plan.find("\"lr\":0.003");
  ASSERT_NE(at, std::string::npos) << plan;
  plan.replace(at, 10, "\"lr\":0.004");
  std::ofstream(fs::path(out) / "plan.jsonl") << plan;
  const auto r = bt::run_cli("sweep run " + out + " --index 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("fingerprint"), std::string::npos) << r.err;
}

TEST(SweepVerbs, ARunDirectoryWithAnotherConfigIsRefused) {
  const fs::path dir = bt::fresh_dir("sweep_verbs_fingerprint");
  const std::string out = (dir / "s").string();
  cli("sweep plan" + kTiny + "--steps 3 --grid warmup=0,1 --seeds 0 --out " + out);
  // someone trained another config into the run's directory
  cli("train" + kTiny + "--steps 3 --warmup 0 --lr 1e-2 --out " + out + "/warmup=0+seed=0");
  const std::string metrics = bt::read_text(fs::path(out) / "warmup=0+seed=0" / "metrics.csv");
  const auto r = bt::run_cli("sweep run " + out + " --index 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("holds a run with another config"), std::string::npos) << r.err;
  EXPECT_EQ(bt::read_text(fs::path(out) / "warmup=0+seed=0" / "metrics.csv"), metrics);  // untouched
  EXPECT_FALSE(fs::exists(fs::path(out) / "warmup=0+seed=0" / "result.json"));
  cli("sweep run " + out + " --index 1");  // the other run is fine
}

TEST(SweepVerbs, KilledRunsRunAgainToTheSameBytes) {
  const fs::path dir = bt::fresh_dir("sweep_verbs_kill");
  const std::string grid = " --layers 2 --width 32 --heads 2 --vocab 8 --copy-len 6 --batch 8 --threads 1 --steps 400 "
                           "--checkpoint-every 40 --grid warmup=0,10 --seeds 0 --out ";
  const std::string ref = (dir / "ref").string(), cut = (dir / "cut").string();
  cli("sweep plan" + grid + ref);
  cli("sweep plan" + grid + cut);
  cli("sweep run " + ref + " --range 0:2");
  cli("sweep run " + cut + " --index 1");  // finished first; must stay as it is
  const fs::path done = fs::path(cut) / "warmup=10+seed=0";
  const std::string done_metrics = bt::read_text(done / "metrics.csv"), done_result = bt::read_text(done / "result.json");

  // SIGKILL run 0 at moments drawn from a fixed seed (by the length of its metrics.csv), then run it again
  const fs::path metrics = fs::path(cut) / "warmup=0+seed=0" / "metrics.csv";
  Rng rng(42);
  for (int round = 0; round < 4; ++round) {
    const size_t target = bt::read_text(metrics).size() + 200 + rng.below(3000);
    const pid_t pid = bt::spawn_cli({"sweep", "run", cut, "--index", "0"}, (dir / "kill.log").string());
    bt::wait_until([&] { return bt::read_text(metrics).size() >= target; }, std::chrono::seconds(60));
    ::kill(pid, SIGKILL);
    bt::wait_child(pid);
    cli("sweep run " + cut + " --index 1");  // a finished run stays finished
  }
  const std::string last = cli("sweep run " + cut + " --range 0:2");
  EXPECT_EQ(bt::read_text(metrics), bt::read_text(fs::path(ref) / "warmup=0+seed=0" / "metrics.csv"));
  EXPECT_EQ(checkpoint_bytes(fs::path(cut) / "warmup=0+seed=0"), checkpoint_bytes(fs::path(ref) / "warmup=0+seed=0"));
  EXPECT_EQ(bt::read_text(done / "metrics.csv"), done_metrics);
  EXPECT_EQ(bt::read_text(done / "result.json"), done_result);
  cli("sweep merge " + ref);
  cli("sweep merge " + cut);
  EXPECT_EQ(summary_numbers(ref), summary_numbers(cut));
}

TEST(SweepVerbs, MpiTaskFarmGivesTheSameSummaryForAnyNumberOfRanks) {
  if (const std::string why = mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = bt::fresh_dir("sweep_verbs_mpi");
  const std::string grid = kTiny + "--steps 15 --grid norm_placement=post,pre --grid warmup=0,3 --seeds 0 --out ";
  cli("sweep plan" + grid + (dir / "loop").string());
  cli("sweep run " + (dir / "loop").string() + " --range 0:4");
  cli("sweep merge " + (dir / "loop").string());
  for (int ranks : {1, 2, 3}) {
    const fs::path out = dir / ("np" + std::to_string(ranks));
    cli("sweep plan" + grid + out.string());
    const auto r = mpirun(ranks, "sweep run " + out.string() + " --mpi --threads 1");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_EQ(summary_numbers(out), summary_numbers(dir / "loop")) << ranks << " rank(s)";
    for (const char* run : {"norm_placement=post+warmup=0+seed=0", "norm_placement=pre+warmup=3+seed=0"})
      EXPECT_EQ(bt::read_text(out / run / "metrics.csv"), bt::read_text(dir / "loop" / run / "metrics.csv"));
  }
}

TEST(DataParallel, SingleProcessMicroShardsAreValidatedAndChangeTheStep) {
  const fs::path dir = bt::fresh_dir("dp_single");
  const std::string args = " --layers 2 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 8 --steps 10 --threads 1 ";
  cli("train" + args + "--out " + (dir / "m1").string());
  cli("train" + args + "--micro-shards 1 --out " + (dir / "m1b").string());
  cli("train" + args + "--micro-shards 4 --out " + (dir / "m4").string());
  EXPECT_EQ(bt::read_text(dir / "m1" / "metrics.csv"), bt::read_text(dir / "m1b" / "metrics.csv"));
  // four shards of two sequences: the same batches, another summation order
  EXPECT_NE(bt::read_text(dir / "m1" / "metrics.csv"), bt::read_text(dir / "m4" / "metrics.csv"));
  const auto r = bt::run_cli("train" + args + "--micro-shards 3 --out " + (dir / "m3").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not a multiple of micro_shards 3"), std::string::npos) << r.err;
}

TEST(DataParallel, BitIdenticalForAnyRanksAndThreadsAndResumableWithAnotherRankCount) {
  if (const std::string why = mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = bt::fresh_dir("dp_mpi");
  const std::string args = "train --layers 2 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 8 --micro-shards 4 "
                           "--checkpoint-every 10 ";
  cli(args + "--steps 20 --threads 1 --out " + (dir / "single").string());
  const std::string metrics = bt::read_text(dir / "single" / "metrics.csv");
  const std::string checkpoint = checkpoint_bytes(dir / "single");
  ASSERT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 21);
  struct Case {
    int ranks, threads;
  };
  for (const Case c : {Case{1, 1}, Case{2, 1}, Case{4, 1}, Case{2, 2}, Case{1, 4}}) {
    const std::string name = std::to_string(c.ranks) + "x" + std::to_string(c.threads);
    const auto r = mpirun(c.ranks, args + "--steps 20 --threads " + std::to_string(c.threads) + " --out " +
                                       (dir / name).string());
    ASSERT_EQ(r.status, 0) << name << "\n" << r.out << r.err;
    EXPECT_EQ(bt::read_text(dir / name / "metrics.csv"), metrics) << name;
    EXPECT_EQ(checkpoint_bytes(dir / name), checkpoint) << name;
  }
  // 10 steps on 2 ranks, then on to 20 on 4 ranks: the run that never stopped
  ASSERT_EQ(mpirun(2, args + "--steps 10 --threads 1 --out " + (dir / "resumed").string()).status, 0);
  const auto r = mpirun(4, "train --resume " + (dir / "resumed").string() + " --steps 20 --threads 1");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(bt::read_text(dir / "resumed" / "metrics.csv"), metrics);
  EXPECT_EQ(checkpoint_bytes(dir / "resumed"), checkpoint);
  // a number of ranks that does not divide micro_shards is refused by every rank
  const auto bad = mpirun(3, args + "--steps 2 --threads 1 --out " + (dir / "three").string());
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("not a multiple of the number of ranks 3"), std::string::npos) << bad.err;
}

// The text task under mpirun: rank 0 writes tokens.bin, the others tokenize in memory; the windows, the
// validation loss and the weights are the single process's, byte for byte.
TEST(DataParallel, TextRunsAreBitIdenticalOnTwoRanks) {
  if (const std::string why = mpi_missing(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = bt::fresh_dir("dp_text");
  const std::string args = "train --task text --data " + std::string(BLOCKLAB_TEST_DATA) +
                           "/web_ruth_jonah.txt --layers 1 --width 16 --heads 2 --seq-len 16 --batch 8 "
                           "--micro-shards 4 --steps 6 --eval-every 3 --threads 1 ";
  cli(args + "--out " + (dir / "single").string());
  const auto r = mpirun(2, args + "--out " + (dir / "ranks").string());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  for (const char* name : {"metrics.csv", "model.safetensors", "tokens.bin"})
    EXPECT_EQ(bt::read_text(dir / "ranks" / name), bt::read_text(dir / "single" / name)) << name;
  EXPECT_NE(bt::read_text(dir / "ranks" / "metrics.csv").find("val_loss"), std::string::npos);
}
