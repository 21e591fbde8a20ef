// blocklab reproduce end to end at a tiny scale: every part runs, and the report puts the source's
// numbers next to the measured ones, with every figure embedded in the HTML.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_runner.h"
#include "experiments/reproduce.h"
#include "io/plot.h"
#include "util/error.h"

using namespace blocklab;
namespace bt = blocklab::testing;
using namespace blocklab::experiments;
namespace fs = std::filesystem;

namespace {
RunConfig tiny(int layers) {
  RunConfig c;
  c.model.layers = layers;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.vocab = 8;
  c.copy_len = 4;
  c.batch = 4;
  c.steps = 12;
  c.lr = 3e-3;
  c.threads = 1;  // tiny models: more threads only add overhead on a busy machine
  return c;
}

ReproduceOptions tiny_options(const fs::path& out) {
  ReproduceOptions o = reproduce_preset(true);
  o.out = out.string();
  o.worker = BLOCKLAB_CLI;
  o.jobs = 2;
  o.seeds = {0, 1};
  o.gradnorm_model = tiny(3);
  o.gradnorm_batch_sizes = {4, 8};
  o.gradnorm_main_batch = 4;
  o.train = tiny(2);
  o.warmup = 4;
  o.probe_every = 6;
  o.depth_layers = {1, 2};
  o.depth_train = tiny(1);
  o.walk.trials = 100;
  o.residual_model = tiny(2);
  return o;
}
}  // namespace

TEST(Reproduce, PresetsUseTheSourcesSettings) {
  const ReproduceOptions full = reproduce_preset(false);
  EXPECT_FALSE(full.quick);
  EXPECT_EQ(full.train.model.layers, 24);
  EXPECT_EQ(full.train.model.width, 128);
  EXPECT_EQ(full.train.model.heads, 4);
  EXPECT_EQ(full.train.model.vocab, 64);
  EXPECT_EQ(full.train.copy_len, 32);
  EXPECT_EQ(full.train.steps, 1200);
  EXPECT_EQ(full.train.batch, 32);
  EXPECT_DOUBLE_EQ(full.train.lr, 1e-3);
  EXPECT_EQ(full.warmup, 400);
  EXPECT_EQ(full.seeds, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(full.gradnorm_model.model.layers, 24);
  EXPECT_EQ(full.walk.dim, 256);
  EXPECT_EQ(full.walk.trials, 2000);
  const ReproduceOptions quick = reproduce_preset(true);
  EXPECT_TRUE(quick.quick);
  EXPECT_EQ(quick.gradnorm_model.model.layers, 24);  // experiment A keeps the source's model
  EXPECT_LT(quick.train.model.layers * quick.train.steps, full.train.model.layers * full.train.steps);
  EXPECT_EQ(quick.seeds.size(), 3u);
}

TEST(Reproduce, WritesAReportWithTheSourcesNumbersNextToTheMeasuredOnes) {
  const fs::path dir = bt::fresh_dir("reproduce");
  const ReproduceResult r = run_reproduce(tiny_options(dir / "out"));
  const std::string md = bt::read_text(r.report_md);
  for (const char* expected : {"quick version", "4.1617 / 4.1616 / 4.1615", "| 1.07 |", "| 0.22 |",
                               "1.414 / 2.235 / 4.120 / 6.067", "(1.225, 0, -1.225)", "A +1, B -1", "5.9 / 59.8 / 533.6",
                               "Depth sweep", "Problem 11", "Where the measurements differ", "![",
                               "sweep/loss.png", "block_forms.png"})
    EXPECT_NE(md.find(expected), std::string::npos) << expected;
  for (const char* f : {"sweep/summary.csv", "gradnorm/batch_4/gradnorm.csv", "gradnorm/batch_8/gradnorm.csv",
                        "residual/residual_walk.csv", "residual/residual_init.csv", "standardize/per_row.csv",
                        "depth_post/summary.csv", "depth_pre/summary.csv", "block_forms.gp",
                        "sweep/norm_placement=pre+warmup=0+seed=0/residual.csv"})
    EXPECT_TRUE(fs::exists(dir / "out" / f)) << f;

  const std::string html = bt::read_text(r.report_html);
  EXPECT_NE(html.find("<table>"), std::string::npos);
  EXPECT_EQ(html.find("src=\"sweep"), std::string::npos);  // self-contained: no links to figure files
  if (!io::gnuplot_program().empty()) {
    size_t embedded = 0;
    for (size_t p = 0; (p = html.find("data:image/svg+xml;base64,", p)) != std::string::npos; ++p) ++embedded;
    EXPECT_GE(embedded, 8u);  // gradnorm, loss x2, depth x2, block forms, walk, residual probe
    EXPECT_EQ(html.find("class=\"missing\""), std::string::npos);
  }

  // Re-running continues (nothing to train); the full settings in the same directory are refused.
  EXPECT_NO_THROW(run_reproduce(tiny_options(dir / "out")));
  ReproduceOptions other = tiny_options(dir / "out");
  other.quick = false;
  EXPECT_THROW(run_reproduce(other), Error);
}

TEST(Reproduce, CliNeedsAnOutputDirectoryAndRefusesAForeignOne) {
  const fs::path dir = bt::fresh_dir("reproduce_cli");
  EXPECT_EQ(bt::run_cli("reproduce --quick").status, 2);
  fs::create_directories(dir / "busy");
  std::ofstream(dir / "busy" / "metrics.csv") << "step,loss\n";
  const auto r = bt::run_cli("reproduce --quick --out " + (dir / "busy").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
}
