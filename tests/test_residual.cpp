// Problem 10: the random-walk residual stream, and stream norms of models and training runs.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cmath>
#include <fstream>

#include "cli_runner.h"
#include "experiments/residual.h"
#include "util/error.h"

using namespace blocklab;
namespace bt = blocklab::testing;
using namespace blocklab::experiments;

TEST(RandomWalk, MeanLengthIsWithinTwoPercentOfSqrtLPlusOne) {
  const RandomWalkResult r = simulate_random_walk({});  // D 256, 2000 trials, L = 1, 4, 16, 36
  ASSERT_EQ(r.mean_length.size(), 37u);
  EXPECT_DOUBLE_EQ(r.mean_length[0], 1.0);
  for (int L : {1, 4, 16, 36}) EXPECT_NEAR(r.length_at(L) / std::sqrt(L + 1.0), 1.0, 0.02) << "L = " << L;
  // Block 36 changes the stream by about 1/6 of its length.
  EXPECT_NEAR(r.mean_relative_change[36], 1.0 / 6.0, 0.01);
  EXPECT_DOUBLE_EQ(r.mean_relative_change[1], 1.0);
  // Deterministic for a seed.
  EXPECT_EQ(simulate_random_walk({}).mean_length, r.mean_length);
}

TEST(RandomWalk, RejectsBadOptions) {
  EXPECT_THROW(simulate_random_walk({0, 10, {1}, 0}), Error);
  EXPECT_THROW(simulate_random_walk({8, 0, {1}, 0}), Error);
  EXPECT_THROW(simulate_random_walk({8, 10, {}, 0}), Error);
  EXPECT_THROW(simulate_random_walk({8, 10, {0}, 0}), Error);
}

TEST(Residual, ProbesModelsAtInitAndReadsTrainingProbes) {
  const auto dir = bt::fresh_dir("residual");
  // a training run with probes, through the CLI
  const auto run = bt::run_cli(
      "train --norm-placement pre --layers 3 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 4 --steps 8 "
      "--threads 1 --probe-every 4 --out " + (dir / "run").string());
  ASSERT_EQ(run.status, 0) << run.err;
  const RunResidualProbe p = read_residual_probe((dir / "run").string());
  EXPECT_EQ(p.steps, (std::vector<int>{0, 4, 8}));
  ASSERT_EQ(p.norms.size(), 3u);
  EXPECT_EQ(p.norms[0].mean_token_norm.size(), 4u);
  EXPECT_EQ(p.label, "Pre-LN 3 blocks, seed 0");
  EXPECT_THROW(read_residual_probe((dir / "nothing").string()), Error);

  ResidualOptions o;
  o.walk.trials = 50;
  o.base.model.layers = 3;
  o.base.model.width = 16;
  o.base.model.heads = 2;
  o.base.model.vocab = 8;
  o.base.copy_len = 4;
  o.base.batch = 4;
  o.base.threads = 1;
  o.runs = {(dir / "run").string()};
  o.out = (dir / "out").string();
  const ResidualResult r = run_residual(o);
  ASSERT_EQ(r.init.size(), 2u);
  for (const auto& init : r.init) EXPECT_EQ(init.norms.mean_token_norm.size(), 4u);
  // Post-LN streams are LayerNorm outputs: sqrt(C) per token after every block.
  EXPECT_NEAR(r.init[0].norms.mean_token_norm.back(), 4.0, 1e-3);
  for (const char* f : {"residual_walk.csv", "residual_init.csv", "residual_walk.gp", "residual_probe.gp"})
    EXPECT_TRUE(std::filesystem::exists(dir / "out" / f)) << f;
  std::ifstream walk(dir / "out" / "residual_walk.csv");
  std::string header;
  std::getline(walk, header);
  EXPECT_EQ(header, "depth,mean_length,sqrt_depth_plus_1,mean_relative_change");
}

TEST(Residual, CliPrintsTheTable) {
  const auto dir = bt::fresh_dir("residual_cli");
  const auto r = bt::run_cli("residual --no-model --trials 200 --out " + (dir / "out").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("sqrt(L+1)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("6.083"), std::string::npos) << r.out;
  EXPECT_EQ(bt::run_cli("residual --no-model --depths 1,0 --out " + (dir / "bad").string()).status, 2);
  // Without gnuplot: a clear message, the CSVs and scripts are still written, exit 0.
  ::setenv("BLOCKLAB_GNUPLOT", "/nonexistent/gnuplot", 1);
  const auto no_plot = bt::run_cli("residual --no-model --trials 20 --out " + (dir / "no_plot").string());
  ::unsetenv("BLOCKLAB_GNUPLOT");
  EXPECT_EQ(no_plot.status, 0) << no_plot.err;
  EXPECT_NE(no_plot.out.find("gnuplot not found"), std::string::npos) << no_plot.out;
  EXPECT_TRUE(std::filesystem::exists(dir / "no_plot" / "residual_walk.csv"));
  EXPECT_TRUE(std::filesystem::exists(dir / "no_plot" / "residual_walk.gp"));
  EXPECT_FALSE(std::filesystem::exists(dir / "no_plot" / "residual_walk.png"));
  EXPECT_EQ(bt::run_cli("residual --no-model --run " + (dir / "missing").string() + " --out " + (dir / "bad").string()).status, 2);
}
