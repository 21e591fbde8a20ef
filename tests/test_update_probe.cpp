// The update probe (probe/update_probe.h): OUT/updates.csv's columns and rows, each statistic against a direct
// computation from the trainer's state, the critical step's line search against a brute-force scan, and a run
// whose numbers are the same, bit for bit, with the probe on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli_runner.h"
#include "io/csv.h"
#include "jobs/train_job.h"
#include "probe/update_probe.h"
#include "util/error.h"
#include "util/threads.h"

namespace {

using namespace blocklab;
namespace bt = blocklab::testing;
namespace fs = std::filesystem;

RunConfig tiny_run(const fs::path& out, int steps = 7, const std::string& optimizer = "adam") {
  RunConfig c;
  c.model.norm_placement = NormPlacement::Pre;
  c.model.layers = 2;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.vocab = 8;
  c.copy_len = 4;
  c.batch = 4;
  c.steps = steps;
  c.lr = 3e-3;
  c.threads = 1;
  c.tensorboard = false;
  c.out = out.string();
  set_config_value(c, "optimizer", optimizer);
  resolve(c);
  return c;
}

std::vector<io::CsvRecord> csv_rows(const fs::path& path) {
  std::vector<io::CsvRecord> rows = io::read_csv(path.string());
  return rows;
}

// The field of `column` in a row of update_columns().
const std::string& field(const std::vector<std::string>& row, const std::string& column) {
  const std::vector<std::string> columns = probe::update_columns();
  const auto it = std::find(columns.begin(), columns.end(), column);
  EXPECT_NE(it, columns.end()) << column;
  return row.at(static_cast<size_t>(it - columns.begin()));
}
double number(const std::vector<std::string>& row, const std::string& column) {
  return std::stod(field(row, column));
}

// The row of `group` among one step's rows.
const std::vector<std::string>& row_of(const probe::UpdateMeasurement& m, const std::string& group) {
  for (const auto& row : m.rows)
    if (row.at(1) == group) return row;
  ADD_FAILURE() << "no row " << group;
  return m.rows.front();
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(UpdateProbe, CsvHasTheDocumentedColumnsAndOneRowPerGroupPerProbedStep) {
  const fs::path dir = bt::fresh_dir("update_probe_csv");
  jobs::TrainJob job;
  job.config = tiny_run(dir / "run");
  job.config.update_probe_every = 3;
  job.config.tensorboard = true;
  jobs::train_job(job);
  const auto rows = csv_rows(dir / "run" / "updates.csv");
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0].fields,
            (std::vector<std::string>{"step",          "group",         "lr",
                                      "params",        "step_size_mean", "step_size_std",
                                      "step_size_cv",  "step_size_min",  "step_size_p05",
                                      "step_size_p50", "step_size_p95",  "step_size_max",
                                      "update_norm",   "weight_norm",    "update_ratio",
                                      "update_ratio_attention", "update_ratio_cross", "update_ratio_mlp",
                                      "loss",          "loss_after",     "eta_lo",
                                      "eta_hi",        "eta_c",          "lambda_c",
                                      "edge_gd",       "passes"}));
  const std::vector<std::string> groups = {"embeddings", "block_1", "block_2", "head", "all"};
  ASSERT_EQ(rows.size(), 1 + 3 * groups.size());  // steps 3, 6 and the last, 7
  for (size_t r = 1; r < rows.size(); ++r) {
    const std::vector<std::string>& f = rows[r].fields;
    ASSERT_EQ(f.size(), rows[0].fields.size());
    EXPECT_EQ(f[0], std::to_string(std::vector<int>{3, 6, 7}[(r - 1) / groups.size()]));
    EXPECT_EQ(f[1], groups[(r - 1) % groups.size()]);
    EXPECT_NE(field(f, "step_size_p50"), "");
    EXPECT_NE(field(f, "update_ratio"), "");
    const bool block = f[1].rfind("block_", 0) == 0;
    EXPECT_EQ(field(f, "update_ratio_attention") != "", block);
    EXPECT_EQ(field(f, "update_ratio_mlp") != "", block);
    EXPECT_EQ(field(f, "update_ratio_cross"), "");  // no cross-attention in this block
    EXPECT_EQ(field(f, "loss") != "", f[1] == "all");
    EXPECT_EQ(field(f, "edge_gd") != "", f[1] == "all");
  }
  // The parameter counts add up: every tensor is in exactly one of embeddings, the blocks and the head.
  long sum = 0;
  for (size_t g = 0; g + 1 < groups.size(); ++g) sum += std::stol(field(rows[1 + g].fields, "params"));
  EXPECT_EQ(sum, std::stol(field(rows[groups.size()].fields, "params")));
  // TensorBoard gets the scalars too.
  std::string events;
  for (const auto& entry : fs::directory_iterator(dir / "run"))
    if (entry.path().filename().string().rfind("events.out.tfevents", 0) == 0) events += read_bytes(entry.path());
  EXPECT_NE(events.find("updates/update_ratio/block_01"), std::string::npos);
  EXPECT_NE(events.find("updates/step_size_cv/all"), std::string::npos);
}

