#pragma once
// Why warm-up works, seen through curvature: the 2 x 2 grid {Post-LN, Pre-LN} x {no warm-up, warm-up} trained
// for its first steps with Adam's preconditioned sharpness lambda_max(P^-1 H) recorded every few steps
// (train --curvature-every: probe/curvature_run.h), drawn on a log axis against Adam's stability threshold
// (2 + 2 beta1) / ((1 - beta1) lr(t)) = 38 / lr(t) of each run's schedule, the loss curves beneath on the same
// step axis; and the sharpness of each block's Hessian at initialization.
//   OUT/<placement>_warmup<W>/    a training run with curvature.csv (seed 0)
//   OUT/per_block_init.csv        placement,block,sharpness (lambda_max of H_ll at init, on the curvature batch)
//   OUT/curvature.{png,svg}, OUT/per_block_init.{png,svg}
// Re-running reuses finished runs (summary.json and curvature.csv present).
#include <map>
#include <string>
#include <vector>

#include "experiments/common.h"
#include "probe/curvature.h"
#include "report/lang.h"
#include "report/plot.h"
#include "train/run_config.h"

namespace blocklab::experiments {

struct CurvatureGridOptions {
  RunConfig base;       // model, task, lr, batch, seed; steps = the steps followed
  int warmup = 100;     // the warm-up column
  int every = 10;       // curvature every this many steps, and at steps 1, 2, 4, 8, ... below it
  int batch = 8;        // sequences of the curvature batch
  probe::CurvatureOptions curvature;  // Lanczos settings (per_block and trace are turned off during training)
  int block_max_iter = 20;            // per-block sharpness at init
  std::string out;
  report::Lang lang = report::Lang::En;
};

struct CurvatureGridRun {
  NormPlacement placement = NormPlacement::Post;
  int warmup = 0;
  std::string dir;
  std::vector<double> steps, lr, sharpness, preconditioned, edge_adam;  // curvature.csv rows
  std::vector<double> loss_steps, loss;                                  // metrics.csv
};

struct CurvatureGridResult {
  std::vector<CurvatureGridRun> runs;  // post/none, post/warmup, pre/none, pre/warmup
  std::map<NormPlacement, std::vector<double>> per_block_init;
  report::PlotResult figure, per_block_figure;
};

// Checks the options (Error) before anything runs.
void check_curvature_grid(const CurvatureGridOptions& options);
CurvatureGridResult run_curvature_grid(const CurvatureGridOptions& options, const Log& log = {});
report::PlotFigure curvature_grid_figure(const CurvatureGridResult& result, const CurvatureGridOptions& options);
report::PlotFigure per_block_init_figure(const CurvatureGridResult& result, report::Lang lang);

}  // namespace blocklab::experiments
