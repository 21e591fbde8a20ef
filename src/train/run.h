#pragma once
// A training run on disk: validates the config, prepares the output directory, trains, and writes
//   DIR/config.json   the fully resolved config (written before the first step)
//   DIR/metrics.csv   step,loss,lr,grad_norm  (one row per step, flushed as it goes)
//   DIR/summary.json  final/min loss and timing (written at the end)
#include <functional>
#include <string>

#include "train/run_config.h"
#include "train/trainer.h"

namespace blocklab {

struct RunSummary {
  int steps = 0;
  double first_loss = 0, final_loss = 0, min_loss = 0;
  int min_loss_step = 0;
  double seconds = 0;
  double ms_per_step() const { return steps > 0 ? 1000.0 * seconds / steps : 0.0; }
};

// Creates dir if needed. Throws Error when it cannot be created or written, or when it already holds a
// run (config.json or metrics.csv) and overwrite is false. Writes nothing else.
void prepare_run_dir(const std::string& dir, bool overwrite);

using StepObserver = std::function<void(const StepResult&)>;

// config is resolved and validated here, before anything is written.
RunSummary train_run(RunConfig config, bool overwrite, const StepObserver& observer = {});

}  // namespace blocklab
