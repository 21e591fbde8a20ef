// Experiment A: gradient norms per block at initialization.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "cli_runner.h"
#include "experiments/gradnorm.h"
#include "report/labels.h"
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

TEST(GradNorm, FamilyOfAParameterIsItsNameWithoutTheBlock) {
  EXPECT_EQ(parameter_family("blocks.0.mlp.fc2.weight"), "mlp.fc2.weight");
  EXPECT_EQ(parameter_family("blocks.23.attn_omega"), "attn_omega");
  EXPECT_EQ(parameter_family("tok_emb.weight"), "");
  EXPECT_EQ(parameter_family("final_norm.weight"), "");
  EXPECT_EQ(parameter_family("blocks.x.norm1.weight"), "");
}

TEST(GradNorm, CliAllPlacementsGivesEveryPlacementAndEveryFamilyFigure) {
  const auto dir = bt::fresh_dir("gradnorm_all");
  const auto out = dir / "all";
  const std::string tiny = " --layers 4 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 2 --threads 1";
  const auto r = bt::run_cli("gradnorm" + tiny + " --placements all --seeds 0 --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.err;

  // gradnorm.csv: every tensor of every placement, under its config value.
  std::map<std::string, int> rows;
  std::ifstream in(out / "gradnorm.csv");
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) ++rows[line.substr(0, line.find(','))];
  std::set<std::string> families;
  for (NormPlacement p : report::all_placements()) {
    RunConfig c;
    c.model.layers = 4;
    c.model.width = 16;
    c.model.heads = 2;
    c.model.vocab = 8;
    c.copy_len = 4;
    c.batch = 2;
    c.model.norm_placement = p;
    resolve(c);
    const ParameterTable table(c.model);
    const auto& specs = table.specs();
    EXPECT_EQ(rows[to_string(p)], static_cast<int>(specs.size())) << to_string(p);
    for (const ParamSpec& s : specs)
      if (!parameter_family(s.name).empty()) families.insert(parameter_family(s.name));
    EXPECT_NE(r.out.find(report::placement_label(p)), std::string::npos) << r.out;
  }
  EXPECT_EQ(rows.size(), report::all_placements().size());
  EXPECT_TRUE(families.count("mlp.fc2.weight"));
  EXPECT_TRUE(families.count("attn_omega"));    // admin only
  EXPECT_TRUE(families.count("rezero_alpha"));  // rezero only

  // One figure per family; its script always, the PNG and SVG when gnuplot is there.
  const bool gnuplot = !report::gnuplot_program().empty();
  if (!gnuplot) std::printf("gnuplot is not installed: checking the figure scripts only\n");
  for (const std::string& f : families) {
    const auto base = out / ("gradnorm_" + f);
    EXPECT_TRUE(std::filesystem::exists(base.string() + ".gp")) << f;
    if (gnuplot) {
      EXPECT_TRUE(std::filesystem::exists(base.string() + ".png")) << f;
      EXPECT_TRUE(std::filesystem::exists(base.string() + ".svg")) << f;
    }
  }
  // A family only some placements have shows only those: Admin's omega has no Pre-LN curve.
  const std::string omega = bt::read_text(out / "gradnorm_attn_omega.gp");
  EXPECT_NE(omega.find("\"Admin\""), std::string::npos);
  EXPECT_EQ(omega.find("Pre-LN"), std::string::npos);

  // The summary table has a row per placement.
  const std::string summary = bt::read_text(out / "gradnorm_summary.md");
  EXPECT_NE(summary.find("| last / first |"), std::string::npos) << summary;
  for (NormPlacement p : report::all_placements())
    EXPECT_NE(summary.find("| " + report::placement_label(p) + " | `" + to_string(p) + "` |"), std::string::npos) << summary;
}

TEST(GradNorm, CliRejectsAnUnknownPlacementListingTheValidNames) {
  const auto dir = bt::fresh_dir("gradnorm_unknown");
  const std::string tiny = " --layers 2 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 2 --threads 1";
  for (const std::string list : {"post,sandwich", "all,pre", "Peri"}) {
    const auto r = bt::run_cli("gradnorm" + tiny + " --placements " + list + " --out " + (dir / "x").string());
    EXPECT_EQ(r.status, 2) << list << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (NormPlacement p : report::all_placements()) EXPECT_NE(r.err.find(to_string(p)), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("all"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "x" / "gradnorm.csv"));
  }
}
