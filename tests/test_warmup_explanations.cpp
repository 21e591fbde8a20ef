// The report's three explanations of warm-up: each verdict (holds, does not, cannot tell here) computed from
// synthetic measurements, with the numbers that decided it.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "experiments/reproduce.h"
#include "experiments/warmup_explanations.h"

using namespace blocklab;
using namespace blocklab::experiments;

namespace {

using V = ExplanationVerdict;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- experiment A profiles ----

GradNormProfile profile(NormPlacement placement, double first, double last) {
  GradNormProfile p{placement, {}, {}};
  for (double scale : {0.9, 1.1}) p.per_seed.push_back({first * scale, (first + last) / 2 * scale, last * scale});
  p.mean = {first, (first + last) / 2, last};
  return p;
}

// ---- stability maps ----

const OptimizerEntry kAdam{OptimizerKind::Adam, AdamV0::Zero};
const OptimizerEntry kAdamV0{OptimizerKind::Adam, AdamV0::Grad};
const OptimizerEntry kRAdam{OptimizerKind::RAdam, AdamV0::Zero};

struct Map {
  StabilityMapOptions options;
  std::vector<StabilityRun> runs;

  explicit Map(std::vector<OptimizerEntry> optimizers, std::vector<int> warmups = {0, 100}) {
    options.placements = {NormPlacement::Post, NormPlacement::Pre};
    options.optimizers = std::move(optimizers);
    options.warmups = std::move(warmups);
    options.lrs = {1e-3, 3e-3, 1e-2};
    options.seeds = {0, 1, 2};
  }
  // `learned` of the three seeds learn, the others never start.
  Map& cell(NormPlacement p, const OptimizerEntry& e, int warmup, double lr, int learned) {
    for (int seed = 0; seed < 3; ++seed) {
      StabilityRun r;
      r.placement = p;
      r.optimizer = to_string(e);
      r.warmup = warmup;
      r.lr = lr;
      r.seed = seed;
      r.outcome = seed < learned ? probe::Outcome::Learned : probe::Outcome::NeverStarted;
      if (seed < learned) r.first_step_below = 100 + seed;
      runs.push_back(r);
    }
    return *this;
  }
  // Every cell of a panel: learned seeds per warm-up (in options.warmups order) and lr (1e-3, 3e-3, 1e-2).
  Map& panel(NormPlacement p, const OptimizerEntry& e, const std::vector<std::vector<int>>& learned) {
    for (size_t w = 0; w < learned.size(); ++w)
      for (size_t i = 0; i < learned[w].size(); ++i) cell(p, e, options.warmups[w], options.lrs[i], learned[w][i]);
    return *this;
  }
  std::vector<StabilityCell> cells() const { return summarize_stabilitymap(options, runs); }
};

// ---- curvature runs ----

// Probes at steps 0, 1, 2, 4, 8 and every 10 up to 100, with the threshold 38/lr at 2^15 (so that ratio x threshold /
// threshold is exact); the preconditioned sharpness is `early` times the threshold before step 50 and `ratio(step)`
// times it from there on.
CurvatureGridRun curvature_run(NormPlacement p, int warmup, double early, const std::function<double(double)>& ratio) {
  CurvatureGridRun r;
  r.placement = p;
  r.warmup = warmup;
  std::vector<double> steps = {0, 1, 2, 4, 8};
  for (int s = 10; s <= 100; s += 10) steps.push_back(s);
  for (double s : steps) {
    const double edge = 32768;
    r.steps.push_back(s);
    r.lr.push_back(38 / edge);
    r.edge_adam.push_back(edge);
    r.sharpness.push_back(1);
    r.preconditioned.push_back((s < 50 ? early : ratio(s)) * edge);
  }
  return r;
}

}  // namespace

TEST(WarmupExplanations, VerdictWords) {
  EXPECT_EQ(to_string(V::Holds), "holds");
  EXPECT_EQ(to_string(V::DoesNot), "does not");
  EXPECT_EQ(to_string(V::CannotTell), "cannot tell here");
  for (V v : {V::Holds, V::DoesNot, V::CannotTell}) {
    EXPECT_EQ(verdict_text(v, report::Lang::En), to_string(v));
    EXPECT_NE(verdict_text(v, report::Lang::Ko), to_string(v));  // translated
  }
}

