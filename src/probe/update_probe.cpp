#include "probe/update_probe.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "io/csv.h"
#include "io/tfevents.h"
#include "util/error.h"

namespace blocklab::probe {

double quantile(std::vector<double>& values, double q) {
  const size_t n = values.size();
  const double pos = q * static_cast<double>(n - 1);
  const size_t i = std::min(static_cast<size_t>(pos), n - 1);
  const double frac = pos - static_cast<double>(i);
  std::nth_element(values.begin(), values.begin() + static_cast<long>(i), values.end());
  const double a = values[i];
  if (frac == 0 || i + 1 >= n) return a;
  const double b = *std::min_element(values.begin() + static_cast<long>(i) + 1, values.end());
  return a + frac * (b - a);
}

StepSizeSpread step_size_spread(std::span<const float> v, const std::vector<const ParamSpec*>& specs, double lr,
                                double beta2, double eps, int64_t t) {
  StepSizeSpread s;
  const double correction = 1 - std::pow(beta2, static_cast<double>(t));
  std::vector<double> a;
  for (const ParamSpec* spec : specs)
    for (long i = 0; i < spec->numel; ++i)
      a.push_back(lr / (std::sqrt(static_cast<double>(v[spec->offset + i]) / correction) + eps));
  s.count = static_cast<long>(a.size());
  if (a.empty()) return s;
  double sum = 0;
  for (double x : a) sum += x;
  s.mean = sum / static_cast<double>(a.size());
  double sq = 0;
  for (double x : a) sq += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sq / static_cast<double>(a.size()));
  s.cv = s.mean > 0 ? s.std / s.mean : 0;
  s.min = *std::min_element(a.begin(), a.end());
  s.max = *std::max_element(a.begin(), a.end());
  s.p05 = quantile(a, 0.05);
  s.p50 = quantile(a, 0.50);
  s.p95 = quantile(a, 0.95);
  return s;
}

CriticalStep critical_step(const std::function<double(double)>& loss, double loss0, double eta0, int passes) {
  CriticalStep c;
  auto at = [&](double eta) {
    ++c.passes;
    return loss(eta);
  };
  double eta = eta0;
  c.loss_at_eta0 = at(eta);
  if (c.loss_at_eta0 <= loss0) {  // below: double until the loss rises above loss0
    c.lo = eta;
    while (c.passes < passes && !c.hi) {
      eta *= 2;
      if (at(eta) > loss0)
        c.hi = eta;
      else
        c.lo = eta;
    }
  } else {  // above: halve until it falls to loss0 or below
    c.hi = eta;
    while (c.passes < passes && !c.lo) {
      eta /= 2;
      if (at(eta) <= loss0)
        c.lo = eta;
      else
        c.hi = eta;
    }
    if (!c.lo) c.lo = 0.0;  // every step tried raised the loss
  }
  while (c.hi && c.passes < passes) {  // bisect the bracket
    const double mid = (*c.lo + *c.hi) / 2;
    if (at(mid) <= loss0)
      c.lo = mid;
    else
      c.hi = mid;
  }
  return c;
}

std::vector<ParamGroup> update_groups(const ParameterTable& table) {
  int layers = 0;
  for (const ParamSpec& s : table.specs()) layers = std::max(layers, s.block + 1);
  std::vector<ParamGroup> groups;
  groups.push_back({"embeddings", -1, {}});
  for (int l = 0; l < layers; ++l) groups.push_back({"block_" + std::to_string(l + 1), l, {}});
  groups.push_back({"head", -1, {}});
  groups.push_back({"all", -1, {}});
  bool after_blocks = false;
  for (const ParamSpec& s : table.specs()) {
    if (s.block >= 0) {
      after_blocks = true;
      groups[1 + s.block].specs.push_back(&s);
    } else {
      groups[after_blocks ? 1 + layers : 0].specs.push_back(&s);
    }
    groups.back().specs.push_back(&s);
  }
  return groups;
}

