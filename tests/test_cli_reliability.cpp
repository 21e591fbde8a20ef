// Reliability end to end through the blocklab command: a damaged newest checkpoint is skipped and the run
// continues bit-identically from the one before; inspect --verify; configs that cannot fit in memory are
// refused before anything is allocated; no flag value a user can type reaches an internal error.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "cli_runner.h"
#include "io/checkpoint.h"
#include "train/memory.h"
#include "train/run_config.h"

using namespace blocklab::testing;
namespace fs = std::filesystem;
namespace io = blocklab::io;

namespace {

const std::string kTiny = " --layers 2 --width 16 --heads 2 --vocab 6 --copy-len 4 --batch 4 --seed 5 --threads 1 ";

void flip_byte(const fs::path& p, std::streamoff from_end) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c = 0;
  f.get(c);
  f.seekp(-from_end, std::ios::end);
  f.put(static_cast<char>(c ^ 0x04));
}

}  // namespace

// The newest checkpoint has one flipped bit: resume says it skips it, continues from the one before, and
// the run ends with the numbers of a run that was never interrupted.
TEST(ResumeFallbackCli, SkipsTheDamagedCheckpointAndContinuesBitIdentically) {
  const fs::path dir = fresh_dir("cli_fallback");
  const std::string full = (dir / "full").string(), run = (dir / "run").string();
  ASSERT_EQ(run_cli("train" + kTiny + "--steps 12 --checkpoint-every 4 --out " + full).status, 0);
  ASSERT_EQ(run_cli("train" + kTiny + "--steps 8 --checkpoint-every 4 --out " + run).status, 0);
  flip_byte(dir / "run" / "checkpoints" / "step_0000008" / "model.safetensors", 50);
  const auto r = run_cli("train --resume " + run + " --steps 12");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("skipping damaged checkpoint"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("data damaged"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("step_0000004 (step 4)"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(dir / "full" / "metrics.csv"), read_text(dir / "run" / "metrics.csv"));
  EXPECT_EQ(read_text(dir / "full" / "checkpoints" / "step_0000012" / "model.safetensors"),
            read_text(dir / "run" / "checkpoints" / "step_0000012" / "model.safetensors"));
  EXPECT_TRUE(fs::is_directory(dir / "run" / "checkpoints" / "step_0000008.damaged"));  // kept for inspection
}

TEST(ResumeFallbackCli, NoCheckpointLeftExitsTwoAndKeepsTheFiles) {
  const fs::path dir = fresh_dir("cli_fallback_none");
  const std::string run = (dir / "run").string();
  ASSERT_EQ(run_cli("train" + kTiny + "--steps 4 --checkpoint-every 2 --out " + run).status, 0);
  for (const auto& c : io::list_checkpoints(run)) flip_byte(c.path / "state.safetensors", 20);
  const std::string metrics = read_text(dir / "run" / "metrics.csv");
  const auto r = run_cli("train --resume " + run);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("no checkpoint verifies"), std::string::npos) << r.err;
  EXPECT_EQ(io::list_checkpoints(run).size(), 2u);
  EXPECT_EQ(read_text(dir / "run" / "metrics.csv"), metrics);
}

TEST(InspectVerifyCli, OkThenNamesTheDamagedTensor) {
  const fs::path dir = fresh_dir("cli_verify");
  const std::string run = (dir / "run").string();
  ASSERT_EQ(run_cli("train" + kTiny + "--steps 2 --checkpoint-every 2 --out " + run).status, 0);
  const fs::path model = dir / "run" / "checkpoints" / "step_0000002" / "model.safetensors";
  auto r = run_cli("inspect --verify " + run);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("ok"), std::string::npos) << r.out;
  EXPECT_EQ(run_cli("inspect --verify " + model.string()).status, 0);
  flip_byte(model, 1);  // the last byte: the last tensor of the file
  r = run_cli("inspect --verify " + model.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("tensor 'head.weight': data damaged"), std::string::npos) << r.err;
  r = run_cli("inspect --verify " + (dir / "run" / "checkpoints" / "step_0000002").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("head.weight"), std::string::npos) << r.err;
}

// Far too large for any machine: refused in one line before anything is allocated (the child's peak RSS
// stays that of an idle program).
TEST(MemoryCli, OversizedConfigIsRefusedBeforeAllocating) {
  for (const std::string& args : {std::string("--batch 100000000"), std::string("--layers 2000000000"),
                                  std::string("--width 30000 --heads 1 --vocab 2 --mlp-ratio 1")}) {
    const auto r = run_cli("train " + args + " --out " + (fresh_dir("cli_mem") / "run").string());
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("train needs"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("is available"), std::string::npos) << r.err;
  }
  rusage usage{};
  ::getrusage(RUSAGE_CHILDREN, &usage);
  EXPECT_LT(usage.ru_maxrss, 200 * 1024) << "peak RSS of a refused run, KiB";
}