TEST(WarmupExplanations, GradientScaleAtInitialization) {
  const GradNormProfile post_grows = profile(NormPlacement::Post, 0.8, 1.0),
                        pre_falls = profile(NormPlacement::Pre, 0.5, 0.4);
  const ExplanationCheck holds = check_gradient_scale(&post_grows, &pre_falls, 16);
  EXPECT_EQ(holds.verdict, V::Holds);
  EXPECT_TRUE(contains(holds.measured, "batch 16")) << holds.measured;
  EXPECT_TRUE(contains(holds.measured, "1.25")) << holds.measured;  // Post-LN's last / first
  EXPECT_TRUE(contains(holds.measured, "0.8 under Pre-LN")) << holds.measured;
  ASSERT_EQ(holds.rows.size(), 2u);
  EXPECT_EQ(holds.rows[0][3], "1.25");
  EXPECT_EQ(holds.rows[0][4], "1.25 - 1.25");  // every seed scaled alike: one ratio
  EXPECT_FALSE(holds.prediction.empty());
  EXPECT_FALSE(holds.rule.empty());

  const GradNormProfile post_falls = profile(NormPlacement::Post, 1.0, 0.8),
                        pre_grows = profile(NormPlacement::Pre, 0.4, 0.5);
  EXPECT_EQ(check_gradient_scale(&post_falls, &pre_falls, 16).verdict, V::DoesNot);
  EXPECT_EQ(check_gradient_scale(&post_grows, &pre_grows, 16).verdict, V::DoesNot);
  const GradNormProfile post_flat = profile(NormPlacement::Post, 0.8, 0.8);
  EXPECT_EQ(check_gradient_scale(&post_flat, &pre_falls, 16).verdict, V::DoesNot);  // "exceeds": equal is not enough
  const GradNormProfile pre_flat = profile(NormPlacement::Pre, 0.5, 0.5);
  EXPECT_EQ(check_gradient_scale(&post_grows, &pre_flat, 16).verdict, V::Holds);  // Pre-LN's does not exceed

  const ExplanationCheck missing = check_gradient_scale(&post_grows, nullptr, 16);
  EXPECT_EQ(missing.verdict, V::CannotTell);
  EXPECT_TRUE(contains(missing.measured, "no gradient profile")) << missing.measured;
  EXPECT_TRUE(missing.rows.empty());
}

TEST(WarmupExplanations, AdamVarianceRescuesPostLnWithoutWarmup) {
  // Post-LN: adam learns at 1e-3 only; adam+v0 at 1e-3 and 3e-3 (not 1e-2).
  Map map({kAdam, kAdamV0});
  map.panel(NormPlacement::Post, kAdam, {{3, 0, 0}, {3, 3, 0}})
      .panel(NormPlacement::Post, kAdamV0, {{3, 3, 1}, {3, 3, 2}});
  const ExplanationCheck c = check_adam_variance(&map.options, map.cells());
  EXPECT_EQ(c.verdict, V::Holds);
  EXPECT_TRUE(contains(c.measured, "does not train at lr 0.01 (0/3), 0.003 (0/3)")) << c.measured;
  EXPECT_TRUE(contains(c.measured, "`adam+v0` trains at 0.003 (3/3)")) << c.measured;
  EXPECT_FALSE(contains(c.measured, "0.01 (1/3)")) << c.measured;  // 1 of 3 does not train
  ASSERT_EQ(c.header, (std::vector<std::string>{"lr", "adam", "adam+v0"}));
  ASSERT_EQ(c.rows.size(), 3u);
  EXPECT_EQ(c.rows[0], (std::vector<std::string>{"0.01", "0/3", "1/3"}));  // largest lr first
  EXPECT_EQ(c.rows[2], (std::vector<std::string>{"0.001", "3/3", "3/3"}));

  // A rescue with warm-up does not count: only the runs without it are compared.
  Map warm({kAdam, kAdamV0});
  warm.panel(NormPlacement::Post, kAdam, {{3, 0, 0}, {3, 3, 0}})
      .panel(NormPlacement::Post, kAdamV0, {{3, 1, 0}, {3, 3, 3}});
  const ExplanationCheck not_rescued = check_adam_variance(&warm.options, warm.cells());
  EXPECT_EQ(not_rescued.verdict, V::DoesNot);
  EXPECT_TRUE(contains(not_rescued.measured, "`adam+v0` trains at none of them (0.01 (0/3), 0.003 (1/3))"))
      << not_rescued.measured;

  // radam rescues as well; two seeds of three are enough.
  Map radam({kAdam, kRAdam});
  radam.panel(NormPlacement::Post, kAdam, {{3, 1, 0}, {3, 3, 3}})
      .panel(NormPlacement::Post, kRAdam, {{3, 3, 2}, {3, 3, 3}});
  const ExplanationCheck by_radam = check_adam_variance(&radam.options, radam.cells());
  EXPECT_EQ(by_radam.verdict, V::Holds);
  EXPECT_TRUE(contains(by_radam.measured, "`radam` trains at 0.01 (2/3), 0.003 (3/3)")) << by_radam.measured;
}