std::vector<std::string> update_columns() {
  return {"step",          "group",         "lr",           "params",        "step_size_mean",
          "step_size_std", "step_size_cv",  "step_size_min", "step_size_p05", "step_size_p50",
          "step_size_p95", "step_size_max", "update_norm",  "weight_norm",   "update_ratio",
          "update_ratio_attention", "update_ratio_cross", "update_ratio_mlp", "loss", "loss_after",
          "eta_lo",        "eta_hi",        "eta_c",        "lambda_c",      "edge_gd",
          "passes"};
}

namespace {

// Sums of squares of dW and W_before over a set of tensors, in table order.
struct Norms {
  double update_sq = 0, weight_sq = 0;
  bool any = false;
  void add(const ParamSpec& s, std::span<const float> before, std::span<const float> after) {
    any = true;
    for (long i = 0; i < s.numel; ++i) {
      const double w = before[s.offset + i], d = static_cast<double>(after[s.offset + i]) - w;
      update_sq += d * d;
      weight_sq += w * w;
    }
  }
  std::string ratio() const { return any && weight_sq > 0 ? io::csv_number(std::sqrt(update_sq / weight_sq)) : ""; }
};

// The mean loss of the batch at the model's current weights: its micro-shards in turn (the trainer's activations
// hold one), their mean.
double batch_loss(Trainer& trainer) {
  const Batch& batch = trainer.last_batch();
  const int rows = trainer.shard_batch(), T = trainer.config().model.seq_len, M = trainer.config().micro_shards;
  double sum = 0;
  for (int s = 0; s < M; ++s) {
    const size_t offset = static_cast<size_t>(s) * rows * T;
    sum += trainer.model().forward(trainer.activations(), batch.inputs.data() + offset, batch.targets.data() + offset,
                                   batch.loss_mask.data() + offset);
  }
  return sum / M;
}

std::string number_or_empty(const std::optional<double>& x) { return x ? io::csv_number(*x) : ""; }

}  // namespace

