// Training: schedules, Adam against a hand computation, clipping, determinism, learnability.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "data/copy_task.h"
#include "small_runs.h"
#include "train/optimizer.h"
#include "train/run_config.h"
#include "train/schedule.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/threads.h"

using namespace blocklab;

TEST(Schedule, LinearWarmupThenConstant) {
  Schedule s{ScheduleKind::Constant, 1e-3, 400, 1200, 0.0};
  EXPECT_DOUBLE_EQ(s.at(1), 1e-3 / 400);
  EXPECT_DOUBLE_EQ(s.at(200), 0.5e-3);
  EXPECT_DOUBLE_EQ(s.at(400), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(401), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(1200), 1e-3);
  Schedule none{ScheduleKind::Constant, 1e-3, 0, 1200, 0.0};
  EXPECT_DOUBLE_EQ(none.at(1), 1e-3);
}

TEST(Schedule, CosineDecaysToMinimum) {
  Schedule s{ScheduleKind::Cosine, 1e-3, 100, 1100, 1e-5};
  EXPECT_DOUBLE_EQ(s.at(100), 1e-3);
  EXPECT_NEAR(s.at(600), (1e-3 + 1e-5) / 2, 1e-12);  // halfway through the decay
  EXPECT_NEAR(s.at(1100), 1e-5, 1e-15);
  EXPECT_GT(s.at(300), s.at(301));
}

TEST(Adam, MatchesHandComputedSteps) {
  OptimizerOptions o;
  Adam<double> adam(o, 1);
  std::vector<double> p = {1.0}, g = {0.5};
  adam.step(p, g, 0.1);
  // t=1: m = 0.05, v = 0.00025; m_hat = 0.5, v_hat = 0.25 -> p -= 0.1 * 0.5 / (0.5 + 1e-8)
  EXPECT_NEAR(p[0], 1.0 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
  g[0] = -1.0;
  adam.step(p, g, 0.1);
  const double m = 0.9 * 0.05 + 0.1 * -1.0, v = 0.999 * 0.00025 + 0.001 * 1.0;
  const double expected = (1.0 - 0.1 * 0.5 / (0.5 + 1e-8)) -
                          0.1 / (1 - 0.81) * m / (std::sqrt(v) / std::sqrt(1 - 0.999 * 0.999) + 1e-8);
  EXPECT_NEAR(p[0], expected, 1e-14);
}

TEST(Adam, AdamWDecaysDecoupled) {
  OptimizerOptions o;
  o.kind = OptimizerKind::AdamW;
  o.weight_decay = 0.1;
  Adam<double> adam(o, 1);
  std::vector<double> p = {2.0}, g = {0.0};
  adam.step(p, g, 0.5);  // zero gradient: only the decay acts
  EXPECT_NEAR(p[0], 2.0 * (1 - 0.5 * 0.1), 1e-15);
}

TEST(Clipping, ScalesToMaxNormOnlyWhenAbove) {
  std::vector<float> g = {3.f, 4.f};
  const double n = global_norm<float>(g);
  EXPECT_DOUBLE_EQ(n, 5.0);
  clip_to_norm<float>(g, n, 10.0);
  EXPECT_EQ(g[0], 3.f);
  clip_to_norm<float>(g, n, 1.0);
  EXPECT_NEAR(global_norm<float>(g), 1.0, 1e-6);
  clip_to_norm<float>(g, 1.0, 0.0);  // disabled
  EXPECT_NEAR(global_norm<float>(g), 1.0, 1e-6);
}

// The training step's fused update (clipping folded in, gradients cleared as they are read) against clipping
// in place and the plain update, on an arena longer than one of the update's parallel chunks, at 1 and 2 threads:
// the same bits, and every gradient zero afterwards.
TEST(Adam, FusedClipUpdateAndZeroEqualsTheSeparatePasses) {
  const size_t n = 40000;
  std::vector<float> p0(n), g0(n);
  for (size_t i = 0; i < n; ++i) {
    p0[i] = std::sin(0.37f * static_cast<float>(i));
    g0[i] = 0.01f * std::cos(1.3f * static_cast<float>(i)) + (i % 7 == 0 ? 0.5f : 0.f);
  }
  OptimizerOptions o;
  o.kind = OptimizerKind::AdamW;
  o.weight_decay = 0.1;
  const double max_norm = 1.0;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Adam<float> separate(o, n), fused(o, n);
    std::vector<float> p_separate = p0, p_fused = p0;
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> g = g0, g_fused = g0;
      for (float& x : g) x *= static_cast<float>(step);  // norm above max_norm: clipping acts
      for (float& x : g_fused) x *= static_cast<float>(step);
      const double norm = global_norm<float>(g);
      ASSERT_GT(norm, max_norm);
      EXPECT_EQ(norm, global_norm<float>(g_fused));
      clip_to_norm<float>(g, norm, max_norm);
      separate.step(p_separate, g, 1e-2);
      fused.step_and_zero_grads(p_fused, g_fused, 1e-2, clip_scale(norm, max_norm));
      ASSERT_EQ(p_fused, p_separate) << "step " << step;
      for (float x : g_fused) ASSERT_EQ(x, 0.f);
    }
    EXPECT_TRUE(std::equal(fused.second_moment().begin(), fused.second_moment().end(),
                           separate.second_moment().begin()));
  }
  set_num_threads(0);
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_scale(4.0, 1.0), 0.25);
  EXPECT_EQ(clip_scale(4.0, 0.0), 1.0);  // disabled
}

