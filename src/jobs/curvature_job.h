#pragma once
// The curvature of a training run's loss at its saved weights (probe/curvature.h), as one library call:
// `blocklab curvature`, the Python curvature() and the browser page ask it the same question and get the
// same answer, down to the JSON keys.
//   weights   a checkpoint (by step, else the newest that verifies) or the run's model.safetensors
//   batch     drawn from the run's task (the seed curvature_batch_seed(run seed) unless given, the run's batch
//             size unless given), or read from a token file (probe/curvature_run.h)
//   estimate  sharpness (top k), Adam's preconditioned sharpness (with the checkpoint's Adam state), the
//             Hutchinson trace, per-block sharpness; with the stability thresholds of the next step's rate:
//             edge_gd = 2 / lr, edge_adam = (2 + 2 beta1) / ((1 - beta1) lr)
// The memory the double-precision model and Lanczos's basis need is checked before they are allocated.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "probe/curvature.h"

namespace blocklab::jobs {

// What is about to be computed, for a front end's progress line and expected time.
struct CurvatureStart {
  std::string weights;             // the checkpoint directory or weights file
  int step = 0;                    // training steps done at those weights
  int sequences = 0, tokens = 0;   // the batch: sequences of `tokens` ids (inputs and targets overlap by all but one)
  int threads = 0;
  double gradient_seconds = 0;     // one double-precision gradient, as measured on the batch
  long gradients_at_most = 0;      // what the estimate needs at most (Lanczos usually stops sooner)
};

struct CurvatureJob {
  std::string run_dir;
  int checkpoint = -1;                 // the checkpoint at this step; -1: the newest, else model.safetensors
  std::optional<uint64_t> batch_seed;  // draw the batch with this seed [curvature_batch_seed(run seed)]
  std::string tokens;                  // or read it from this .npy / .safetensors file (not both)
  int batch = 0;                       // sequences of the drawn batch (0: the run's batch)
  probe::CurvatureOptions options;     // the estimators' settings; options.progress sees every gradient
  int threads = 0;                     // 0: all cores
  std::function<void(const CurvatureStart&)> on_start;  // once, after the first gradient
};

struct CurvatureReport {
  probe::CurvatureResult result;
  nlohmann::json batch;  // source ("task": task, seed; "file": path), sequences, tokens
  std::string weights;
  int step = 0;
  double lr = 0, edge_gd = 0, edge_adam = 0;  // the next update's rate and the thresholds
  int threads = 0;
  ModelConfig model;  // the run's model, for a title line
};

// Throws Error naming the problem: a bad setting (top, max_iter, block_max_iter < 1, trace_samples < 0, tol <= 0,
// order not 2 or 4, a batch seed and a token file both given), the run's weights (probe::load_run_weights), the
// token file (probe::batch_from_tokens), or too little memory.
CurvatureReport curvature_job(const CurvatureJob& job);

// The report as `blocklab curvature --json` prints it: sharpness, top, preconditioned_sharpness, trace,
// trace_std_error, trace_samples, per_block, method, batch, weights, step, loss, lr, edge_gd, edge_adam,
// iterations, converged, preconditioned_converged, gradients, seconds, threads; a non-finite number is null.
nlohmann::json to_json(const CurvatureReport& report);

}  // namespace blocklab::jobs