TEST(WarmupExplanations, AdamVarianceCannotTellWithNothingToRescueOrNoMap) {
  Map all({kAdam, kAdamV0});
  all.panel(NormPlacement::Post, kAdam, {{3, 2, 3}, {3, 3, 3}})
      .panel(NormPlacement::Post, kAdamV0, {{3, 3, 3}, {3, 3, 3}});
  const ExplanationCheck nothing = check_adam_variance(&all.options, all.cells());
  EXPECT_EQ(nothing.verdict, V::CannotTell);
  EXPECT_TRUE(contains(nothing.measured, "every lr of the map (0.01 (3/3), 0.003 (2/3), 0.001 (3/3))"))
      << nothing.measured;
  EXPECT_TRUE(contains(nothing.measured, "nothing to rescue")) << nothing.measured;
  EXPECT_EQ(nothing.rows.size(), 3u);  // the numbers are still shown

  const ExplanationCheck not_run = check_adam_variance(nullptr, {});
  EXPECT_EQ(not_run.verdict, V::CannotTell);
  EXPECT_TRUE(contains(not_run.measured, "--no-stabilitymap")) << not_run.measured;

  Map only_adam({kAdam});
  only_adam.panel(NormPlacement::Post, kAdam, {{3, 0, 0}, {3, 3, 0}});
  const ExplanationCheck no_rescuer = check_adam_variance(&only_adam.options, only_adam.cells());
  EXPECT_EQ(no_rescuer.verdict, V::CannotTell);
  EXPECT_TRUE(contains(no_rescuer.measured, "neither `radam` nor `adam+v0`")) << no_rescuer.measured;

  Map pre_only({kAdam, kAdamV0});
  pre_only.options.placements = {NormPlacement::Pre};
  pre_only.panel(NormPlacement::Pre, kAdam, {{3, 0, 0}, {3, 3, 0}})
      .panel(NormPlacement::Pre, kAdamV0, {{3, 3, 3}, {3, 3, 3}});
  EXPECT_EQ(check_adam_variance(&pre_only.options, pre_only.cells()).verdict, V::CannotTell);

  Map warm_only({kAdam, kAdamV0}, {100, 400});
  warm_only.panel(NormPlacement::Post, kAdam, {{3, 0, 0}, {3, 3, 0}});
  EXPECT_EQ(check_adam_variance(&warm_only.options, warm_only.cells()).verdict, V::CannotTell);

  Map no_runs({kAdam, kAdamV0});  // the map's axes but no finished run
  const ExplanationCheck empty = check_adam_variance(&no_runs.options, no_runs.cells());
  EXPECT_EQ(empty.verdict, V::CannotTell);
  EXPECT_TRUE(empty.rows.empty());
}

TEST(WarmupExplanations, LargestTrainingLrByWarmup) {
  // Post-LN adam: 1e-3 without warm-up, 3e-3 with 100 steps (holds); Pre-LN adam trains at 1e-2 either way (cannot
  // tell: already at the top lr); Post-LN adam+v0 trains nowhere (cannot tell); Pre-LN adam+v0 has no runs.
  Map map({kAdam, kAdamV0});
  map.panel(NormPlacement::Post, kAdam, {{3, 0, 0}, {3, 2, 1}})
      .panel(NormPlacement::Pre, kAdam, {{3, 3, 3}, {3, 3, 3}})
      .panel(NormPlacement::Post, kAdamV0, {{0, 1, 0}, {1, 0, 0}});
  const ExplanationCheck c = check_warmup_raises_lr(&map.options, map.cells());
  EXPECT_EQ(c.verdict, V::Holds);
  EXPECT_EQ(c.header, (std::vector<std::string>{"placement, optimizer", "no warm-up", "warm-up 100 steps", "verdict"}));
  ASSERT_EQ(c.rows.size(), 4u);  // placements outer, optimizers inner
  EXPECT_EQ(c.rows[0], (std::vector<std::string>{"Post-LN, adam", "0.001 (3/3)", "0.003 (2/3)", "holds"}));
  EXPECT_EQ(c.rows[1],
            (std::vector<std::string>{"Post-LN, adam+v0", "none", "none", "cannot tell here (trains at no lr)"}));
  EXPECT_EQ(c.rows[2][1], "0.01 (3/3)");
  EXPECT_TRUE(contains(c.rows[2][3], "cannot tell here (trains at the largest lr already")) << c.rows[2][3];
  EXPECT_EQ(c.rows[3][3], "cannot tell here (no runs)");
  EXPECT_TRUE(contains(c.measured, "in 1 of 4 panels, does not in 0, and cannot tell in 3")) << c.measured;

  // The same lr with and without warm-up: does not; one failing panel decides the whole.
  Map flat({kAdam, kAdamV0});
  flat.panel(NormPlacement::Post, kAdam, {{3, 0, 0}, {3, 3, 0}})
      .panel(NormPlacement::Post, kAdamV0, {{3, 0, 0}, {3, 0, 0}});
  const ExplanationCheck f = check_warmup_raises_lr(&flat.options, flat.cells());
  EXPECT_EQ(f.verdict, V::DoesNot);
  EXPECT_EQ(f.rows[0][3], "holds");
  EXPECT_EQ(f.rows[1][3], "does not");

  // Falling at a longer warm-up fails even when the longest is above the shortest... and the warm-ups are read in
  // increasing order whatever the map's order.
  Map three({kAdam}, {400, 0, 100});
  three.panel(NormPlacement::Post, kAdam, {{3, 3, 0}, {3, 0, 0}, {3, 3, 3}});  // 400: 3e-3, 0: 1e-3, 100: 1e-2
  const ExplanationCheck t3 = check_warmup_raises_lr(&three.options, three.cells());
  EXPECT_EQ(t3.header[1], "no warm-up");
  EXPECT_EQ(t3.rows[0][1], "0.001 (3/3)");
  EXPECT_EQ(t3.rows[0][3], "0.003 (3/3)");
  EXPECT_EQ(t3.verdict, V::DoesNot);  // 1e-3 -> 1e-2 -> 3e-3: it falls at 400
}

