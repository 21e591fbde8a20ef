// Probes: per-parameter gradient norms, residual-stream norms, the training-time residual probe, and
// the outcome labels of loss curves.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "cli_runner.h"
#include "data/copy_task.h"
#include "io/metrics.h"
#include "probe/grad_norms.h"
#include "probe/outcome.h"
#include "probe/residual_norms.h"
#include "probe/residual_probe.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/threads.h"

using namespace blocklab;
namespace bt = blocklab::testing;
using namespace blocklab::probe;

namespace {
RunConfig tiny(NormPlacement placement) {
  RunConfig c;
  c.model.norm_placement = placement;
  c.model.layers = 3;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.vocab = 8;
  c.copy_len = 4;
  c.batch = 4;
  c.steps = 6;
  c.lr = 3e-3;
  c.threads = 1;
  resolve(c);
  return c;
}
}  // namespace

TEST(GradNorms, AreTheFrobeniusNormOfEachTensorWithOneBasedBlocks) {
  set_num_threads(1);
  const RunConfig c = tiny(NormPlacement::Pre);
  Model<double> model(c.model);
  Activations<double> acts = model.make_activations(c.batch, 2 * c.copy_len - 1);
  model.init_weights(1);
  CopyTask task(c.model.vocab, c.copy_len, 2);
  Batch batch;
  task.next(batch, c.batch);
  model.forward(acts, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
  model.backward(acts);
  const auto norms = parameter_grad_norms(model);
  ASSERT_EQ(norms.size(), model.table().specs().size());
  bool saw_last_fc2 = false;
  for (size_t i = 0; i < norms.size(); ++i) {
    const ParamSpec& spec = model.table().specs()[i];
    EXPECT_EQ(norms[i].name, spec.name);
    double sq = 0;
    for (double g : model.grad(spec.name)) sq += g * g;
    EXPECT_NEAR(norms[i].norm, std::sqrt(sq), 1e-12 * (1 + std::sqrt(sq)));
    if (spec.name == "blocks.2.mlp.fc2.weight") {
      EXPECT_EQ(norms[i].block, 3);
      saw_last_fc2 = true;
    }
    if (spec.name == "tok_emb.weight") {
      EXPECT_EQ(norms[i].block, 0);
    }
  }
  EXPECT_TRUE(saw_last_fc2);
}

TEST(ResidualNorms, PostLnStreamsSitAtTheLayerNormScale) {
  set_num_threads(1);
  for (NormPlacement placement : {NormPlacement::Post, NormPlacement::Pre}) {
    const RunConfig c = tiny(placement);
    Model<float> model(c.model);
    Activations<float> acts = model.make_activations(c.batch, 2 * c.copy_len - 1);
    model.init_weights(0);
    CopyTask task(c.model.vocab, c.copy_len, 1);
    Batch batch;
    task.next(batch, c.batch);
    model.forward_hidden(acts, batch.inputs.data());
    const ResidualNorms n = residual_norms(acts, c.model.width);
    ASSERT_EQ(n.mean_token_norm.size(), 4u);  // embeddings + 3 blocks
    for (size_t l = 0; l < n.mean_token_norm.size(); ++l) {
      EXPECT_LE(n.mean_vector_norm[l], n.mean_token_norm[l] * (1 + 1e-6));  // |mean| <= mean |.|
      if (placement == NormPlacement::Post && l > 0) {
        EXPECT_NEAR(n.mean_token_norm[l], std::sqrt(16.0), 1e-3);
      }
    }
    // embeddings: tok + pos, each N(0, 1) per dim -> about sqrt(2C)
    EXPECT_NEAR(n.mean_token_norm[0], std::sqrt(32.0), 1.5);
  }
}

TEST(ResidualProbe, WritesEveryNStepsWithoutChangingTheRun) {
  set_num_threads(1);
  const auto dir = bt::fresh_dir("residual_probe");
  const RunConfig c = tiny(NormPlacement::Pre);
  Trainer plain(c), probed(c);
  ResidualProbeWriter writer((dir / "residual.csv").string(), 4);
  writer(probed);  // step 0
  for (int s = 0; s < c.steps; ++s) {
    const StepResult a = plain.step(), b = probed.step();
    ASSERT_EQ(a.loss, b.loss) << "step " << a.step;  // bit-identical
    ASSERT_EQ(a.grad_norm, b.grad_norm);
    writer(probed);
  }
  const io::MetricsTable t = io::read_metrics((dir / "residual.csv").string());
  ASSERT_EQ(t.columns, (std::vector<std::string>{"step", "layer", "mean_vector_norm", "mean_token_norm"}));
  std::vector<int> steps;
  for (const auto& row : t.rows)
    if (row[1] == 0) steps.push_back(static_cast<int>(row[0]));
  EXPECT_EQ(steps, (std::vector<int>{0, 4, 6}));  // every 4 steps and the last
  EXPECT_EQ(t.rows.size(), 3u * 4u);
  EXPECT_THROW(ResidualProbeWriter("x", 0), Error);

  // A resumed run keeps the rows before its first step and appends after them.
  Trainer resumed(c);
  for (int s = 0; s < 4; ++s) resumed.step();
  ResidualProbeWriter again((dir / "residual.csv").string(), 4);
  again(resumed);  // step 4: drops the old rows of steps >= 4
  const io::MetricsTable t2 = io::read_metrics((dir / "residual.csv").string());
  std::vector<int> steps2;
  for (const auto& row : t2.rows)
    if (row[1] == 0) steps2.push_back(static_cast<int>(row[0]));
  EXPECT_EQ(steps2, (std::vector<int>{0, 4}));
}

namespace {
CurveSummary label(const std::vector<double>& losses) {
  std::vector<int> steps;
  for (size_t i = 0; i < losses.size(); ++i) steps.push_back(static_cast<int>(i) + 1);
  return summarize_curve(steps, losses, std::log(64.0));
}
std::vector<double> flat(int n, double v) { return std::vector<double>(n, v); }
std::vector<double> concat(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

TEST(Outcome, LabelsSyntheticCurves) {
  const double ln64 = std::log(64.0);
  // Starts above ln V (an untrained model), then sits at ln V: never started.
  EXPECT_EQ(label(concat(flat(5, 4.8), flat(200, ln64 + 0.01))).outcome, Outcome::NeverStarted);
  // Single noisy batches below the band do not count as starting.
  std::vector<double> noisy = flat(200, ln64);
  noisy[50] = ln64 - 0.2;
  noisy[120] = ln64 - 0.3;
  EXPECT_EQ(label(noisy).outcome, Outcome::NeverStarted);
  // Falls and stays down: learned; reports the first step below 0.01.
  std::vector<double> learn = flat(30, ln64);
  for (int i = 0; i < 100; ++i) learn.push_back(ln64 * std::exp(-0.08 * i));
  const CurveSummary l = label(learn);
  EXPECT_EQ(l.outcome, Outcome::Learned);
  ASSERT_TRUE(l.first_step_below.has_value());
  EXPECT_LT(learn[*l.first_step_below - 1], 0.01);
  EXPECT_GE(learn[*l.first_step_below - 2], 0.01);
  EXPECT_EQ(l.final_loss, learn.back());
  // A partial drop (left ln V, not below 0.1 ln V = 0.416 at the end) is still learning, not learned.
  EXPECT_EQ(label(concat(flat(20, ln64), flat(50, 2.0))).outcome, Outcome::Learning);
  // A Post-LN run from 4.16 to 3.05: learning.
  std::vector<double> partial;
  for (int i = 0; i <= 600; ++i) partial.push_back(4.16 + (3.05 - 4.16) * i / 600.0);
  const CurveSummary p = label(partial);
  EXPECT_EQ(p.outcome, Outcome::Learning);
  EXPECT_NEAR(p.smoothed_final_loss, 3.05, 0.01);
  // The same start down to 0.01: learned.
  std::vector<double> full;
  for (int i = 0; i <= 600; ++i) full.push_back(4.16 * std::pow(0.01 / 4.16, i / 600.0));
  EXPECT_EQ(label(full).outcome, Outcome::Learned);
  // Just above and just below the stated threshold 0.1 ln V (a 10-step mean).
  EXPECT_EQ(label(concat(flat(20, ln64), flat(20, 0.1 * ln64 + 0.01))).outcome, Outcome::Learning);
  EXPECT_EQ(label(concat(flat(20, ln64), flat(20, 0.1 * ln64 - 0.01))).outcome, Outcome::Learned);
  // Below 0.1, then back near ln V: collapsed (the source's seed at step 440-460).
  EXPECT_EQ(label(concat(concat(flat(20, ln64), flat(40, 0.0104)), flat(40, 4.32))).outcome, Outcome::Collapsed);
  // Back up, but not near ln V: not collapsed; above 0.1 ln V at the end, so learning.
  EXPECT_EQ(label(concat(concat(flat(20, ln64), flat(40, 0.05)), flat(40, 1.0))).outcome, Outcome::Learning);
  // Finite throughout, but ending worse than the uniform guess (> ln V + 0.5): blew up, whether it had left
  // ln V on the way (a partial drop, then a climb) or not; just under the threshold it is a stuck run.
  EXPECT_EQ(label(concat(flat(20, ln64), flat(40, 6.5))).outcome, Outcome::BlewUp);
  EXPECT_EQ(label(concat(concat(flat(20, ln64), flat(40, 2.0)), flat(40, 9.0))).outcome, Outcome::BlewUp);
  EXPECT_EQ(label(concat(flat(20, ln64), flat(40, ln64 + 0.49))).outcome, Outcome::NeverStarted);
  // Learned first, then blew up past ln V: collapsed (checked before blew-up).
  EXPECT_EQ(label(concat(concat(flat(20, ln64), flat(40, 0.05)), flat(40, 9.0))).outcome, Outcome::Collapsed);
  // Any non-finite loss: diverged, even after learning.
  std::vector<double> nan_curve = concat(flat(20, ln64), flat(20, 0.05));
  nan_curve.push_back(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(label(nan_curve).outcome, Outcome::Diverged);
  EXPECT_EQ(label({4.0, std::numeric_limits<double>::infinity()}).outcome, Outcome::Diverged);
  EXPECT_EQ(to_string(Outcome::NeverStarted), "never-started");
  EXPECT_EQ(to_string(Outcome::Learned), "learned");
  EXPECT_EQ(to_string(Outcome::Learning), "learning");
  for (Outcome o : all_outcomes()) EXPECT_EQ(parse_outcome(to_string(o)), o);
  EXPECT_EQ(to_string(Outcome::BlewUp), "blew-up");
  EXPECT_EQ(all_outcomes().size(), 6u);
  EXPECT_FALSE(parse_outcome("solved").has_value());
  EXPECT_EQ(to_string(Outcome::Collapsed), "collapsed");
  EXPECT_EQ(to_string(Outcome::Diverged), "diverged");
  EXPECT_THROW(summarize_curve({}, {}, ln64), Error);
  EXPECT_THROW(summarize_curve({1, 2}, {1.0}, ln64), Error);
}

// A text run's "learned" threshold is its text's unigram entropy, not 0.1 ln V: a byte-level run (ln 256 =
// 5.55) that falls to 2.5 has learned when the text's unigram entropy is 3.1, and is still learning at 3.5.
TEST(Outcome, TheLearnedThresholdCanBeGiven) {
  const double ln256 = std::log(256.0), entropy = 3.1;
  std::vector<int> steps;
  for (int i = 1; i <= 60; ++i) steps.push_back(i);
  const auto curve_to = [&](double end) { return concat(flat(20, ln256), flat(40, end)); };
  EXPECT_EQ(summarize_curve(steps, curve_to(2.5), ln256, entropy).outcome, Outcome::Learned);
  EXPECT_EQ(summarize_curve(steps, curve_to(3.5), ln256, entropy).outcome, Outcome::Learning);
  EXPECT_EQ(summarize_curve(steps, curve_to(2.5), ln256).outcome, Outcome::Learning);  // 0.1 ln V = 0.55
  // The other labels do not depend on it.
  EXPECT_EQ(summarize_curve(steps, flat(60, ln256), ln256, entropy).outcome, Outcome::NeverStarted);
  EXPECT_EQ(summarize_curve(steps, curve_to(ln256 + 1), ln256, entropy).outcome, Outcome::BlewUp);
}

TEST(ResidualProbe, TrainProbeEveryWritesResidualCsvAndKeepsMetricsIdentical) {
  const auto dir = bt::fresh_dir("train_probe");
  const std::string args = "train --layers 2 --width 16 --heads 2 --vocab 8 --copy-len 4 --batch 4 --steps 10 --threads 1";
  const auto a = bt::run_cli(args + " --out " + (dir / "plain").string());
  const auto b = bt::run_cli(args + " --probe-every 5 --out " + (dir / "probed").string());
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(bt::read_text(dir / "plain" / "metrics.csv"), bt::read_text(dir / "probed" / "metrics.csv"));
  EXPECT_FALSE(std::filesystem::exists(dir / "plain" / "residual.csv"));
  const io::MetricsTable t = io::read_metrics((dir / "probed" / "residual.csv").string());
  EXPECT_EQ(t.rows.size(), 3u * 3u);  // steps 0, 5, 10 x layers 0..2
  // probe_every is a config key: 0 is off (no residual.csv), a negative interval is refused by name.
  ASSERT_EQ(bt::run_cli(args + " --probe-every 0 --out " + (dir / "off").string()).status, 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "off" / "residual.csv"));
  const auto bad = bt::run_cli(args + " --probe-every -1 --out " + (dir / "bad").string());
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("probe_every must be >= 0"), std::string::npos) << bad.err;
}
