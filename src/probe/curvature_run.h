#pragma once
// Curvature of a training run (probe/curvature.h) at its saved weights or while it trains:
//   the batch: drawn from the run's task with its own seed (curvature_batch_seed(run seed) unless given), or
//              read from a token file: (batch, S) ids, inputs = [:, :S-1], targets = [:, 1:]; the copy and
//              reverse tasks need S = 2n and count the loss on the second half as training does, the text
//              task counts every position (S - 1 <= the model's sequence length)
//   curvature.csv (train --curvature-every N): every N steps, before the first and after the last,
//     step,lr,loss,sharpness,preconditioned_sharpness,edge_gd,edge_adam,trace,block_1..block_L
//   where lr is the learning rate of the next update, lr(step + 1) (at the last step, the last one's),
//   edge_gd = 2 / lr (gradient descent's stability threshold) and edge_adam = (2 + 2 beta1) / ((1 - beta1) lr)
//   (Adam's, for the preconditioned sharpness: 38 / lr for beta1 = 0.9). Preconditioned sharpness is empty at
//   step 0 (no optimizer state); the trace and per-block columns are empty where not asked for.
// The estimates use a double-precision copy of the weights and their own batch and random streams, so that
// recording them never changes a run's numbers.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/copy_task.h"
#include "io/npy.h"
#include "probe/curvature.h"
#include "train/trainer.h"

namespace blocklab::probe {

inline uint64_t curvature_batch_seed(uint64_t run_seed) { return run_seed ^ 0xc0de'ca7e'5eed'0b1dULL; }

// batch_size sequences from the run's task stream seeded with seed.
Batch curvature_batch(const RunConfig& config, uint64_t seed, int batch_size, const TextTask* text = nullptr);
// A batch from token ids (see above); throws Error naming `what` when the shape or an id does not fit.
Batch batch_from_tokens(const RunConfig& config, const io::IntArray& tokens, const std::string& what);

// The learning rate of the update after `step` updates (the last one's after the last step).
double next_learning_rate(const RunConfig& config, int step);
// (2 + 2 beta1) / ((1 - beta1) lr)
inline double adam_edge(double beta1, double lr) { return (2 + 2 * beta1) / ((1 - beta1) * lr); }

std::vector<std::string> curvature_columns(int layers);

// A run's saved weights and Adam's state: a checkpoint (by step, or the newest complete one), or, when the run
// has none, its final model.safetensors (no optimizer state: adam_steps 0).
struct RunWeights {
  RunConfig config;                  // the run's config.json, resolved
  std::vector<float> params;         // the parameter arena
  std::vector<float> adam_v;         // Adam's second moment (empty without optimizer state, or for non-Adam runs)
  int64_t adam_steps = 0;            // updates taken (the bias correction's t)
  int step = 0;                      // training steps done
  std::string source;                // the checkpoint directory or weights file
};
// Throws Error naming the problem: no run directory, no config.json, no such checkpoint (with the steps there
// are), a damaged checkpoint, no saved weights at all.
RunWeights load_run_weights(const std::string& run_dir, int checkpoint_step = -1);

class CurvatureRecorder {
 public:
  // Throws Error when every < 1. batch: sequences of the curvature batch (0: the run's batch).
  CurvatureRecorder(std::string path, int every, CurvatureOptions options, int batch = 0);
  ~CurvatureRecorder();
  CurvatureRecorder(const CurvatureRecorder&) = delete;
  CurvatureRecorder& operator=(const CurvatureRecorder&) = delete;

  // Also measures at these steps (e.g. densely over the first few).
  void also_at(std::vector<int> steps) { extra_ = std::move(steps); }
  // Measures when trainer.steps_done() is 0, a multiple of every, one of also_at's, or the run's last step. The first call
  // opens the file: at step 0 a new one; later (a resumed run) it keeps the rows of earlier steps.
  void operator()(Trainer& trainer);

 private:
  void open(int first_step, int layers);
  std::string path_;
  int every_;
  CurvatureOptions options_;
  int batch_size_ = 0;
  std::vector<int> extra_;
  std::FILE* file_ = nullptr;
  Batch batch_;
  bool have_batch_ = false;
};

}  // namespace blocklab::probe
