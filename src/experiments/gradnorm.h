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
//   gradnorm_FAMILY.{png,svg,gp}  one figure per parameter family (a block tensor without its block index,
//                         e.g. gradnorm_mlp.fc2.weight, gradnorm_norm1.weight), every placement that has it;
//                         log y axis when the values span two decades or more
//   gradnorm_summary.md   last block / first block of the fc2 weight's gradient norm, per placement
#include <string>
#include <vector>

#include "report/lang.h"
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
  report::Lang lang = report::Lang::En;  // of the fc2 figure's text (numbers and files do not depend on it)
};

struct GradNormProfile {  // blocks.N.mlp.fc2.weight, N = 1..L
  NormPlacement placement;
  std::vector<std::vector<double>> per_seed;  // [seed index][block - 1]
  std::vector<double> mean;                   // [block - 1], mean over seeds
  double last_over_first() const { return mean.back() / mean.front(); }
};

// One parameter family: blocks.N.<name> for every block N. A block without that tensor holds NaN.
struct GradNormFamily {
  std::string name;                       // "mlp.fc2.weight", "norm1.weight", "attn_omega", ...
  std::vector<GradNormProfile> profiles;  // the placements that have it, in the order asked
  report::PlotResult figure;                  // OUT/gradnorm_<name>
};

struct GradNormResult {
  std::vector<GradNormProfile> profiles;  // one per placement, in the order asked
  report::PlotResult figure;
  std::vector<GradNormFamily> families;   // in order of first appearance in the parameter tables
  std::string summary;                    // the markdown of gradnorm_summary.md
};

// Per-parameter gradient norms at initialization of one config (its placement and seed), averaged over
// the first `batches` batches of its data stream. config must be resolve()d.
std::vector<probe::ParameterGradNorm> gradnorms_at_init(const RunConfig& config, int batches);

// Checks the options (Error on empty lists, batches < 1, a bad config) before writing anything.
GradNormResult run_gradnorm(const GradNormOptions& options, const Log& log = {});

// The figure only (used by run_gradnorm and the report).
report::PlotFigure gradnorm_figure(const std::vector<GradNormProfile>& profiles, const RunConfig& base, int batches,
                               report::Lang lang = report::Lang::En);
// One family's figure: seeds thin, mean thick, one colour per placement.
report::PlotFigure gradnorm_family_figure(const GradNormFamily& family, const RunConfig& base, int batches);
// The markdown table of last block / first block of the fc2 profiles.
std::string gradnorm_summary(const std::vector<GradNormProfile>& profiles, const RunConfig& base,
                             const std::vector<uint64_t>& seeds, int batches);

// "blocks.12.mlp.fc2.weight" -> "mlp.fc2.weight"; "" for a name outside the blocks.
std::string parameter_family(const std::string& name);

}  // namespace blocklab::experiments
