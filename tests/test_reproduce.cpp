// blocklab reproduce: the claims table's verdicts from synthetic measurements (no training), and the
// whole reproduction end to end at a tiny scale (every part runs, the report holds the claims table and
// every figure is embedded in the HTML).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "cli_runner.h"
#include "experiments/reproduce.h"
#include "io/csv.h"
#include "report/plot.h"
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
  o.depthmap_options.base = tiny(1);
  o.depthmap_options.placements = {NormPlacement::Post, NormPlacement::Pre};
  o.depthmap_options.depths = {1, 2};
  o.depthmap_options.warmups = {0, 4};
  o.stabilitymap_options.base = tiny(1);
  o.stabilitymap_options.warmups = {0};
  o.stabilitymap_options.lrs = {1e-3, 1e-2};
  o.stabilitymap_options.seeds = {0};
  o.walk.trials = 100;
  o.residual_model = tiny(2);
  o.curvature_options.base = tiny(2);
  o.curvature_options.base.steps = 6;
  o.curvature_options.warmup = 4;
  o.curvature_options.every = 3;
  o.curvature_options.batch = 2;
  o.curvature_options.curvature.max_iter = 6;
  o.curvature_options.block_max_iter = 6;
  return o;
}

// ---- synthetic measurements -----------------------------------------------------------------------

const double kLn64 = std::log(64.0);

// One run of experiment B with the given loss per step (steps 1, 2, ...), labelled as the sweep labels it.
SweepRunResult run_with_losses(NormPlacement placement, int warmup, uint64_t seed, const std::vector<double>& losses) {
  SweepRunResult r;
  r.run.config.model.norm_placement = placement;
  r.run.config.model.vocab = 64;
  r.run.config.warmup = warmup;
  r.run.config.seed = seed;
  r.run.seed = seed;
  for (size_t i = 0; i < losses.size(); ++i) r.steps.push_back(static_cast<int>(i) + 1);
  r.losses = losses;
  r.curve = probe::summarize_curve(r.steps, r.losses, kLn64);
  return r;
}

// 1,200 steps at ln 64, with batch-to-batch scatter of a few thousandths: a run that never started.
std::vector<double> stays_at_ln64() {
  std::vector<double> l;
  for (int s = 1; s <= 1200; ++s) l.push_back(kLn64 + 0.003 * std::sin(0.7 * s));
  return l;
}

// From ln 64 down to `final_loss`, exponentially, reaching half-way (in log) at `half_step`.
std::vector<double> learns(double final_loss, int half_step = 100) {
  std::vector<double> l;
  for (int s = 1; s <= 1200; ++s) {
    const double t = std::min(1.0, s / (2.0 * half_step));
    l.push_back(std::exp((1 - t) * std::log(kLn64) + t * std::log(final_loss)));
  }
  return l;
}

// Learns down to 0.05 by step 300, then jumps back to ln 64 (a collapse).
std::vector<double> collapses() {
  std::vector<double> l = learns(0.05, 150);
  for (int s = 460; s <= 1200; ++s) l[s - 1] = kLn64 + 0.16;
  return l;
}

GradNormProfile profile_of(NormPlacement placement, double first, double last) {
  GradNormProfile p{placement, {}, {}};
  for (double scale : {0.9, 1.1}) p.per_seed.push_back({first * scale, (first + last) / 2 * scale, last * scale});
  p.mean = {first, (first + last) / 2, last};
  return p;
}

struct Synthetic {
  ReproduceOptions options = reproduce_preset(false);
  ReproduceMeasurements m;

