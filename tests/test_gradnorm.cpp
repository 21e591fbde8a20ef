// Experiment A: gradient norms per block at initialization.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_runner.h"
#include "experiments/gradnorm.h"
#include "io/metrics.h"
#include "util/error.h"

using namespace blocklab;
namespace bt = blocklab::testing;
using namespace blocklab::experiments;

namespace {
// 8 blocks are enough for both profiles to show their direction (Xiong et al. 2020, Fig. 3).
RunConfig small_model() {
  RunConfig c;
  c.model.layers = 8;
  c.model.width = 32;
  c.model.heads = 2;
  c.model.vocab = 16;
  c.copy_len = 8;
  c.batch = 8;
  c.threads = 1;
  return c;
}
}  // namespace

TEST(GradNorm, PostLnGrowsTowardTheOutputAndPreLnDoesNot) {
  const auto dir = bt::fresh_dir("gradnorm");
  GradNormOptions o;
  o.base = small_model();
  o.seeds = {0};
  o.batches = 4;
  o.out = (dir / "out").string();
  const GradNormResult r = run_gradnorm(o);
  ASSERT_EQ(r.profiles.size(), 2u);
  EXPECT_EQ(r.profiles[0].placement, NormPlacement::Post);
  EXPECT_EQ(r.profiles[1].placement, NormPlacement::Pre);
  ASSERT_EQ(r.profiles[0].mean.size(), 8u);
  EXPECT_GT(r.profiles[0].last_over_first(), 1.0);  // Post-LN: larger near the output
  EXPECT_LT(r.profiles[1].last_over_first(), 1.0);  // Pre-LN: does not grow
  EXPECT_LT(r.profiles[1].mean.back(), r.profiles[0].mean.back());

  // gradnorm.csv: every parameter tensor of every (placement, seed), 1-based blocks.
  std::ifstream in(dir / "out" / "gradnorm.csv");
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header, "placement,seed,block,parameter,grad_norm");
  int rows = 0, fc2_rows = 0;
  while (std::getline(in, line)) {
    ++rows;
    if (line.find("blocks.7.mlp.fc2.weight") != std::string::npos) {
      ++fc2_rows;
      EXPECT_EQ(line.rfind(line.substr(0, 4) == "post" ? "post,0,8," : "pre,0,8,", 0), 0u) << line;
    }
    if (line.find("tok_emb.weight") != std::string::npos) {
      EXPECT_NE(line.find(",0,,tok_emb.weight,"), std::string::npos) << line;
    }
  }
  int expected = 0;
  for (NormPlacement p : {NormPlacement::Post, NormPlacement::Pre}) {
    RunConfig resolved = small_model();
    resolved.model.norm_placement = p;
    resolve(resolved);
    expected += static_cast<int>(ParameterTable(resolved.model).specs().size());
  }
  EXPECT_EQ(rows, expected);
  EXPECT_EQ(fc2_rows, 2);
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "gradnorm_fc2.csv"));
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "gradnorm.gp"));
}

TEST(GradNorm, AveragesOverBatchesOfTheTrainingStream) {
  RunConfig c = small_model();
  c.model.layers = 2;
  resolve(c);
  const auto one = gradnorms_at_init(c, 1);
  const auto two = gradnorms_at_init(c, 2);
  ASSERT_EQ(one.size(), two.size());
  bool differs = false;
  for (size_t i = 0; i < one.size(); ++i) differs = differs || one[i].norm != two[i].norm;
  EXPECT_TRUE(differs);
  EXPECT_THROW(gradnorms_at_init(c, 0), Error);
}

TEST(GradNorm, CliRejectsBadInputWithExitTwo) {
  const auto dir = bt::fresh_dir("gradnorm_cli");
  const std::string small = " --layers 2 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 2 --threads 1";
  for (const std::string args : {"--seeds ''", "--seeds 1,x", "--placements post,middle", "--batches 0", "--heads 3"}) {
    const auto r = bt::run_cli("gradnorm" + small + " " + args + " --out " + (dir / "x").string());
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_FALSE(r.err.empty());
  }
  std::filesystem::create_directories(dir / "other");
  std::ofstream(dir / "other" / "notes.txt") << "x";
  const auto r = bt::run_cli("gradnorm" + small + " --out " + (dir / "other").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
  const auto ok = bt::run_cli("gradnorm" + small + " --seeds 3 --out " + (dir / "ok").string());
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("last/first"), std::string::npos) << ok.out;
}