// The global norm's 16-lane double sums: the same value for any thread count and equal to a plain double sum to
// rounding, over several chunks and a remainder.
TEST(Clipping, GlobalNormIsThreadIndependent) {
  std::vector<float> g(3 * kNormChunk + 37);
  double want = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = std::sin(0.1f * static_cast<float>(i)) * (1.f + static_cast<float>(i % 5));
    want += static_cast<double>(g[i]) * g[i];
  }
  set_num_threads(1);
  const double one = global_norm<float>(g);
  set_num_threads(2);
  const double two = global_norm<float>(g);
  set_num_threads(0);
  EXPECT_EQ(one, two);
  EXPECT_NEAR(one, std::sqrt(want), 1e-12 * std::sqrt(want));
}

TEST(CopyTask, SecondHalfCopiesFirstAndMaskSelectsIt) {
  CopyTask task(64, 32, 1);
  Batch b;
  task.next(b, 4);
  ASSERT_EQ(b.seq_len, 63);
  for (int s = 0; s < 4; ++s) {
    int selected = 0;
    for (int t = 0; t < 63; ++t) {
      const int k = s * 63 + t;
      EXPECT_EQ(b.targets[k], t + 1 < 63 ? b.inputs[k + 1] : b.targets[k]);  // targets are inputs shifted by one
      if (t >= 32) {
        EXPECT_EQ(b.inputs[k], b.inputs[k - 32]);  // the copied half
      }
      EXPECT_EQ(b.loss_mask[k], t >= 31 ? 1 : 0);
      selected += b.loss_mask[k];
      if (b.loss_mask[k]) {
        EXPECT_EQ(b.targets[k], b.inputs[s * 63 + t - 31]);  // predicts the copy
      }
    }
    EXPECT_EQ(selected, 32);
  }
  // A stream is deterministic per seed and differs across seeds.
  CopyTask again(64, 32, 1), other(64, 32, 2);
  Batch b2, b3;
  again.next(b2, 4);
  other.next(b3, 4);
  EXPECT_EQ(b.inputs, b2.inputs);
  EXPECT_NE(b.inputs, b3.inputs);
  EXPECT_THROW(CopyTask(1, 4, 0), Error);
}

// The reverse task: the same first half as the copy task with the same seed (the same draws), then that half
// reversed; the loss on the second half.
TEST(ReverseTask, SecondHalfIsTheFirstReversedAndMaskSelectsIt) {
  const int n = 6, T = 2 * n - 1;
  CopyTask reverse(20, n, 9, /*reverse=*/true), copy(20, n, 9);
  EXPECT_TRUE(reverse.reverse());
  Batch r, c;
  for (int draw = 0; draw < 3; ++draw) {
    reverse.next(r, 5);
    copy.next(c, 5);
    ASSERT_EQ(r.seq_len, T);
    for (int s = 0; s < 5; ++s) {
      // the whole sequence s[0 .. 2n-1]: inputs plus the last target
      std::vector<int32_t> seq(r.inputs.begin() + s * T, r.inputs.begin() + (s + 1) * T);
      seq.push_back(r.targets[s * T + T - 1]);
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(seq[i], c.inputs[s * T + i]);  // the same random first half as the copy task
        EXPECT_EQ(seq[n + i], seq[n - 1 - i]);   // then reversed
      }
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(r.targets[s * T + t], seq[t + 1]);
        EXPECT_EQ(r.loss_mask[s * T + t], t >= n - 1 ? 1 : 0);
      }
    }
  }
  EXPECT_EQ(reverse.rng().state(), copy.rng().state());
  EXPECT_THROW(CopyTask(1, 4, 0, true), Error);
}