  Synthetic() {
    m.scores = source_score_table();
    m.per_row = standardize_rows(m.scores);
    m.per_column = standardize_columns(m.scores, {"A", "B"});
    m.gradnorms[16].profiles = {profile_of(NormPlacement::Post, 0.8, 1.0), profile_of(NormPlacement::Pre, 0.5, 0.4)};
    RandomWalkResult& walk = m.residual.walk;
    walk.depths = {1, 4, 16, 36};
    for (int l = 0; l <= 36; ++l) {
      walk.mean_length.push_back(std::sqrt(l + 1.0));
      walk.mean_relative_change.push_back(l == 0 ? std::nan("") : 1 / std::sqrt(static_cast<double>(l)));
    }
  }
  // Sets one cell of experiment B: the runs of one placement and warm-up, one curve per seed.
  void cell(NormPlacement placement, int warmup, const std::vector<std::vector<double>>& curves) {
    auto& runs = m.sweep.runs;
    runs.erase(std::remove_if(runs.begin(), runs.end(),
                              [&](const SweepRunResult& r) {
                                return r.run.config.model.norm_placement == placement && r.run.config.warmup == warmup;
                              }),
               runs.end());
    for (size_t s = 0; s < curves.size(); ++s) runs.push_back(run_with_losses(placement, warmup, s, curves[s]));
  }
  Verdict verdict(const std::string& id) const {
    const std::vector<ClaimRow> rows = judge_claims(options, m);
    const ClaimRow* row = find_claim(rows, id);
    EXPECT_NE(row, nullptr) << id;
    return row ? row->verdict : Verdict::None;
  }
};
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
  EXPECT_TRUE(full.depthmap);
  EXPECT_EQ(full.depthmap_options.depths, (std::vector<int>{6, 12, 24}));
  EXPECT_EQ(full.depthmap_options.base.model.width, 128);
  EXPECT_EQ(full.depthmap_options.seeds.size(), 1u);  // the depth map's own full preset has three
  EXPECT_TRUE(full.stabilitymap);  // the quick stability map in both versions
  EXPECT_EQ(full.stabilitymap_options.base.model.layers, 6);
  EXPECT_EQ(full.stabilitymap_options.seeds, (std::vector<uint64_t>{0, 1, 2}));
  const ReproduceOptions quick = reproduce_preset(true);
  EXPECT_TRUE(quick.quick);
  EXPECT_TRUE(quick.depthmap);
  EXPECT_EQ(quick.gradnorm_model.model.layers, 24);  // experiment A keeps the source's model
  EXPECT_LT(quick.train.model.layers * quick.train.steps, full.train.model.layers * full.train.steps);
  EXPECT_EQ(quick.seeds.size(), 3u);
}

// ---- claims from synthetic measurements ---------------------------------------------------------

TEST(ReproduceClaims, PostLnWithoutWarmupReproducesOnlyWhenItStaysAtLnV) {
  Synthetic x;
  x.cell(NormPlacement::Post, 0, {stays_at_ln64(), stays_at_ln64(), stays_at_ln64()});
  EXPECT_EQ(x.verdict("B.post_no_warmup.final_loss"), Verdict::Agrees);
  x.cell(NormPlacement::Post, 0, {stays_at_ln64(), learns(0.001), stays_at_ln64()});
  EXPECT_EQ(x.verdict("B.post_no_warmup.final_loss"), Verdict::Differs);
  x.cell(NormPlacement::Post, 0, {});
  EXPECT_EQ(x.verdict("B.post_no_warmup.final_loss"), Verdict::Differs);  // nothing ran: nothing reproduced
}

TEST(ReproduceClaims, PostLnWithWarmupOutcomesAndFailures) {
  Synthetic x;
  const int w = x.options.warmup;
  x.cell(NormPlacement::Post, 0, {stays_at_ln64(), stays_at_ln64(), stays_at_ln64()});
  x.cell(NormPlacement::Post, w, {learns(0.01), collapses(), learns(0.02)});
  EXPECT_EQ(x.verdict("B.post_warmup.outcomes"), Verdict::Agrees);  // a collapse, as in the source
  EXPECT_EQ(x.verdict("B.post.failed"), Verdict::Agrees);           // 3 + 1 of 6 failed
  EXPECT_EQ(x.verdict("B.post_warmup.losses"), Verdict::None);      // step losses: compared in the figure
  x.cell(NormPlacement::Post, w, {learns(0.01), learns(0.02), learns(0.03)});
  EXPECT_EQ(x.verdict("B.post_warmup.outcomes"), Verdict::Partly);  // learned, but no collapse
  EXPECT_EQ(x.verdict("B.post.failed"), Verdict::Differs);          // 3 of 6
  x.cell(NormPlacement::Post, w, {learns(0.01), stays_at_ln64(), learns(0.03)});
  EXPECT_EQ(x.verdict("B.post_warmup.outcomes"), Verdict::Differs);
  EXPECT_EQ(x.verdict("B.post_warmup.losses"), Verdict::Differs);
}

