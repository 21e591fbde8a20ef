#pragma once
// One training run in memory: model, optimizer, data stream and schedule, advanced one step at a time.
#include <cstdint>

#include "data/copy_task.h"
#include "model/model.h"
#include "train/optimizer.h"
#include "train/run_config.h"

namespace blocklab {

struct StepResult {
  int step = 0;            // 1-based index of the update just taken
  double loss = 0;         // mean loss of this step's batch, before the update
  double lr = 0;           // learning rate used for the update
  double grad_norm = 0;    // global gradient norm before clipping
  double seconds = 0;      // wall time of the step
};

class Trainer {
 public:
  // config must have been resolve()d. Initialises the weights from config.seed.
  explicit Trainer(const RunConfig& config);

  StepResult step();
  int steps_done() const { return steps_done_; }

  const RunConfig& config() const { return config_; }
  Model<float>& model() { return model_; }
  Adam<float>& optimizer() { return optimizer_; }
  CopyTask& task() { return task_; }

  // The data stream's seed, derived from the run seed so that init and data never share a stream.
  static uint64_t data_seed(uint64_t seed) { return seed ^ 0x5eed'da7a'5eed'da7aULL; }

 private:
  RunConfig config_;
  Model<float> model_;
  Adam<float> optimizer_;
  CopyTask task_;
  Batch batch_;
  Schedule schedule_;
  int steps_done_ = 0;
};

}  // namespace blocklab