TEST(CopyTask, NextWritesIntoTheCallersBuffersWithoutReallocating) {
  CopyTask task(10, 5, 3), reference_stream(10, 5, 3);
  Rng rng = reference_stream.rng();  // the same generator, drawn by a plain reference below
  Batch b;
  task.next(b, 3);
  const int32_t* inputs = b.inputs.data();
  const int32_t* targets = b.targets.data();
  const uint8_t* mask = b.loss_mask.data();
  for (int draw = 0; draw < 4; ++draw) {
    if (draw > 0) task.next(b, 3);
    EXPECT_EQ(b.inputs.data(), inputs);  // the same buffers every time
    EXPECT_EQ(b.targets.data(), targets);
    EXPECT_EQ(b.loss_mask.data(), mask);
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> sequence(10);
      for (int i = 0; i < 5; ++i) sequence[i] = sequence[5 + i] = static_cast<int32_t>(rng.below(10));
      for (int t = 0; t < 9; ++t) {
        ASSERT_EQ(b.inputs[s * 9 + t], sequence[t]) << draw << " " << s << " " << t;
        ASSERT_EQ(b.targets[s * 9 + t], sequence[t + 1]) << draw << " " << s << " " << t;
      }
    }
  }
  EXPECT_EQ(task.batches_drawn(), 4u);
  for (int copy_len : {1, 2}) {  // the shortest sequences: 1 and 3 tokens
    CopyTask tiny(5, copy_len, 0);
    Batch t;
    tiny.next(t, 2);
    for (int s = 0; s < 2; ++s)
      for (int k = 0; k < 2 * copy_len - 1; ++k) {
        const int i = s * (2 * copy_len - 1) + k;
        EXPECT_EQ(t.targets[i], k + 1 < copy_len ? t.inputs[i + 1] : t.inputs[i + 1 - copy_len]);
      }
  }
}

using blocklab::testing::small_copy_run;
using blocklab::testing::step_losses;

class Learnability : public ::testing::TestWithParam<NormPlacement> {};