TEST(ReproduceClaims, PreLnWithoutWarmupLearnsAndHowEarly) {
  Synthetic x;
  // Half-way (in log) at step 50 and done by step 100: below 0.007 at step 200 in every seed.
  x.cell(NormPlacement::Pre, 0, {learns(0.0003, 50), learns(0.0004, 50), learns(0.0002, 50)});
  EXPECT_EQ(x.verdict("B.pre_no_warmup.final_loss"), Verdict::Agrees);
  EXPECT_EQ(x.verdict("B.pre_no_warmup.below_at_step"), Verdict::Agrees);
  // One seed gets there only by step 400.
  x.cell(NormPlacement::Pre, 0, {learns(0.0003, 50), learns(0.0004, 200), learns(0.0002, 50)});
  EXPECT_EQ(x.verdict("B.pre_no_warmup.final_loss"), Verdict::Agrees);
  EXPECT_EQ(x.verdict("B.pre_no_warmup.below_at_step"), Verdict::Differs);
  x.cell(NormPlacement::Pre, 0, {learns(0.0003, 50), stays_at_ln64(), learns(0.0002, 50)});
  EXPECT_EQ(x.verdict("B.pre_no_warmup.final_loss"), Verdict::Differs);
  // The quick version trains another model on another schedule: its step numbers are not compared.
  x.options.quick = true;
  for (const char* id : {"B.pre_no_warmup.below_at_step", "B.pre_no_warmup.loss_at_100",
                         "B.pre_no_warmup.first_below", "B.post_warmup.losses"})
    EXPECT_EQ(x.verdict(id), Verdict::NotComparable) << id;
  EXPECT_EQ(x.verdict("B.pre_no_warmup.final_loss"), Verdict::Differs);  // outcomes still count
}

TEST(ReproduceClaims, GradientProfiles) {
  Synthetic x;
  EXPECT_EQ(x.verdict("A.post.grows"), Verdict::Agrees);            // 0.8 -> 1.0
  EXPECT_EQ(x.verdict("A.pre.shrinks_slightly"), Verdict::Agrees);  // 0.5 -> 0.4
  x.m.gradnorms[16].profiles = {profile_of(NormPlacement::Post, 1.0, 0.8), profile_of(NormPlacement::Pre, 0.5, 0.2)};
  EXPECT_EQ(x.verdict("A.post.grows"), Verdict::Differs);
  EXPECT_EQ(x.verdict("A.pre.shrinks_slightly"), Verdict::Partly);  // does not grow, falls by more than slightly
  x.m.gradnorms[16].profiles[1] = profile_of(NormPlacement::Pre, 0.5, 0.6);
  EXPECT_EQ(x.verdict("A.pre.shrinks_slightly"), Verdict::Differs);

  // The absolute values get a difference in percent from the source's, not a verdict.
  const SourceNumbers& src = source_numbers();
  x.m.gradnorms[16].profiles = {profile_of(NormPlacement::Post, 1.0, 1.5 * src.post_last_block),
                                profile_of(NormPlacement::Pre, 0.5, 0.5 * src.pre_last_block)};
  const auto rows = judge_claims(x.options, x.m);
  ASSERT_NE(find_claim(rows, "A.post.last_block"), nullptr);
  EXPECT_EQ(find_claim(rows, "A.post.last_block")->verdict, Verdict::None);
  EXPECT_EQ(find_claim(rows, "A.post.last_block")->verdict_text.rfind("+50%", 0), 0u);
  EXPECT_EQ(find_claim(rows, "A.pre.last_block")->verdict_text.rfind("-50%", 0), 0u);

  // The batch drawn is the main one when measured, else the smallest measured.
  x.m.gradnorms.clear();
  x.m.gradnorms[8].profiles = {profile_of(NormPlacement::Post, 0.8, 1.0), profile_of(NormPlacement::Pre, 0.5, 0.6)};
  x.m.gradnorms[32].profiles = {profile_of(NormPlacement::Post, 1.0, 0.8), profile_of(NormPlacement::Pre, 0.5, 0.4)};
  EXPECT_EQ(x.verdict("A.post.grows"), Verdict::Agrees);
  EXPECT_EQ(x.verdict("A.pre.shrinks_slightly"), Verdict::Differs);
  // Without both profiles the experiment A rows are left out.
  x.m.gradnorms.clear();
  const auto without = judge_claims(x.options, x.m);
  for (const char* id : {"A.post.last_block", "A.post.grows", "A.pre.last_block", "A.pre.shrinks_slightly"})
    EXPECT_EQ(find_claim(without, id), nullptr) << id;
}

