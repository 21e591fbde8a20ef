#pragma once
// Experiment A (Xiong et al. 2020, Fig. 3 a/b): the gradient norm of every parameter tensor at
// initialization, per block, for each norm placement and seed. The model is initialised from the seed
// and fed the first K batches of the same data stream its training run would see; the gradient of
// each batch is computed from the initial weights (no update), and each tensor's Frobenius norm is
// averaged over the K batches.
//
// Files in OUT:
//   gradnorm.csv          placement,seed,block,parameter,grad_norm   (block 1..L; empty outside the blocks)
//   gradnorm_fc2.csv      placement,block,mean,seed_S...   the MLP second-layer weight, per block
//   gradnorm.{png,svg,gp} that profile: seeds thin, their mean thick, one colour per placement
#include <string>
#include <vector>

#include "experiments/common.h"
#include "probe/grad_norms.h"
#include "report/plot.h"
#include "train/run_config.h"

namespace blocklab::experiments {

struct GradNormOptions {
  RunConfig base;  // model, task, batch and threads; base.seed and base.out are not used
  std::vector<NormPlacement> placements = {NormPlacement::Post, NormPlacement::Pre};
  std::vector<uint64_t> seeds = {0, 1, 2};
  int batches = 1;  // K
  std::string out;
};

struct GradNormProfile {  // blocks.N.mlp.fc2.weight, N = 1..L
  NormPlacement placement;
  std::vector<std::vector<double>> per_seed;  // [seed index][block - 1]
  std::vector<double> mean;                   // [block - 1], mean over seeds
  double last_over_first() const { return mean.back() / mean.front(); }
};

struct GradNormResult {
  std::vector<GradNormProfile> profiles;  // one per placement, in the order asked
  io::PlotResult figure;
};

// Per-parameter gradient norms at initialization of one config (its placement and seed), averaged over
// the first `batches` batches of its data stream. config must be resolve()d.
std::vector<probe::ParameterGradNorm> gradnorms_at_init(const RunConfig& config, int batches);

// Checks the options (Error on empty lists, batches < 1, a bad config) before writing anything.
GradNormResult run_gradnorm(const GradNormOptions& options, const Log& log = {});

// The figure only (used by run_gradnorm and the report).
io::PlotFigure gradnorm_figure(const std::vector<GradNormProfile>& profiles, const RunConfig& base, int batches);

}  // namespace blocklab::experiments