TEST(UpdateProbe, StepSizeSpreadIsTheOptimizersSecondMoment) {
  for (const char* kind : {"adam", "radam"}) {
    RunConfig c = tiny_run(bt::fresh_dir("update_probe_spread") / "run", 5, kind);
    c.update_probe_every = 1;
    set_num_threads(1);
    Trainer trainer(c);
    for (int s = 0; s < 3; ++s) trainer.step();
    const probe::UpdateMeasurement m = probe::measure_update(trainer);
    const std::span<const float> v = trainer.optimizer().state(std::string(kind) + ".v");
    ASSERT_FALSE(v.empty());
    const double lr = c.make_schedule().at(3), correction = 1 - std::pow(c.optimizer.beta2, 3);
    for (int block = 0; block < 2; ++block) {
      std::vector<double> a;
      for (const ParamSpec& s : trainer.model().table().specs())
        if (s.block == block)
          for (long i = 0; i < s.numel; ++i)
            a.push_back(lr / (std::sqrt(v[s.offset + i] / correction) + c.optimizer.eps));
      std::sort(a.begin(), a.end());
      double mean = 0;
      for (double x : a) mean += x;
      mean /= a.size();
      double var = 0;
      for (double x : a) var += (x - mean) * (x - mean);
      const double sd = std::sqrt(var / a.size());
      auto percentile = [&](double q) {  // numpy's linear interpolation on the sorted values
        const double pos = q * (a.size() - 1);
        const size_t i = static_cast<size_t>(pos);
        return i + 1 < a.size() ? a[i] + (pos - i) * (a[i + 1] - a[i]) : a[i];
      };
      const auto& row = row_of(m, "block_" + std::to_string(block + 1));
      EXPECT_EQ(std::stol(field(row, "params")), static_cast<long>(a.size()));
      EXPECT_NEAR(number(row, "step_size_mean"), mean, 1e-7 * mean) << kind;
      EXPECT_NEAR(number(row, "step_size_std"), sd, 1e-7 * sd) << kind;
      EXPECT_NEAR(number(row, "step_size_cv"), sd / mean, 1e-7 * sd / mean) << kind;
      EXPECT_NEAR(number(row, "step_size_min"), a.front(), 1e-7 * a.front()) << kind;
      EXPECT_NEAR(number(row, "step_size_max"), a.back(), 1e-7 * a.back()) << kind;
      for (const auto& [column, q] :
           {std::pair{"step_size_p05", 0.05}, {"step_size_p50", 0.5}, {"step_size_p95", 0.95}})
        EXPECT_NEAR(number(row, column), percentile(q), 1e-7 * percentile(q)) << kind << " " << column;
    }
  }
  // Optimizers without Adam's second moment leave the columns empty.
  RunConfig c = tiny_run(bt::fresh_dir("update_probe_spread") / "sgd", 5, "sgd");
  c.update_probe_every = 1;
  Trainer trainer(c);
  trainer.step();
  const probe::UpdateMeasurement m = probe::measure_update(trainer);
  EXPECT_EQ(field(row_of(m, "block_1"), "step_size_mean"), "");
  EXPECT_NE(field(row_of(m, "block_1"), "update_ratio"), "");
  set_num_threads(0);
}