TEST(ReproduceClaims, StandardizingAndTheRandomWalk) {
  Synthetic x;
  for (const char* id : {"9.per_student.A", "9.per_student.C", "9.per_subject", "10.walk.length", "10.walk.change"})
    EXPECT_EQ(x.verdict(id), Verdict::Agrees) << id;
  EXPECT_EQ(find_claim(judge_claims(x.options, x.m), "10.qwen"), nullptr);  // no row for a model not run here

  ScoreTable other = x.m.scores;
  other.values[0] = {70, 80, 90};  // A's order reverses: per student it reads (-1.225, 0, 1.225)
  x.m.per_row = standardize_rows(other);
  EXPECT_EQ(x.verdict("9.per_student.A"), Verdict::Differs);
  EXPECT_EQ(x.verdict("9.per_student.C"), Verdict::Agrees);

  for (double& v : x.m.residual.walk.mean_length) v *= 1.05;  // 5% longer than sqrt(L+1)
  EXPECT_EQ(x.verdict("10.walk.length"), Verdict::Differs);
  x.m.residual.walk.mean_length.resize(17);  // walked to 16 blocks only: depth 36 is missing
  x.m.residual.walk.mean_relative_change.resize(17);
  EXPECT_EQ(x.verdict("10.walk.length"), Verdict::Differs);
  EXPECT_EQ(x.verdict("10.walk.change"), Verdict::None);  // the source's value is for block 36
}

TEST(ReproduceClaims, RowsComeInReportOrderWithTheSourcesValues) {
  Synthetic x;
  for (NormPlacement p : {NormPlacement::Post, NormPlacement::Pre})
    for (int warmup : {0, x.options.warmup}) x.cell(p, warmup, {learns(0.001)});
  const auto rows = judge_claims(x.options, x.m);
  std::vector<std::string> ids;
  for (const auto& r : rows) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<std::string>{
                     "A.post.last_block", "A.post.grows", "A.pre.last_block", "A.pre.shrinks_slightly",
                     "B.post_no_warmup.final_loss", "B.post_warmup.losses", "B.post_warmup.outcomes", "B.post.failed",
                     "B.pre_no_warmup.loss_at_100", "B.pre_no_warmup.below_at_step", "B.pre_no_warmup.first_below",
                     "B.pre_no_warmup.final_loss", "B.pre_warmup.final_loss", "9.per_student.A", "9.per_student.C",
                     "9.per_subject", "10.walk.length", "10.walk.change"}));
  for (const auto& r : rows) {
    EXPECT_FALSE(r.claim.empty()) << r.id;
    EXPECT_FALSE(r.source.empty()) << r.id;
    EXPECT_FALSE(r.measured.empty()) << r.id;
    if (r.verdict != Verdict::None) {
      EXPECT_FALSE(r.verdict_text.empty()) << r.id;
    }
  }
  // In Korean: the same rows with the same verdicts, every text in the report's language.
  x.options.lang = report::Lang::Ko;
  const auto korean = judge_claims(x.options, x.m);
  ASSERT_EQ(korean.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(korean[i].id, rows[i].id);
    EXPECT_EQ(korean[i].verdict, rows[i].verdict) << rows[i].id;
    EXPECT_NE(korean[i].claim, rows[i].claim) << rows[i].id;
    if (rows[i].verdict == Verdict::Agrees) {
      EXPECT_EQ(korean[i].verdict_text.rfind("맞음", 0), 0u) << rows[i].id;
    }
  }
}

// ---- end to end --------------------------------------------------------------------------------------