TEST(WarmupExplanations, LargestTrainingLrCannotTell) {
  Map saturated({kAdam});
  saturated.panel(NormPlacement::Post, kAdam, {{1, 2, 2}, {3, 3, 3}})
      .panel(NormPlacement::Pre, kAdam, {{0, 0, 0}, {0, 0, 0}});
  const ExplanationCheck s = check_warmup_raises_lr(&saturated.options, saturated.cells());
  EXPECT_EQ(s.verdict, V::CannotTell);
  EXPECT_TRUE(contains(s.measured, "in 0 of 2 panels, does not in 0, and cannot tell in 2")) << s.measured;

  Map one({kAdam}, {0});
  one.panel(NormPlacement::Post, kAdam, {{3, 0, 0}});
  const ExplanationCheck single = check_warmup_raises_lr(&one.options, one.cells());
  EXPECT_EQ(single.verdict, V::CannotTell);
  EXPECT_TRUE(contains(single.measured, "fewer than two warm-up lengths")) << single.measured;

  const ExplanationCheck not_run = check_warmup_raises_lr(nullptr, {});
  EXPECT_EQ(not_run.verdict, V::CannotTell);
  EXPECT_TRUE(contains(not_run.measured, "--no-stabilitymap")) << not_run.measured;
}

TEST(WarmupExplanations, AdaptiveEdgeOfStability) {
  // Far above the edge in the first steps, then hovering at it: holds (the first half of the steps is left out).
  CurvatureGridResult hover;
  hover.runs = {curvature_run(NormPlacement::Post, 0, 150, [](double s) { return s < 80 ? 0.6 : 1.7; }),
                curvature_run(NormPlacement::Pre, 10, 0.01, [](double) { return 1.0; })};
  const ExplanationCheck h = check_adaptive_edge(&hover, 0.9);
  EXPECT_EQ(h.verdict, V::Holds);
  EXPECT_TRUE(contains(h.prediction, "38/lr (beta1 = 0.9)")) << h.prediction;
  EXPECT_TRUE(contains(h.measured, "ranged from 0.6 to 1.7")) << h.measured;
  EXPECT_TRUE(contains(h.measured, "2 of 2 runs")) << h.measured;
  ASSERT_EQ(h.rows.size(), 2u);
  EXPECT_EQ(h.rows[0], (std::vector<std::string>{"Post-LN, no warm-up", "50-100 (6)", "0.6 - 1.7", "near"}));
  EXPECT_EQ(h.rows[1][0], "Pre-LN, warm-up 10");

  // The bounds: a factor of exactly 2 either way is near, a little more is not.
  CurvatureGridResult edge;
  edge.runs = {curvature_run(NormPlacement::Post, 0, 1, [](double s) { return s < 70 ? 0.5 : 2.0; })};
  EXPECT_EQ(check_adaptive_edge(&edge, 0.9).verdict, V::Holds);
  edge.runs = {curvature_run(NormPlacement::Post, 0, 1, [](double s) { return s < 70 ? 0.5 : 2.01; })};
  EXPECT_EQ(check_adaptive_edge(&edge, 0.9).verdict, V::DoesNot);
  EXPECT_EQ(check_adaptive_edge(&edge, 0.9, report::Lang::En, 3).verdict, V::Holds);  // a looser factor

  // Far below the threshold in one run of two: does not.
  CurvatureGridResult below;
  below.runs = {curvature_run(NormPlacement::Post, 0, 150, [](double) { return 0.05; }),
                curvature_run(NormPlacement::Pre, 0, 1, [](double) { return 1.0; })};
  const ExplanationCheck b = check_adaptive_edge(&below, 0.9);
  EXPECT_EQ(b.verdict, V::DoesNot);
  EXPECT_TRUE(contains(b.measured, "ranged from 0.05 to 1; 1 of 2 runs")) << b.measured;
  EXPECT_EQ(b.rows[0][3], "not near");

  // The threshold's name follows beta1: (2 + 2 beta1) / (1 - beta1).
  EXPECT_TRUE(contains(check_adaptive_edge(&below, 0.8).prediction, "18/lr (beta1 = 0.8)"));
}