TEST(UpdateProbe, UpdateRatioIsTheChangeOverTheWeightsBefore) {
  RunConfig c = tiny_run(bt::fresh_dir("update_probe_ratio") / "run", 5, "adamw");
  c.optimizer.weight_decay = 0.1;
  c.update_probe_every = 2;
  set_num_threads(1);
  Trainer trainer(c);
  trainer.step();
  EXPECT_TRUE(trainer.params_before_update().empty());  // step 1 is not probed
  const std::vector<float> before(trainer.model().params().begin(), trainer.model().params().end());
  trainer.step();
  ASSERT_EQ(trainer.params_before_update().size(), before.size());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), trainer.params_before_update().begin()));
  const std::span<const float> after = trainer.model().params();
  const probe::UpdateMeasurement m = probe::measure_update(trainer);
  auto ratio = [&](auto&& take) {
    double d2 = 0, w2 = 0;
    for (const ParamSpec& s : trainer.model().table().specs())
      if (take(s))
        for (long i = 0; i < s.numel; ++i) {
          const double w = before[s.offset + i], d = static_cast<double>(after[s.offset + i]) - w;
          d2 += d * d;
          w2 += w * w;
        }
    return std::sqrt(d2 / w2);
  };
  const double block2 = ratio([](const ParamSpec& s) { return s.block == 1; });
  EXPECT_NEAR(number(row_of(m, "block_2"), "update_ratio"), block2, 1e-7 * block2);
  const double mlp1 = ratio([](const ParamSpec& s) { return s.block == 0 && s.sublayer == Sublayer::Mlp; });
  EXPECT_NEAR(number(row_of(m, "block_1"), "update_ratio_mlp"), mlp1, 1e-7 * mlp1);
  const double all = ratio([](const ParamSpec&) { return true; });
  EXPECT_NEAR(number(row_of(m, "all"), "update_ratio"), all, 1e-7 * all);
  const double emb =
      ratio([](const ParamSpec& s) { return s.name.rfind("tok_emb", 0) == 0 || s.name.rfind("pos_emb", 0) == 0; });
  EXPECT_NEAR(number(row_of(m, "embeddings"), "update_ratio"), emb, 1e-7 * emb);
  // Measuring put the updated weights back exactly.
  EXPECT_TRUE(std::equal(after.begin(), after.end(), trainer.model().params().begin()));
  set_num_threads(0);
}

TEST(UpdateProbe, LineSearchBracketsTheCrossingOfAQuadratic) {
  // L(eta) = eta^2 / 2 - 0.3 eta (the quadratic along a descent direction with curvature 1 and slope -0.3):
  // L(eta) = L(0) at eta = 0.6.
  auto quadratic = [](double eta) { return eta * eta / 2 - 0.3 * eta; };
  for (double eta0 : {1e-3, 0.5, 0.7, 5.0}) {
    const probe::CriticalStep c = probe::critical_step(quadratic, 0.0, eta0, 12);
    ASSERT_TRUE(c.eta_c().has_value()) << eta0;
    EXPECT_LE(*c.lo, 0.6);
    EXPECT_GT(*c.hi, 0.6);
    EXPECT_LE(std::abs(*c.eta_c() - 0.6), (*c.hi - *c.lo) / 2) << eta0;
    EXPECT_EQ(c.passes, 12);
  }
  // Still falling at the largest step tried: no bracket.
  const probe::CriticalStep far = probe::critical_step(quadratic, 0.0, 1e-6, 8);
  EXPECT_FALSE(far.eta_c().has_value());
  ASSERT_TRUE(far.lo.has_value());
  EXPECT_EQ(*far.lo, 1e-6 * 128);  // the largest step tried: an upper bound of lambda_c = 2 / eta_c
  EXPECT_EQ(far.passes, 8);
  // Rising at every step tried: the bracket starts at 0.
  const probe::CriticalStep up = probe::critical_step([](double eta) { return eta; }, 0.0, 1.0, 4);
  ASSERT_TRUE(up.eta_c().has_value());
  EXPECT_EQ(*up.lo, 0.0);
  EXPECT_EQ(*up.hi, 0.125);
}

