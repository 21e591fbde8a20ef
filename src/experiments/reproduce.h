#pragma once
// Every experiment of the source section in one go, and a report that puts the source's numbers next
// to the measured ones:
//   problem 9     standardize/          per-row and per-column standardization of the score table
//   problem 10    residual/             random-walk growth, stream norms at init and during training
//   experiment A  gradnorm/batch_B/     gradient norms per block at initialization, per batch size B
//   experiment B  sweep/                {Post-LN, Pre-LN} x {no warm-up, warm-up} x seeds
//   (full only)   depth_post/, depth_pre/   Post-LN with warm-up and Pre-LN without it at several depths
//   problem 11    block_forms.{png,svg} the two block forms; the 2x2 grid is sweep/loss.{png,svg}
//   OUT/report.md, OUT/report.html (self-contained: every figure embedded)
// The full version uses the source's settings (24 blocks x width 128, Adam 1e-3, 1,200 steps, warm-up
// 400, 3 seeds, batch 32); the quick version shrinks the training runs so that all of it finishes in a
// few minutes on 2 cores, and the report says so. Re-running continues an interrupted reproduction.
#include <string>
#include <vector>

#include "experiments/common.h"
#include "experiments/residual.h"
#include "experiments/sweep.h"
#include "io/plot.h"
#include "train/run_config.h"

namespace blocklab::experiments {

struct ReproduceOptions {
  bool quick = false;
  std::string out;
  int jobs = 0;        // training runs at a time (0 = cores)
  std::string worker;  // the blocklab executable for training runs ("" = the running program)

  // Experiment A
  RunConfig gradnorm_model;              // the model and task (batch is set per entry below)
  std::vector<int> gradnorm_batch_sizes;  // one measurement per batch size
  int gradnorm_main_batch = 16;           // the one drawn in the report
  int gradnorm_batches = 1;               // K batches averaged
  std::vector<uint64_t> seeds = {0, 1, 2};

  // Experiment B
  RunConfig train;           // model, task, batch, steps, lr of the 2x2 grid
  int warmup = 400;          // the "with warm-up" column
  int probe_every = 100;     // residual-stream probes during training
  // Depth sweep (empty: none): Post-LN with `warmup`, Pre-LN without, one seed
  std::vector<int> depth_layers;
  RunConfig depth_train;

  // Problem 10
  RandomWalkOptions walk;
  RunConfig residual_model;  // probed at initialization
};

// The settings of the full or the quick reproduction.
ReproduceOptions reproduce_preset(bool quick);
// The settings stored in OUT/experiment.json (a re-run must match them).
nlohmann::json reproduce_settings(const ReproduceOptions& options);

struct ReproduceResult {
  std::string report_md, report_html;
  double seconds = 0;
};

// Throws Error on bad options or an output directory that holds something else (before any work),
// SweepInterrupted when interrupted, and Error when training runs failed.
ReproduceResult run_reproduce(const ReproduceOptions& options, const Log& log = {},
                              const SweepProgressFn& progress = {});

// Problem 11's figure of the two block forms (Post-LN and Pre-LN), drawn with gnuplot objects.
io::PlotFigure block_forms_figure();

}  // namespace blocklab::experiments