TEST(WarmupExplanations, AdaptiveEdgeCannotTell) {
  const ExplanationCheck not_run = check_adaptive_edge(nullptr, 0.9);
  EXPECT_EQ(not_run.verdict, V::CannotTell);
  EXPECT_TRUE(contains(not_run.measured, "--no-curvature")) << not_run.measured;

  // Estimates that did not come out (NaN) in the window: a run needs two finite ones.
  CurvatureGridResult nan;
  nan.runs = {curvature_run(NormPlacement::Post, 0, 1, [](double s) { return s == 100 ? 1.0 : std::nan(""); })};
  const ExplanationCheck n = check_adaptive_edge(&nan, 0.9);
  EXPECT_EQ(n.verdict, V::CannotTell);
  EXPECT_EQ(n.rows[0][3], "cannot tell here");
  EXPECT_TRUE(contains(n.measured, "two finite estimates")) << n.measured;

  // A run that cannot tell is left out of the whole; the other decides.
  nan.runs.push_back(curvature_run(NormPlacement::Pre, 0, 1, [](double) { return 0.01; }));
  EXPECT_EQ(check_adaptive_edge(&nan, 0.9).verdict, V::DoesNot);
}

TEST(WarmupExplanations, FromTheReproductionsMeasurements) {
  ReproduceOptions options = reproduce_preset(true);
  ReproduceMeasurements m;
  GradNormResult& g = m.gradnorms[16];
  g.profiles = {profile(NormPlacement::Post, 0.8, 1.0), profile(NormPlacement::Pre, 0.5, 0.4)};
  // No stability map and no curvature run (--no-stabilitymap --no-curvature).
  std::vector<ExplanationCheck> checks = check_warmup_explanations(options, m);
  ASSERT_EQ(checks.size(), 4u);
  EXPECT_EQ(checks[0].id, "gradient_scale");
  EXPECT_EQ(checks[0].verdict, V::Holds);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(checks[i].verdict, V::CannotTell) << checks[i].id;
  EXPECT_TRUE(contains(checks[1].measured, "--no-stabilitymap"));
  EXPECT_TRUE(contains(checks[3].measured, "--no-curvature"));

  // With the quick map's axes (Post-LN, adam and adam+v0, warm-up 0 and 100) and its runs.
  Map map(options.stabilitymap_options.optimizers, options.stabilitymap_options.warmups);
  map.options = options.stabilitymap_options;
  map.panel(NormPlacement::Post, kAdam, {{3, 0, 0}, {3, 3, 0}})
      .panel(NormPlacement::Post, kAdamV0, {{3, 3, 0}, {3, 3, 2}});
  m.stabilitymap.emplace();
  m.stabilitymap->cells = map.cells();
  checks = check_warmup_explanations(options, m);
  EXPECT_EQ(checks[1].verdict, V::Holds);
  EXPECT_EQ(checks[2].verdict, V::Holds);

  // The same in Korean: the verdicts do not depend on the language, the words do.
  options.lang = report::Lang::Ko;
  const std::vector<ExplanationCheck> korean = check_warmup_explanations(options, m);
  for (size_t i = 0; i < korean.size(); ++i) {
    EXPECT_EQ(korean[i].verdict, checks[i].verdict) << checks[i].id;
    EXPECT_NE(korean[i].prediction, checks[i].prediction) << checks[i].id;
    EXPECT_NE(korean[i].measured, checks[i].measured) << checks[i].id;
  }
}