TEST(Reproduce, WritesAReportWithTheClaimsTableAndEveryFigure) {
  const fs::path dir = bt::fresh_dir("reproduce");
  const ReproduceResult r = run_reproduce(tiny_options(dir / "out"));
  const std::string md = bt::read_text(r.report_md);
  ASSERT_GE(r.claims.size(), 18u);  // every row: the tiny run measures all of them
  for (const ClaimRow& c : r.claims) {
    const std::string row = "| " + c.claim + " | " + c.source + " | " + c.measured + " | " + c.verdict_text + " |";
    EXPECT_NE(md.find(row), std::string::npos) << row;
  }
  for (const char* figure : {"gradnorm/batch_4/gradnorm.png", "sweep/loss.png", "sweep/loss_linear.png",
                             "depth_post/loss.png", "depth_pre/loss.png", "depthmap/depthmap.png", "stabilitymap/stabilitymap.png", "block_forms.png",
                             "residual/residual_walk.png", "residual/residual_probe.png", "curvature/curvature.png",
                             "curvature/per_block_init.png"})
    EXPECT_NE(md.find(std::string("](") + figure + ")"), std::string::npos) << figure;
  for (const char* f : {"sweep/summary.csv", "gradnorm/batch_4/gradnorm.csv", "gradnorm/batch_8/gradnorm.csv",
                        "residual/residual_walk.csv", "residual/residual_init.csv", "standardize/per_row.csv",
                        "depth_post/summary.csv", "depth_pre/summary.csv", "depthmap/depthmap.csv",
                        "depthmap/depthmap.md", "stabilitymap/stabilitymap.csv", "stabilitymap/stabilitymap.md",
                        "block_forms.gp",
                        "sweep/norm_placement=pre+warmup=0+seed=0/residual.csv", "curvature/per_block_init.csv",
                        "curvature/post_warmup0/curvature.csv", "curvature/pre_warmup4/curvature.csv"})
    EXPECT_TRUE(fs::exists(dir / "out" / f)) << f;

  EXPECT_NE(md.find("## Why warm-up works"), std::string::npos);
  {  // curvature.csv: the rows the recorder wrote (steps 0, 1, 2, 3, 6), thresholds from each run's schedule
    const auto rows = io::read_csv((dir / "out" / "curvature" / "pre_warmup4" / "curvature.csv").string());
    ASSERT_EQ(rows.size(), 6u);
    EXPECT_EQ(rows[2].fields[0], "1");
    EXPECT_EQ(rows[3].fields[0], "2");
    EXPECT_EQ(rows[5].fields[0], "6");
    EXPECT_EQ(rows[1].fields[0], "0");
    EXPECT_NEAR(std::stod(rows[1].fields[6]) * std::stod(rows[1].fields[1]), 38.0, 1e-5);
    EXPECT_NEAR(std::stod(rows[1].fields[1]), 3e-3 / 4, 1e-12);  // lr(1) under a 4-step warm-up
  }
  EXPECT_NE(md.find("## Depth map"), std::string::npos);
  EXPECT_NE(md.find("Public anchors"), std::string::npos);
  {  // the explanations of warm-up: one verdict each, from this run's data (the toy map has one warm-up length)
    const size_t at = md.find("## Three explanations of warm-up");
    ASSERT_NE(at, std::string::npos);
    for (const char* part : {"### 1. Gradient scale", "### 2. The variance of Adam", "### 3a. Curvature",
                             "### 3b. Curvature", "fewer than two warm-up lengths"})
      EXPECT_NE(md.find(part, at), std::string::npos) << part;
    size_t verdicts = 0;
    for (size_t p = md.find("**Verdict: ", at); p != std::string::npos; p = md.find("**Verdict: ", p + 1)) ++verdicts;
    EXPECT_EQ(verdicts, 4u);
  }
  EXPECT_NE(md.find("tasks differ"), std::string::npos);
  EXPECT_NE(md.find("| placement | 1 blocks | 2 blocks |"), std::string::npos);

  const std::string html = bt::read_text(r.report_html);
  EXPECT_NE(html.find("<table>"), std::string::npos);
  EXPECT_EQ(html.find("src=\"sweep"), std::string::npos);  // self-contained: no links to figure files
  if (!report::gnuplot_program().empty()) {
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

  // The same directory reported in Korean: the runs are reused (the language is not part of the experiment),
  // the verdicts are the same, and the report, its tables and the figures' text are Korean.
  ReproduceOptions korean = tiny_options(dir / "out");
  korean.lang = report::Lang::Ko;
  const ReproduceResult k = run_reproduce(korean);
  ASSERT_EQ(k.claims.size(), r.claims.size());
  const std::string kmd = bt::read_text(k.report_md);
  for (size_t i = 0; i < k.claims.size(); ++i) {
    const ClaimRow& c = k.claims[i];
    EXPECT_EQ(c.id, r.claims[i].id);
    EXPECT_EQ(c.verdict, r.claims[i].verdict) << c.id;
    EXPECT_NE(c.claim, r.claims[i].claim) << c.id;  // translated
    const std::string row = "| " + c.claim + " | " + c.source + " | " + c.measured + " | " + c.verdict_text + " |";
    EXPECT_NE(kmd.find(row), std::string::npos) << row;
  }
  for (const char* heading : {"# 트랜스포머 블록: 정규화의 자리와 워밍업", "## 실험 A: 학습을 시작할 때의 그래디언트 크기",
                              "## 실험 B:", "## 워밍업이 왜 통하나", "## 워밍업을 설명하는 세 가지", "## 깊이 훑기",
                              "## 깊이 지도", "## 문제 9", "## 문제 10", "## 문제 11",
                              "| 정규화 자리 | 블록 1벌 | 블록 2벌 |", "`blew-up`", "`never-started`"})
    EXPECT_NE(kmd.find(heading), std::string::npos) << heading;
  for (const char* english :
       {"## Experiment A", "## Depth map", "What was run", "Public anchors", "Three explanations", "Verdict:"})
    EXPECT_EQ(kmd.find(english), std::string::npos) << english;
  EXPECT_NE(bt::read_text(k.report_html).find("<html lang=\"ko\">"), std::string::npos);
  const std::vector<std::pair<const char*, const char*>> figure_words = {
      {"gradnorm/batch_4/gradnorm.gp", "그래디언트 크기"}, {"sweep/loss.gp", "스텝"},
      {"sweep/loss_linear.gp", "손실"},                   {"depth_post/loss.gp", "뒤 정규화"},
      {"depthmap/depthmap.gp", "워밍업 없음"},            {"block_forms.gp", "층 정규화"},
      {"residual/residual_walk.gp", "무작위"},            {"residual/residual_probe.gp", "잔차 줄기"},
      {"curvature/curvature.gp", "전처리된 날카로움"},    {"curvature/per_block_init.gp", "블록"}};
  for (const auto& [script, word] : figure_words)
    EXPECT_NE(bt::read_text(dir / "out" / script).find(word), std::string::npos) << script << ": " << word;
}

TEST(Reproduce, MaxStepsCutsEveryTrainingRunAndTheReportSaysSo) {
  const ReproduceOptions full = reproduce_preset(false);
  ReproduceOptions cut = full;
  cap_training_steps(cut, 3);
  for (const RunConfig* c : {&cut.train, &cut.depth_train, &cut.depthmap_options.base, &cut.stabilitymap_options.base,
                             &cut.curvature_options.base})
    EXPECT_EQ(c->steps, 3);
  EXPECT_EQ(cut.probe_every, 3);
  EXPECT_EQ(cut.curvature_options.every, 3);
  EXPECT_EQ(cut.warmup, full.warmup);  // the schedules are the same; the runs stop early
  EXPECT_EQ(cut.train.model.layers, full.train.model.layers);
  EXPECT_EQ(reproduce_settings(cut).at("max_steps"), 3);  // a cut directory is not reused for a whole run
  EXPECT_FALSE(reproduce_settings(full).contains("max_steps"));
  ReproduceOptions loose = full;  // a cap above every run changes no run
  cap_training_steps(loose, 100000);
  EXPECT_EQ(loose.train.steps, full.train.steps);
  EXPECT_EQ(loose.depthmap_options.base.steps, full.depthmap_options.base.steps);
  EXPECT_EQ(loose.probe_every, full.probe_every);
  EXPECT_THROW(cap_training_steps(loose, 0), Error);

  const fs::path dir = bt::fresh_dir("reproduce_max_steps");
  auto smallest = [&dir] {  // one seed, one batch size, no depth sweep, map or curvature: the pipeline's spine
    ReproduceOptions o = tiny_options(dir / "out");
    o.seeds = {0};
    o.gradnorm_batch_sizes = {4};
    o.depth_layers.clear();
    o.depthmap = false;
    o.stabilitymap = false;
    o.curvature = false;
    return o;
  };
  ReproduceOptions o = smallest();
  cap_training_steps(o, 2);
  const ReproduceResult r = run_reproduce(o);
  const std::string md = bt::read_text(r.report_md);
  EXPECT_NE(md.find("**Every training run was cut to at most 2 steps** (`--max-steps 2`)"), std::string::npos);
  EXPECT_NE(md.find("`blocklab reproduce --quick --max-steps 2"), std::string::npos);
  const fs::path run = dir / "out" / "sweep" / "norm_placement=pre+warmup=0+seed=0";
  const auto rows = io::read_csv((run / "metrics.csv").string());
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.back().fields[0], "2");  // the last step written
  EXPECT_THROW(run_reproduce(smallest()), Error);  // the same directory without the cut: refused
  // and the CLI refuses a cut of 0 steps
  EXPECT_EQ(bt::run_cli("reproduce --quick --max-steps 0 --out " + (dir / "cli").string()).status, 2);
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
