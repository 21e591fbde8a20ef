#include "probe/curvature_run.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "io/checkpoint.h"
#include "io/csv.h"
#include "io/safetensors.h"
#include "train/run.h"
#include "util/error.h"

namespace blocklab::probe {

Batch curvature_batch(const RunConfig& config, uint64_t seed, int batch_size, const TextTask* text) {
  if (batch_size < 1) throw Error("the curvature batch needs at least one sequence");
  TaskStream stream = make_task_stream(config, seed, text ? text->shared_tokens() : nullptr);
  Batch b;
  stream.next(b, batch_size);
  return b;
}

Batch batch_from_tokens(const RunConfig& config, const io::IntArray& tokens, const std::string& what) {
  if (tokens.shape.size() != 2)
    throw Error(what + ": token ids must have shape (batch, sequence), got rank " + std::to_string(tokens.shape.size()));
  const int64_t B = tokens.shape[0], S = tokens.shape[1];
  const int V = config.model.vocab;
  if (B < 1 || S < 2) throw Error(what + ": needs at least one sequence of at least 2 tokens");
  if (config.is_sequence_task() && S != 2 * config.copy_len)
    throw Error(what + ": the " + config.task + " task's sequences have 2n = " + std::to_string(2 * config.copy_len) +
                " tokens, the file " + std::to_string(S));
  if (!config.is_sequence_task() && S - 1 > config.model.seq_len)
    throw Error(what + ": sequences of " + std::to_string(S) + " tokens; the model reads at most " +
                std::to_string(config.model.seq_len) + " (+1 for the last target)");
  if (B > (int64_t{1} << 20)) throw Error(what + ": too many sequences (" + std::to_string(B) + ")");
  const int T = static_cast<int>(S - 1);
  Batch b;
  b.resize(static_cast<int>(B), T);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t c = 0; c < S; ++c) {
      const int64_t id = tokens.values[r * S + c];
      if (id < 0 || id >= V)
        throw Error(what + ": token id " + std::to_string(id) + " at (" + std::to_string(r) + ", " + std::to_string(c) +
                    ") is outside the vocabulary [0, " + std::to_string(V) + ")");
      if (c < T) b.inputs[r * T + c] = static_cast<int32_t>(id);
      if (c > 0) b.targets[r * T + c - 1] = static_cast<int32_t>(id);
    }
  for (int64_t r = 0; r < B; ++r)
    for (int t = 0; t < T; ++t)
      b.loss_mask[r * T + t] = config.is_sequence_task() ? (t >= config.copy_len - 1 ? 1 : 0) : 1;
  return b;
}

double next_learning_rate(const RunConfig& config, int step) {
  return config.make_schedule().at(std::min(step + 1, std::max(config.steps, 1)));
}

RunWeights load_run_weights(const std::string& run_dir, int checkpoint_step) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) throw Error(run_dir + ": no such run directory");
  const fs::path config_path = fs::path(run_dir) / "config.json";
  if (!fs::is_regular_file(config_path, ec))
    throw Error(run_dir + ": not a run directory (no config.json; give the --out of a blocklab train run)");
  RunWeights w;
  w.config = read_config_json(config_path.string());
  resolve(w.config);
  w.config.out = run_dir;
  const std::vector<io::CheckpointRef> checkpoints = io::list_checkpoints(run_dir);
  fs::path chosen;
  if (checkpoint_step >= 0) {
    for (const io::CheckpointRef& c : checkpoints)
      if (c.step == checkpoint_step) chosen = c.path;
    if (chosen.empty()) {
      std::string steps;
      for (const io::CheckpointRef& c : checkpoints) steps += (steps.empty() ? "" : ", ") + std::to_string(c.step);
      throw Error(run_dir + ": no checkpoint at step " + std::to_string(checkpoint_step) +
                  (steps.empty() ? std::string(" (the run has no checkpoints)") : " (checkpoints at steps " + steps + ")"));
    }
  } else if (!checkpoints.empty()) {
    chosen = checkpoints.back().path;
  }
  if (!chosen.empty()) {
    Trainer trainer(w.config);
    trainer.load_checkpoint(chosen);
    w.params.assign(trainer.model().params().begin(), trainer.model().params().end());
    if (is_adam(w.config.optimizer.kind)) {  // the preconditioner is Adam's: other optimizers have none
      const std::span<const float> v = trainer.optimizer().state("adam.v");
      w.adam_v.assign(v.begin(), v.end());
      w.adam_steps = trainer.optimizer().steps_taken();
    }
    w.step = trainer.steps_done();
    w.source = chosen.string();
    return w;
  }
  const fs::path final_model = fs::path(run_dir) / "model.safetensors";
  if (!fs::is_regular_file(final_model, ec))
    throw Error(run_dir + ": holds no saved weights (no complete checkpoint, no model.safetensors: trained with --no-weights, or not finished)");
  Model<float> model(w.config.model);
  io::SafetensorsReader reader(final_model.string());
  reader.verify_checksums();  // Error naming a damaged tensor
  for (const ParamSpec& s : model.table().specs()) reader.read(reader.at(s.name), model.params().subspan(s.offset, s.numel));
  w.params.assign(model.params().begin(), model.params().end());
  if (auto it = reader.metadata().find("step"); it != reader.metadata().end()) w.step = std::atoi(it->second.c_str());
  w.source = final_model.string();
  return w;
}

