#include "probe/residual_probe.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "io/csv.h"
#include "io/tfevents.h"
#include "probe/grad_norms.h"
#include "probe/residual_norms.h"
#include "util/error.h"

namespace blocklab::probe {

namespace {
const std::vector<std::string>& columns() {
  static const std::vector<std::string> names = {"step", "layer", "mean_vector_norm", "mean_token_norm"};
  return names;
}
}  // namespace

ResidualProbeWriter::ResidualProbeWriter(std::string path, int every) : path_(std::move(path)), every_(every) {
  if (every < 1) throw Error("probe interval must be >= 1, got " + std::to_string(every));
}

ResidualProbeWriter::~ResidualProbeWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void ResidualProbeWriter::open(int first_step) {
  std::string kept = io::csv_line(columns());
  if (first_step > 0 && std::filesystem::exists(path_)) {  // a resumed run: keep what earlier steps wrote
    const std::vector<io::CsvRecord> records = io::read_csv(path_);
    if (!records.empty() && records.front().line == 1 && records.front().fields == columns())
      for (size_t r = 1; r < records.size(); ++r)
        if (std::atol(records[r].fields.front().c_str()) < first_step) io::append_csv_line(kept, records[r].fields);
  }
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) throw Error(path_ + ": cannot write: " + std::strerror(errno));
  std::fputs(kept.c_str(), file_);
}

void ResidualProbeWriter::operator()(Trainer& trainer) {
  const int step = trainer.steps_done();
  const RunConfig& config = trainer.config();
  if (step % every_ != 0 && step != config.steps) return;
  if (file_ == nullptr) open(step);
  if (!have_batch_) {
    const TextTask* text = trainer.task().text();
    TaskStream probe_task = make_task_stream(config, probe_seed(config.seed), text ? text->shared_tokens() : nullptr);
    probe_task.next(batch_, trainer.shard_batch());  // the size of the trainer's activations
    have_batch_ = true;
  }
  // The trainer's own activations: its step has run its backward, so they are free until the next step.
  Activations<float>& acts = trainer.activations();
  trainer.model().forward_hidden(acts, batch_.inputs.data());
  const ResidualNorms norms = residual_norms(acts, config.model.width);
  std::string rows;
  for (size_t l = 0; l < norms.mean_token_norm.size(); ++l)
    io::append_csv_line(rows, {std::to_string(step), std::to_string(l), io::csv_number(norms.mean_vector_norm[l]),
                               io::csv_number(norms.mean_token_norm[l])});
  std::fputs(rows.c_str(), file_);
  if (std::fflush(file_) != 0) throw Error(path_ + ": write failed: " + std::strerror(errno));
  if (io::EventFileWriter* events = trainer.event_writer(); events != nullptr && events->takes(step))
    events->scalars(step, tensorboard_scalars(trainer, norms));
}

std::vector<std::pair<std::string, double>> ResidualProbeWriter::tensorboard_scalars(Trainer& trainer,
                                                                                     const ResidualNorms& norms) {
  auto numbered = [](const char* prefix, size_t i) {
    char name[64];
    std::snprintf(name, sizeof name, "%s%02zu", prefix, i);
    return std::string(name);
  };
  std::vector<std::pair<std::string, double>> values;
  for (size_t l = 0; l < norms.mean_token_norm.size(); ++l) {
    values.emplace_back(numbered("stream/mean_vector_norm/layer_", l), norms.mean_vector_norm[l]);
    values.emplace_back(numbered("stream/mean_token_norm/layer_", l), norms.mean_token_norm[l]);
  }
  if (trainer.steps_done() > 0) {  // the gradient of the last step (after clipping: the one its update used)
    std::vector<double> sum_sq(trainer.config().model.layers + 1, 0.0);
    for (const ParameterGradNorm& p : parameter_grad_norms(trainer.model())) sum_sq[p.block] += p.norm * p.norm;
    for (size_t b = 1; b < sum_sq.size(); ++b) values.emplace_back(numbered("grad_norm/block_", b), std::sqrt(sum_sq[b]));
  }
  return values;
}

}  // namespace blocklab::probe