TEST(MemoryCli, RefusesAgainstTheMemoryGiven) {
  blocklab::RunConfig c;
  c.model.layers = 2, c.model.width = 16, c.model.heads = 2, c.model.vocab = 6, c.copy_len = 4, c.batch = 4;
  blocklab::resolve(c);
  const double per_run = blocklab::training_memory(c).total() + blocklab::kProgramBytes;
  const std::string env = "BLOCKLAB_MEMORY_AVAILABLE=" + std::to_string(static_cast<long long>(1.5 * per_run)) + " ";
  const fs::path dir = fresh_dir("cli_mem_given");
  // One run fits; two at once do not.
  auto r = run_cli_env(env, "train" + kTiny + "--steps 1 --out " + (dir / "one").string());
  EXPECT_EQ(r.status, 0) << r.err;
  const std::string sweep_model = " --layers 2 --width 16 --heads 2 --vocab 6 --copy-len 4 --batch 4 --threads 1 ";
  r = run_cli_env(env, "sweep" + sweep_model + "--steps 1 --seeds 0,1 --jobs 2 --out " + (dir / "sweep").string());
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("x 2 runs"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "sweep" / "summary.csv"));
  // The depth map (a sweep underneath) refuses before any run trains.
  r = run_cli_env(env, "depthmap --width 16 --heads 2 --vocab 6 --copy-len 4 --batch 4 --threads 1 --steps 1 "
                      "--placements pre --depths 2 --warmups 0,1 --jobs 2 --out " + (dir / "map").string());
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("x 2 runs"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "map" / "runs" / "pre+layers=2+warmup=0+seed=0" / "metrics.csv"));
  EXPECT_FALSE(fs::exists(dir / "map" / "depthmap.csv"));
  r = run_cli_env("BLOCKLAB_MEMORY_AVAILABLE=1000000 ", "train" + kTiny + "--steps 1 --out " + (dir / "small").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("(BLOCKLAB_MEMORY_AVAILABLE)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "small" / "config.json"));
}

// Every numeric flag of each command, with values a user might type by mistake: exit 0 or 2, never an
// internal error (3) or a signal. --out names a regular file, so a run that gets past validation (and its
// allocation) stops at the output directory instead of training.
TEST(FlagSweepCli, OutOfRangeValuesNeverReachAnInternalError) {
  const fs::path dir = fresh_dir("cli_flag_sweep");
  const fs::path file = dir / "a_file";
  std::ofstream(file) << "x";
  const std::vector<std::string> values = {"0", "-1", "2147483647", "99999999999999999999", "nan",
                                           "''", "\"$(printf '\\377\\376')\""};
  // train takes every config flag; the other commands share them (the same parser and checks), so for
  // them only their own flags and the sizes that decide their memory are swept.
  std::set<std::string> config_flags;
  const std::set<std::string> sizes = {"--batch", "--layers", "--width", "--mlp-ratio", "--threads", "--copy-len"};
  const fs::path run = dir / "reverse";  // a run to sample from
  ASSERT_EQ(run_cli("train --task reverse" + kTiny + "--steps 1 --out " + run.string()).status, 0);
  const std::vector<std::pair<std::string, std::string>> commands = {
      {"train", kTiny + "--steps 1 --out " + file.string()},  // first: its flags are the config flags
      {"bench", kTiny + "--bench-steps 1 --warmup-steps 0"},
      {"gradnorm", kTiny + "--placements pre --out " + file.string()},
      {"sweep", " --layers 2 --width 16 --heads 2 --vocab 6 --copy-len 4 --batch 4 --steps 1 --jobs 1 --out " + file.string()},
      {"depthmap", kTiny + "--steps 1 --out " + file.string()},
      {"reproduce", kTiny + "--quick --out " + file.string()},
      {"residual", kTiny + "--out " + file.string()},
      {"standardize", "--out " + file.string()},
      {"sample", run.string() + " --prompt-ids 1,2 --tokens 2 "}};
  const std::regex numeric_option(R"(^\s+(--[a-z0-9-]+)\s+(INT|FLOAT|UINT|N|K|NUMBER|N:INT|INT:|FLOAT:)\b)");
  // Valid values that ask for a very long computation (it runs before the output directory is checked).
  const std::set<std::string> never_ending = {"bench --bench-steps", "bench --warmup-steps", "residual --trials",
                                              "sample --tokens"};
  int cases = 0;
  for (const auto& [command, base] : commands) {
    const auto help = run_cli(command + " --help");
    ASSERT_EQ(help.status, 0) << command;
    std::istringstream lines(help.out);
    std::string line;
    while (std::getline(lines, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, numeric_option)) continue;
      const std::string flag = m[1];
      if (command == "train") config_flags.insert(flag);
      else if (config_flags.count(flag) && !sizes.count(flag)) continue;
      for (const std::string& value : values) {
        if (value == "2147483647" && never_ending.count(command + " " + flag)) continue;
        const auto r = run_cli(command + " " + base + " " + flag + " " + value);
        ++cases;
        EXPECT_TRUE(r.status == 0 || r.status == 2)
            << command << " " << flag << " " << value << ": exit " << r.status << "\n" << r.err;
        EXPECT_EQ(r.err.find("internal error"), std::string::npos) << command << " " << flag << " " << value << r.err;
      }
    }
  }
  EXPECT_GT(cases, 150);
}