TEST_P(Learnability, SmallModelLearnsTheCopyTask) {
  const RunConfig c = small_copy_run(GetParam());
  set_num_threads(1);
  Trainer trainer(c);
  double first = 0, last = 0;
  for (int s = 0; s < c.steps; ++s) {
    const StepResult r = trainer.step();
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_GT(first, std::log(8.0) - 0.3);  // starts near chance
  EXPECT_LT(last, 0.05) << "did not learn the copy task within " << c.steps << " steps";
}

INSTANTIATE_TEST_SUITE_P(Placements, Learnability,
                         ::testing::Values(NormPlacement::Post, NormPlacement::Pre, NormPlacement::NGPT),
                         [](const auto& info) { return to_string(info.param); });

TEST(Trainer, LossesAreBitIdenticalAcrossThreadCountsAndRepeats) {
  RunConfig c = small_copy_run(NormPlacement::Post);
  c.steps = 20;
  const auto one = step_losses(c, c.steps, 1);
  EXPECT_EQ(one, step_losses(c, c.steps, 2));
  EXPECT_EQ(one, step_losses(c, c.steps, 1));
}

namespace {
// How nGPT's renormalisation treats a parameter of the seed block: each row or each column made unit, or none.
enum class UnitAxis { None, Rows, Columns };
UnitAxis ngpt_unit_axis(const std::string& name) {
  if (name == "tok_emb.weight" || name == "head.weight" || name.ends_with(".attn.qkv.weight") ||
      name.ends_with(".mlp.fc1.weight"))
    return UnitAxis::Rows;
  if (name.ends_with(".attn.proj.weight") || name.ends_with(".mlp.fc2.weight")) return UnitAxis::Columns;
  return UnitAxis::None;
}
long unit_vectors(const ParamSpec& s, UnitAxis axis) { return axis == UnitAxis::Rows ? s.shape[0] : s.shape[1]; }
// The L2 norm, in double, of vector v (a row or a column) of the (R, C) matrix p.
double unit_axis_norm(const float* p, const ParamSpec& s, UnitAxis axis, long v) {
  const long R = s.shape[0], C = s.shape[1];
  const bool rows = axis == UnitAxis::Rows;
  double ss = 0;
  for (long i = 0; i < (rows ? C : R); ++i) {
    const double x = rows ? p[v * C + i] : p[i * C + v];
    ss += x * x;
  }
  return std::sqrt(ss);
}
}  // namespace

// nGPT: 1 vs 2 threads give the same losses and weights (the renormalisation included), and after every step
// each renormalised weight vector has unit norm.
TEST(Trainer, NgptBitIdenticalAcrossThreadCountsAndUnitWeightsAfterEveryStep) {
  RunConfig c = small_copy_run(NormPlacement::NGPT);
  c.steps = 10;
  std::vector<float> one_params, two_params;
  const auto one = step_losses(c, c.steps, 1, &one_params);
  EXPECT_EQ(one, step_losses(c, c.steps, 2, &two_params));
  EXPECT_TRUE(one_params == two_params) << "weights differ between 1 and 2 threads";
  set_num_threads(1);
  Trainer t(c);
  Model<float>& m = t.model();
  auto check_unit = [&](int step) {
    int checked = 0;
    for (const ParamSpec& s : m.table().specs()) {
      const UnitAxis axis = ngpt_unit_axis(s.name);
      if (axis == UnitAxis::None) continue;
      for (long v = 0; v < unit_vectors(s, axis); ++v) {
        ASSERT_NEAR(unit_axis_norm(m.param(s.name).data(), s, axis, v), 1.0, 1e-6)
            << s.name << " vector " << v << " after step " << step;
        ++checked;
      }
    }
    EXPECT_GT(checked, 0);
  };
  check_unit(0);
  for (int s = 1; s <= 5; ++s) {
    t.step();
    check_unit(s);
  }
}

// The renormalisation against a float64 computation of the same vectors from the weights the optimizer left.
TEST(Trainer, NgptRenormalisationMatchesADoubleReference) {
  RunConfig c = small_copy_run(NormPlacement::NGPT);
  set_num_threads(1);
  Model<float> m(c.model);
  m.init_weights(3);
  Rng rng(9);
  for (float& x : m.params()) x += static_cast<float>(0.1 * rng.normal());  // as after an update: not unit
  const std::vector<float> before(m.params().begin(), m.params().end());
  m.normalize_weights();
  for (const ParamSpec& s : m.table().specs()) {
    const auto p = m.param(s.name);
    const float* b = before.data() + s.offset;
    const UnitAxis axis = ngpt_unit_axis(s.name);
    if (axis == UnitAxis::None) {  // everything else (biases, pos_emb, the scales) is left as it is
      for (long i = 0; i < s.numel; ++i) ASSERT_EQ(p[i], b[i]) << s.name;
      continue;
    }
    const bool rows = axis == UnitAxis::Rows;
    const long R = s.shape[0], C = s.shape[1];
    for (long v = 0; v < unit_vectors(s, axis); ++v) {
      const double norm = unit_axis_norm(b, s, axis, v);
      for (long i = 0; i < (rows ? C : R); ++i) {
        const long k = rows ? v * C + i : i * C + v;
        ASSERT_NEAR(p[k], b[k] / norm, 1e-7) << s.name << "[" << k << "]";
      }
    }
  }
}

TEST(Trainer, NgptRefusesWeightDecay) {
  RunConfig c = small_copy_run(NormPlacement::NGPT);
  c.optimizer.kind = OptimizerKind::AdamW;
  c.optimizer.weight_decay = 0.1;
  EXPECT_THROW(resolve(c), Error);
}

TEST(Trainer, WarmupStartsAtZeroLearningRate) {
  RunConfig c = small_copy_run(NormPlacement::Pre);
  c.warmup = 10;
  Trainer t(c);
  EXPECT_DOUBLE_EQ(t.step().lr, 3e-3 / 10);
  EXPECT_DOUBLE_EQ(t.step().lr, 3e-3 * 2 / 10);
}