std::vector<std::string> curvature_columns(int layers) {
  std::vector<std::string> c = {"step",    "lr",        "loss",  "sharpness", "preconditioned_sharpness",
                                "edge_gd", "edge_adam", "trace", "converged", "preconditioned_converged"};
  for (int l = 1; l <= layers; ++l) c.push_back("block_" + std::to_string(l));
  return c;
}

CurvatureRecorder::CurvatureRecorder(std::string path, int every, CurvatureOptions options, int batch)
    : path_(std::move(path)), every_(every), options_(std::move(options)), batch_size_(batch) {
  if (every < 1) throw Error("curvature interval must be >= 1, got " + std::to_string(every));
}

CurvatureRecorder::~CurvatureRecorder() {
  if (file_ != nullptr) std::fclose(file_);
}

void CurvatureRecorder::open(int first_step, int layers) {
  const std::vector<std::string> columns = curvature_columns(layers);
  std::string kept = io::csv_line(columns);
  if (first_step > 0 && std::filesystem::exists(path_)) {  // a resumed run: keep what earlier steps wrote
    const std::vector<io::CsvRecord> records = io::read_csv(path_);
    if (!records.empty() && records.front().line == 1 && records.front().fields == columns)
      for (size_t r = 1; r < records.size(); ++r)
        if (std::atol(records[r].fields.front().c_str()) < first_step) io::append_csv_line(kept, records[r].fields);
  }
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) throw Error(path_ + ": cannot write: " + std::strerror(errno));
  std::fputs(kept.c_str(), file_);
}

void CurvatureRecorder::operator()(Trainer& trainer) {
  const int step = trainer.steps_done();
  const RunConfig& config = trainer.config();
  if (step % every_ != 0 && step != config.steps && std::find(extra_.begin(), extra_.end(), step) == extra_.end()) return;
  if (file_ == nullptr) open(step, config.model.layers);
  if (!have_batch_) {
    batch_ = curvature_batch(config, curvature_batch_seed(config.seed), batch_size_ > 0 ? batch_size_ : config.batch,
                             trainer.task().text());
    have_batch_ = true;
  }
  CurvatureLoss loss(config.model, std::span<const float>(trainer.model().params()), batch_);
  // The preconditioned sharpness is Adam's (adam, adamw); other optimizers leave its column empty.
  const bool have_adam = is_adam(config.optimizer.kind);
  const AdamMoments adam{have_adam ? trainer.optimizer().state("adam.v") : std::span<float>(),
                         trainer.optimizer().steps_taken(), config.optimizer.beta1, config.optimizer.beta2,
                         config.optimizer.eps};
  const CurvatureResult r = measure_curvature(loss, have_adam ? &adam : nullptr, options_);
  const double lr = next_learning_rate(config, step);
  std::vector<std::string> row = {std::to_string(step),
                                  io::csv_number(lr),
                                  io::csv_number(r.loss),
                                  io::csv_number(r.top[0]),
                                  r.preconditioned ? io::csv_number(*r.preconditioned) : "",
                                  lr > 0 ? io::csv_number(2 / lr) : "",
                                  lr > 0 ? io::csv_number(adam_edge(config.optimizer.beta1, lr)) : "",
                                  r.trace ? io::csv_number(r.trace->value) : "",
                                  r.converged ? "1" : "0",
                                  r.preconditioned ? (r.preconditioned_converged ? "1" : "0") : ""};
  for (int l = 0; l < config.model.layers; ++l)
    row.push_back(l < static_cast<int>(r.per_block.size()) ? io::csv_number(r.per_block[l]) : "");
  std::string line;
  io::append_csv_line(line, row);
  std::fputs(line.c_str(), file_);
  if (std::fflush(file_) != 0) throw Error(path_ + ": write failed: " + std::strerror(errno));
}

}  // namespace blocklab::probe