UpdateMeasurement measure_update(Trainer& trainer) {
  const RunConfig& config = trainer.config();
  const int step = trainer.steps_done();
  const std::span<const float> before = trainer.params_before_update();
  if (before.empty()) throw Error("update probe: step " + std::to_string(step) + " kept no weights before its update");
  std::span<float> params = trainer.model().params();
  const std::vector<float> after(params.begin(), params.end());
  const double lr = config.make_schedule().at(step);

  // Adam's second moment, where the optimizer keeps one over every parameter.
  const OptimizerKind kind = config.optimizer.kind;
  std::span<const float> v;
  if (kind == OptimizerKind::Adam || kind == OptimizerKind::AdamW) v = trainer.optimizer().state("adam.v");
  if (kind == OptimizerKind::RAdam) v = trainer.optimizer().state("radam.v");
  const int64_t t = trainer.optimizer().steps_taken();

  // The critical step along d = dW / lr: points W_before + (eta / lr) dW, the updated weights restored after.
  std::optional<CriticalStep> critical;
  double loss0 = 0;
  double update_sq = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    const double d = static_cast<double>(after[i]) - before[i];
    update_sq += d * d;
  }
  if (lr > 0 && update_sq > 0) {
    std::copy(before.begin(), before.end(), params.begin());
    loss0 = batch_loss(trainer);
    auto loss_at = [&](double eta) {
      const float s = static_cast<float>(eta / lr);
      for (size_t i = 0; i < after.size(); ++i) params[i] = before[i] + s * (after[i] - before[i]);
      return batch_loss(trainer);
    };
    critical = critical_step(loss_at, loss0, lr, config.update_probe_passes);
    std::copy(after.begin(), after.end(), params.begin());
  }

  UpdateMeasurement m;
  auto scalar_name = [](const std::string& what, const ParamGroup& g) {
    if (g.block < 0) return "updates/" + what + "/" + g.name;
    char name[32];
    std::snprintf(name, sizeof name, "block_%02d", g.block + 1);
    return "updates/" + what + "/" + name;
  };
  for (const ParamGroup& g : update_groups(trainer.model().table())) {
    std::vector<std::string> row = {std::to_string(step), g.name, io::csv_number(lr)};
    long count = 0;
    for (const ParamSpec* s : g.specs) count += s->numel;
    row.push_back(std::to_string(count));
    if (!v.empty() && count > 0) {
      const StepSizeSpread s =
          step_size_spread(v, g.specs, lr, config.optimizer.beta2, config.optimizer.eps, t);
      for (double x : {s.mean, s.std, s.cv, s.min, s.p05, s.p50, s.p95, s.max}) row.push_back(io::csv_number(x));
      m.scalars.emplace_back(scalar_name("step_size_cv", g), s.cv);
      if (s.p05 > 0) m.scalars.emplace_back(scalar_name("step_size_p95_over_p05", g), s.p95 / s.p05);
    } else {
      row.insert(row.end(), 8, "");
    }
    Norms total, attention, cross, mlp;
    for (const ParamSpec* s : g.specs) {
      total.add(*s, before, after);
      if (g.block >= 0 && s->sublayer) {
        Norms& part = *s->sublayer == Sublayer::Attention ? attention : *s->sublayer == Sublayer::Cross ? cross : mlp;
        part.add(*s, before, after);
      }
    }
    row.push_back(io::csv_number(std::sqrt(total.update_sq)));
    row.push_back(io::csv_number(std::sqrt(total.weight_sq)));
    row.push_back(total.ratio());
    row.push_back(attention.ratio());
    row.push_back(cross.ratio());
    row.push_back(mlp.ratio());
    if (total.weight_sq > 0)
      m.scalars.emplace_back(scalar_name("update_ratio", g), std::sqrt(total.update_sq / total.weight_sq));
    const bool all = g.name == "all";
    if (all && critical) {
      const std::optional<double> eta_c = critical->eta_c();
      row.push_back(io::csv_number(loss0));
      row.push_back(io::csv_number(critical->loss_at_eta0));
      row.push_back(number_or_empty(critical->lo));
      row.push_back(number_or_empty(critical->hi));
      row.push_back(number_or_empty(eta_c));
      row.push_back(eta_c ? io::csv_number(2 / *eta_c) : "");
      row.push_back(io::csv_number(2 / lr));
      row.push_back(std::to_string(critical->passes));
      if (eta_c) {
        m.scalars.emplace_back("updates/eta_c", *eta_c);
        m.scalars.emplace_back("updates/lambda_c", 2 / *eta_c);
      }
    } else {
      row.insert(row.end(), 6, "");
      row.push_back(all && lr > 0 ? io::csv_number(2 / lr) : "");
      row.push_back("");
    }
    m.rows.push_back(std::move(row));
  }
  return m;
}

UpdateProbeWriter::UpdateProbeWriter(std::string path) : path_(std::move(path)) {}

UpdateProbeWriter::~UpdateProbeWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void UpdateProbeWriter::open(int first_step) {
  const std::vector<std::string> columns = update_columns();
  std::string kept = io::csv_line(columns);
  if (first_step > 0 && std::filesystem::exists(path_)) {  // a resumed run: keep what earlier steps wrote
    const std::vector<io::CsvRecord> records = io::read_csv(path_);
    if (!records.empty() && records.front().line == 1 && records.front().fields == columns)
      for (size_t r = 1; r < records.size(); ++r)
        if (std::atol(records[r].fields.front().c_str()) <= first_step) io::append_csv_line(kept, records[r].fields);
  }
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) throw Error(path_ + ": cannot write: " + std::strerror(errno));
  std::fputs(kept.c_str(), file_);
}

void UpdateProbeWriter::operator()(Trainer& trainer) {
  const int step = trainer.steps_done();
  if (file_ == nullptr) open(step);
  if (!Trainer::update_probed(trainer.config(), step) || trainer.params_before_update().empty()) return;
  const UpdateMeasurement m = measure_update(trainer);
  std::string lines;
  for (const std::vector<std::string>& row : m.rows) io::append_csv_line(lines, row);
  std::fputs(lines.c_str(), file_);
  if (std::fflush(file_) != 0) throw Error(path_ + ": write failed: " + std::strerror(errno));
  if (io::EventFileWriter* events = trainer.event_writer(); events != nullptr && events->takes(step))
    events->scalars(step, m.scalars);
}

}  // namespace blocklab::probe
