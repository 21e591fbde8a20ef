#pragma once
// Problem 10: how the residual stream grows.
//
// (a) The random-walk model: a start vector of length 1, then L blocks that each add a vector of
//     length 1 in a uniformly random direction (D dims). Independent directions add in squares, so
//     after L blocks the length is about sqrt(L+1), and block l changes the stream by about
//     1/|h^(l-1)| ~ 1/sqrt(l) of its length.
// (b) The stream of a real model (probe/residual_norms.h) at initialization, and of training runs
//     that wrote residual.csv (blocklab train --probe-every N), against that sqrt(L+1).
//
// Files in OUT:
//   residual_walk.csv        depth,mean_length,sqrt_depth_plus_1,mean_relative_change
//   residual_walk.{png,svg}  mean length vs sqrt(L+1); relative change per block
//   residual_init.csv        placement,seed,layer,mean_vector_norm,mean_token_norm (models at init)
//   residual_probe.{png,svg} per-token norm relative to the embeddings, and the mean token vector's
//                            norm, per layer, at init and at the probed training steps
#include <string>
#include <vector>

#include "report/lang.h"
#include "experiments/common.h"
#include "probe/residual_norms.h"
#include "report/plot.h"
#include "train/run_config.h"

namespace blocklab::experiments {

struct RandomWalkOptions {
  int dim = 256;
  int trials = 2000;
  std::vector<int> depths = {1, 4, 16, 36};
  uint64_t seed = 0;
};

struct RandomWalkResult {
  std::vector<int> depths;                    // as asked
  std::vector<double> mean_length;            // [l], l = 0..max depth (mean over trials of |h^(l)|)
  std::vector<double> mean_relative_change;   // [l], l >= 1: mean of |h^(l) - h^(l-1)| / |h^(l-1)|; [0] = NaN
  double length_at(int depth) const { return mean_length.at(depth); }
};

// Throws Error for dim < 1, trials < 1, an empty depth list or a depth < 1.
RandomWalkResult simulate_random_walk(const RandomWalkOptions& options);

struct InitResidualProbe {
  NormPlacement placement;
  uint64_t seed;
  probe::ResidualNorms norms;
};

// One training run's residual.csv: the norms per probed step.
struct RunResidualProbe {
  std::string dir, label;  // label: "Pre-LN, no warm-up, seed 0" from the run's config.json
  bool pre = false;        // a Pre-LN run (drawn in its own hue)
  std::vector<int> steps;
  std::vector<probe::ResidualNorms> norms;  // parallel to steps
};

// Reads RUN/residual.csv (and RUN/config.json for the label). Throws Error when missing or malformed.
RunResidualProbe read_residual_probe(const std::string& run_dir, report::Lang lang = report::Lang::En);

// The stream norms of a freshly initialised model of `config` (its placement and seed), on the first
// batch of its data stream. config must be resolve()d.
probe::ResidualNorms residual_norms_at_init(const RunConfig& config);

struct ResidualOptions {
  RandomWalkOptions walk;
  bool probe_init = true;  // also probe models at initialization:
  RunConfig base;          //   model, task, batch (placement and seed come from the lists)
  std::vector<NormPlacement> placements = {NormPlacement::Post, NormPlacement::Pre};
  std::vector<uint64_t> seeds = {0};
  std::vector<std::string> runs;  // training run directories holding residual.csv
  std::string out;
  report::Lang lang = report::Lang::En;   // of the figures' text
};

struct ResidualResult {
  RandomWalkResult walk;
  std::vector<InitResidualProbe> init;
  std::vector<RunResidualProbe> trained;
  report::PlotResult walk_figure, probe_figure;  // probe_figure: only when there is something to show
};

ResidualResult run_residual(const ResidualOptions& options, const Log& log = {});

report::PlotFigure walk_figure(const RandomWalkResult& walk, const RandomWalkOptions& options, report::Lang lang = report::Lang::En);
report::PlotFigure residual_probe_figure(const std::vector<InitResidualProbe>& init,
                                     const std::vector<RunResidualProbe>& trained, const std::string& model_text,
                                     report::Lang lang = report::Lang::En);

// The source's measurement of a trained model (Qwen3-VL-4B language model): norm of the mean prompt-token
// vector at layers 1, 20, 35. Shown for reference; blocklab does not run that model.
struct SourcePoint {
  int layer;
  double value;
};
const std::vector<SourcePoint>& qwen_mean_vector_norms();

}  // namespace blocklab::experiments
