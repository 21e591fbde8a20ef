// blocklab depthmap: a toy map end to end (CSV, table, figure), resuming without retraining, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "cli_runner.h"
#include "experiments/depthmap.h"
#include "report/plot.h"
#include "util/error.h"

using namespace blocklab;
namespace bt = blocklab::testing;
using namespace blocklab::experiments;
namespace fs = std::filesystem;

namespace {
// width 8, depths 1 and 2, 2 placements, warm-up 0 and 5, 20 steps, seed 0 (the full preset's default is 0,1,2)
const char* kToyFlags =
    "--width 8 --heads 2 --vocab 8 --copy-len 4 --batch 4 --steps 20 --lr 3e-3 --placements post,pre --depths 1,2 "
    "--warmups 0,5 --seeds 0 --jobs 2";

std::vector<std::vector<std::string>> csv_rows(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(split(line, ','));
  return rows;
}
}  // namespace

TEST(DepthMap, ToyMapWritesEveryCellAndResumesWithoutRetraining) {
  const fs::path dir = bt::fresh_dir("depthmap_toy") / "map";
  const bt::CliResult first = bt::run_cli(std::string("depthmap ") + kToyFlags + " --out " + dir.string());
  ASSERT_EQ(first.status, 0) << first.out << first.err;
  EXPECT_NE(first.out.find("8 runs"), std::string::npos) << first.out;  // the estimate, before training
  EXPECT_NE(first.out.find("Expected"), std::string::npos) << first.out;

  const auto rows = csv_rows(dir / "depthmap.csv");
  ASSERT_EQ(rows.size(), 9u);  // header + 2 placements x 2 depths x 2 warm-ups x 1 seed
  EXPECT_EQ(rows[0], (std::vector<std::string>{"placement", "depth", "warmup", "seed", "outcome", "first_step_below",
                                               "final_loss", "min_loss", "seconds"}));
  for (size_t i = 1; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 9u);
    EXPECT_TRUE(probe::parse_outcome(rows[i][4]).has_value()) << rows[i][4];
    EXPECT_TRUE(rows[i][0] == "post" || rows[i][0] == "pre");
    EXPECT_TRUE(rows[i][1] == "1" || rows[i][1] == "2");
  }
  const std::string md = bt::read_text(dir / "depthmap.md");
  EXPECT_NE(md.find("| placement | 1 blocks | 2 blocks |"), std::string::npos) << md;
  EXPECT_NE(md.find("| Post-LN |"), std::string::npos);
  EXPECT_NE(md.find("## Warm-up 5 steps"), std::string::npos);
  EXPECT_NE(md.find("tasks differ"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "depthmap.gp"));
  if (report::gnuplot_program().empty()) {
    std::printf("gnuplot is not installed: depthmap.{png,svg} not checked\n");
  } else {
    EXPECT_TRUE(fs::exists(dir / "depthmap.png"));
    EXPECT_TRUE(fs::exists(dir / "depthmap.svg"));
  }

  // Rerun: every run is reused, none retrained (the metrics files keep their times).
  const fs::path metrics = dir / "runs" / "norm_placement=post+layers=1+warmup=0+seed=0" / "metrics.csv";
  ASSERT_TRUE(fs::exists(metrics));
  const auto before = fs::last_write_time(metrics);
  const bt::CliResult again = bt::run_cli(std::string("depthmap ") + kToyFlags + " --out " + dir.string());
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("8 already finished, 0 to run"), std::string::npos) << again.out;
  EXPECT_EQ(fs::last_write_time(metrics), before);
  EXPECT_EQ(csv_rows(dir / "depthmap.csv").size(), 9u);
}

TEST(DepthMap, BadInputExits2AndWritesNothing) {
  const fs::path root = bt::fresh_dir("depthmap_bad");
  int i = 0;
  for (const char* bad : {"--placements post,middle", "--depths 0,2", "--depths -1", "--depths ''", "--placements ''",
                          "--warmups ''", "--depths 2,2", "--seeds ''"}) {
    const fs::path out = root / std::to_string(i++);
    const bt::CliResult r = bt::run_cli(std::string("depthmap --width 8 --heads 2 --steps 2 ") + bad + " --out " +
                                        out.string());
    EXPECT_EQ(r.status, 2) << bad << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << bad << ": " << r.err;
    EXPECT_FALSE(fs::exists(out)) << bad;
  }
}

TEST(DepthMap, FullPresetHasThreeSeedsQuickOne) {
  EXPECT_EQ(depthmap_preset(false).seeds, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(depthmap_preset(true).seeds, (std::vector<uint64_t>{0}));
}

TEST(DepthMap, CellsSummarizeSeeds) {
  DepthMapOptions o;
  o.placements = {NormPlacement::Post};
  o.depths = {6};
  o.warmups = {0};
  o.base.steps = 600;
  std::vector<DepthMapRun> runs(3);
  for (auto& r : runs) r.placement = NormPlacement::Post, r.depth = 6, r.warmup = 0;
  runs[0].outcome = probe::Outcome::Learned, runs[0].first_step_below = 150;
  runs[1].outcome = probe::Outcome::Learned, runs[1].first_step_below = 210;
  runs[2].outcome = probe::Outcome::NeverStarted;
  auto cells = summarize_depthmap(o, runs);
  ASSERT_EQ(cells.size(), 1u);
  EXPECT_EQ(cells[0].text, "2/3 learned, median 180 steps");
  EXPECT_EQ(cells[0].shown, probe::Outcome::Learned);
  runs[1].outcome = probe::Outcome::Learning;
  cells = summarize_depthmap(o, runs);
  EXPECT_EQ(cells[0].shown, probe::Outcome::NeverStarted);  // a tie between the failures: the earlier check
  EXPECT_EQ(cells[0].text, "1/3 never-started, 1/3 learned, 1/3 learning");
  runs.resize(1);
  runs[0].outcome = probe::Outcome::Collapsed;
  cells = summarize_depthmap(o, runs);
  EXPECT_EQ(cells[0].text, "collapsed");
  EXPECT_EQ(cell_color(cells[0], 600), cell_color(cells[0], 300));  // fixed colours for the failures
  EXPECT_THROW(plan_depthmap(o), Error);  // no output directory
  o.out = "/tmp/unused";
  o.seeds = {0};
  o.depths = {};
  EXPECT_THROW(plan_depthmap(o), Error);
}