TEST(UpdateProbe, CriticalSharpnessAgreesWithABruteForceScan) {
  RunConfig c = tiny_run(bt::fresh_dir("update_probe_scan") / "run", 20, "adam");
  c.update_probe_every = 4;
  c.update_probe_passes = 16;
  c.lr = 1e-2;
  set_num_threads(1);
  Trainer trainer(c);
  for (int s = 0; s < 4; ++s) trainer.step();
  const probe::UpdateMeasurement m = probe::measure_update(trainer);
  const auto& row = row_of(m, "all");
  ASSERT_NE(field(row, "eta_c"), "");
  const double lo = number(row, "eta_lo"), hi = number(row, "eta_hi"), eta_c = number(row, "eta_c");
  EXPECT_NEAR(number(row, "lambda_c"), 2 / eta_c, 1e-7 * 2 / eta_c);
  EXPECT_EQ(std::stoi(field(row, "passes")), 16);
  // The scan: the loss of the step's batch at 400 points W_before + (eta / lr) dW on [0, 2 hi].
  const std::vector<float> before(trainer.params_before_update().begin(), trainer.params_before_update().end());
  const std::vector<float> after(trainer.model().params().begin(), trainer.model().params().end());
  const Batch& b = trainer.last_batch();
  auto loss_at = [&](double eta) {
    const float s = static_cast<float>(eta / c.lr);
    std::span<float> p = trainer.model().params();
    for (size_t i = 0; i < p.size(); ++i) p[i] = before[i] + s * (after[i] - before[i]);
    return static_cast<double>(
        trainer.model().forward(trainer.activations(), b.inputs.data(), b.targets.data(), b.loss_mask.data()));
  };
  const double loss0 = loss_at(0);
  EXPECT_NEAR(loss0, number(row, "loss"), 1e-7 * loss0);
  double first_crossing = -1;
  const int n = 400;
  for (int i = 1; i <= n && first_crossing < 0; ++i)
    if (loss_at(2 * hi * i / n) > loss0) first_crossing = 2 * hi * i / n;
  ASSERT_GT(first_crossing, 0);
  // The crossing lies in the search's bracket (to the scan's resolution), so eta_c is within its tolerance.
  const double resolution = 2 * hi / n;
  EXPECT_GE(first_crossing, lo - resolution);
  EXPECT_LE(first_crossing, hi + resolution);
  EXPECT_LE(std::abs(first_crossing - eta_c), (hi - lo) / 2 + resolution);
  std::copy(after.begin(), after.end(), trainer.model().params().begin());
  set_num_threads(0);
}

TEST(UpdateProbe, DoesNotChangeTheRun) {
  for (const char* kind : {"adam", "gi-adam", "radam", "sgd"}) {
    for (int shards : {1, 2}) {
      const bool gi = std::string(kind) == "gi-adam";
      RunConfig c = tiny_run(bt::fresh_dir("update_probe_exact") / "run", 6, gi ? "adamw" : kind);
      if (gi) set_config_value(c, "adam_v0", "grad");
      c.micro_shards = shards;
      resolve(c);
      RunConfig probed = c;
      probed.update_probe_every = 1;
      set_num_threads(1);
      Trainer plain(c), with(probed);
      for (int s = 0; s < c.steps; ++s) {
        const StepResult a = plain.step(), b = with.step();
        EXPECT_EQ(a.loss, b.loss) << kind << " step " << s + 1;
        EXPECT_EQ(a.grad_norm, b.grad_norm) << kind << " step " << s + 1;
        probe::measure_update(with);
      }
      EXPECT_TRUE(std::equal(plain.model().params().begin(), plain.model().params().end(),
                             with.model().params().begin()))
          << kind << " " << shards;
      EXPECT_TRUE(std::equal(plain.optimizer().state().front().values.begin(),
                             plain.optimizer().state().front().values.end(),
                             with.optimizer().state().front().values.begin()))
          << kind << " " << shards;
    }
  }
  set_num_threads(0);
  // Through the job, with the file written: the same metrics and final weights.
  const fs::path dir = bt::fresh_dir("update_probe_job");
  jobs::TrainJob plain, probed;
  plain.config = tiny_run(dir / "plain");
  probed.config = tiny_run(dir / "probed");
  probed.config.update_probe_every = 2;
  const jobs::TrainJobResult a = jobs::train_job(plain), b = jobs::train_job(probed);
  EXPECT_EQ(a.summary.final_loss, b.summary.final_loss);
  EXPECT_EQ(bt::read_text(dir / "plain" / "metrics.csv"), bt::read_text(dir / "probed" / "metrics.csv"));
  EXPECT_EQ(read_bytes(dir / "plain" / "model.safetensors"), read_bytes(dir / "probed" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "plain" / "updates.csv"));
  EXPECT_TRUE(fs::exists(dir / "probed" / "updates.csv"));
}

TEST(UpdateProbe, TheSameValuesAtOneAndTwoThreads) {
  const fs::path dir = bt::fresh_dir("update_probe_threads");
  std::string csv[2];
  for (int threads : {1, 2}) {
    jobs::TrainJob job;
    job.config = tiny_run(dir / std::to_string(threads));
    job.config.model.width = 64;  // large enough for the kernels to split their work over the threads
    job.config.model.layers = 3;
    job.config.copy_len = 16;
    job.config.model.seq_len = 31;
    job.config.batch = 16;
    job.config.update_probe_every = 2;
    job.config.threads = threads;
    resolve(job.config);
    jobs::train_job(job);
    csv[threads - 1] = bt::read_text(dir / std::to_string(threads) / "updates.csv");
  }
  EXPECT_FALSE(csv[0].empty());
  EXPECT_EQ(csv[0], csv[1]);
}

TEST(UpdateProbe, AResumedRunWritesTheUninterruptedRunsFile) {
  const fs::path dir = bt::fresh_dir("update_probe_resume");
  jobs::TrainJob whole;
  whole.config = tiny_run(dir / "whole", 8);
  whole.config.update_probe_every = 2;
  jobs::train_job(whole);
  jobs::TrainJob first;
  first.config = tiny_run(dir / "parts", 4);
  first.config.update_probe_every = 2;
  first.config.checkpoint_every = 4;
  jobs::train_job(first);
  const ResumePoint from = find_resume_point((dir / "parts").string());
  jobs::TrainJob rest;
  rest.config = from.config;
  rest.config.steps = 8;
  rest.resume = &from;
  jobs::train_job(rest);
  // The first part's last step (4) is probed as the last step of its run, and as a multiple of 2 in the whole run.
  EXPECT_EQ(bt::read_text(dir / "whole" / "updates.csv"), bt::read_text(dir / "parts" / "updates.csv"));
}

TEST(UpdateProbe, BadKeyValuesAreRejected) {
  auto error_for = [](const std::string& key, const std::string& value) {
    RunConfig c = tiny_run(bt::fresh_dir("update_probe_keys") / "run");
    try {
      set_config_value(c, key, value);
      resolve(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_for("update_probe_every", "-1").find("update_probe_every must be >= 0"), std::string::npos);
  EXPECT_NE(error_for("update_probe_passes", "1").find("update_probe_passes must be >= 2"), std::string::npos);
  EXPECT_EQ(error_for("update_probe_every", "0"), "");
  EXPECT_EQ(error_for("update_probe_every", "5"), "");
}

}  // namespace
