#pragma once
// Every experiment of the source section in one go, and a report that puts the source's numbers next
// to the measured ones:
//   problem 9     standardize/          per-row and per-column standardization of the score table
//   problem 10    residual/             random-walk growth, stream norms at init and during training
//   experiment A  gradnorm/batch_B/     gradient norms per block at initialization, per batch size B
//   experiment B  sweep/                {Post-LN, Pre-LN} x {no warm-up, warm-up} x seeds
//   (full only)   depth_post/, depth_pre/   Post-LN with warm-up and Pre-LN without it at several depths
//   depth map     depthmap/             every placement x depths x {no warm-up, warm-up} (optional)
//   stability map stabilitymap/         {Post-LN, Pre-LN} x {adam, adam+v0} x warm-up x lr x seeds, the quick map's
//                                       grid (experiments/stabilitymap.h; optional)
//   curvature     curvature/            the 2x2 grid's first steps with Adam's preconditioned sharpness against
//                                       38/lr(t), and per-block sharpness at init (experiments/curvature_grid.h)
//   problem 11    block_forms.{png,svg} the two block forms; the 2x2 grid is sweep/loss.{png,svg}
//   OUT/report.md, OUT/report.html (self-contained: every figure embedded)
// The full version uses the source's settings (24 blocks x width 128, Adam 1e-3, 1,200 steps, warm-up
// 400, 3 seeds, batch 32); the quick version shrinks the training runs so that all of it finishes in a
// few minutes on 2 cores, and the report says so. Re-running continues an interrupted reproduction.
//
// Four steps, each usable on its own: plan (what runs, from the options) -> measure (runs it, returns
// the measurements) -> judge_claims (the source's numbers next to the measured ones, with a verdict per
// row, from the measurements alone) -> write_reproduce_report (report.md and report.html).
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/lang.h"
#include "experiments/common.h"
#include "experiments/curvature_grid.h"
#include "experiments/depthmap.h"
#include "experiments/gradnorm.h"
#include "experiments/residual.h"
#include "experiments/stabilitymap.h"
#include "experiments/standardize.h"
#include "experiments/sweep.h"
#include "report/plot.h"
#include "train/run_config.h"

namespace blocklab::experiments {

struct ReproduceOptions {
  bool quick = false;
  std::string out;
  int jobs = 0;        // training runs at a time (0 = cores)
  std::string worker;  // the blocklab executable for training runs ("" = the running program)
  report::Lang lang = report::Lang::En;  // of the report and its figures; not stored in experiment.json (the runs do
                                 // not depend on it), so a finished directory can be reported in either

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

  // Depth map (experiments/depthmap.h): every placement; the quick map, or the source's width at 6/12/24
  // blocks with one seed. Its out, jobs and worker are set from the options above.
  bool depthmap = true;
  DepthMapOptions depthmap_options;

  // Stability map (experiments/stabilitymap.h): the quick map in both versions, since the map's own full
  // preset would add about ten hours on 2 cores. Its out, jobs, worker and lang are set from the options above.
  bool stabilitymap = true;
  StabilityMapOptions stabilitymap_options;

  // Curvature: the 2x2 grid's first steps (seed 0) with the preconditioned sharpness recorded; its out and
  // lang are set from the options above.
  bool curvature = true;
  CurvatureGridOptions curvature_options;

  // Problem 10
  RandomWalkOptions walk;
  RunConfig residual_model;  // probed at initialization

  // > 0: every training run was cut to at most this many steps (cap_training_steps); the report says so.
  int max_steps = 0;
};

// The settings of the full or the quick reproduction.
ReproduceOptions reproduce_preset(bool quick);
// Cuts every training run of `options` to at most `max_steps` steps (experiment B, the depth sweep, the depth map,
// the curvature grid), and the probe and curvature intervals with them: a check that the whole pipeline runs on a
// machine or build, in minutes even under emulation. The runs are then too short for the report's verdicts to mean
// anything, and its header says so. Error unless max_steps >= 1.
void cap_training_steps(ReproduceOptions& options, int max_steps);

// The settings stored in OUT/experiment.json (a re-run must match them).
nlohmann::json reproduce_settings(const ReproduceOptions& options);

// ---- plan: what runs, from the options ----------------------------------------------------------

struct ReproducePlan {
  std::vector<GradNormOptions> gradnorm;  // experiment A, one per batch size
  SweepOptions grid;                      // experiment B: {Post-LN, Pre-LN} x {no warm-up, warm-up} x seeds
  std::vector<SweepOptions> depth;        // Post-LN with warm-up, then Pre-LN without (empty: no depth sweep)
  ResidualOptions residual;               // problem 10; its trained runs are added once experiment B ran
  std::optional<DepthMapOptions> depthmap;  // the depth map (none when options.depthmap is false)
  std::optional<StabilityMapOptions> stabilitymap;  // none when options.stabilitymap is false
  std::optional<CurvatureGridOptions> curvature;  // none when options.curvature is false
};

// Checks every option set (Error on the first bad value) and writes nothing.
ReproducePlan plan_reproduce(const ReproduceOptions& options);

// ---- run: the measurements ------------------------------------------------------------------------

struct ReproduceMeasurements {
  ScoreTable scores, per_row, per_column;   // problem 9
  std::map<int, GradNormResult> gradnorms;  // experiment A, by batch size
  SweepResult sweep;                        // experiment B
  std::vector<SweepResult> depth;           // as plan.depth
  std::optional<DepthMapResult> depthmap;   // as plan.depthmap
  std::optional<StabilityMapResult> stabilitymap;  // as plan.stabilitymap
  std::optional<CurvatureGridResult> curvature;  // as plan.curvature
  ResidualResult residual;                  // problem 10
  report::PlotResult block_forms;               // problem 11
  std::map<std::string, double> seconds;    // wall time per part ("problem 9", "experiment A", ...)
  double total_seconds = 0;                 // this invocation, up to the end of the measurements
};

// Claims OUT (Error when it holds something else), then runs every part of the plan. Throws
// SweepInterrupted when interrupted, and Error when training runs failed.
ReproduceMeasurements measure_reproduce(const ReproduceOptions& options, const ReproducePlan& plan, const Log& log = {},
                                        const SweepProgressFn& progress = {});

// ---- claims: the source's numbers next to the measured ones ---------------------------------------

// The source's numbers (the textbook section, as listed in docs/source.md) and those of the independent
// PyTorch implementation of the same setup, in one place.
struct ReferenceGradNorm {  // PyTorch reference, mean of 3 seeds, fc2 gradient norm at blocks 1 and 24
  int batch;
  double post_first, post_last, pre_first, pre_last;
};
struct ReferenceDepth {  // PyTorch reference, batch 16, seed 0, loss at step 600
  int layers;
  std::string post_warmup, pre_no_warmup;
};
struct SourceNumbers {
  // Experiment A: fc2 gradient norm at the last block, at initialization.
  double post_last_block = 1.07, pre_last_block = 0.22;
  // Experiment B (24 blocks, 1,200 steps, 3 seeds).
  std::vector<double> post_no_warmup_final = {4.1617, 4.1616, 4.1615};  // never started: ln 64 = 4.159
  std::string post_warmup_losses = "4.0 / 2.84 / 0.01-0.08";            // at steps 100 / 200 / 300
  std::string post_warmup_outcomes =
      "3 learned during warm-up; 1 of them collapsed after it (0.0104 at step 300, 4.32 at step 460)";
  int post_failed = 4, post_runs = 6;                   // Post-LN runs that did not learn
  std::pair<double, double> pre_no_warmup_at_100 = {0.16, 0.71};  // loss range over the seeds
  int pre_no_warmup_step = 200;                         // every Pre-LN seed is below ...
  double pre_no_warmup_below = 0.007;                   // ... this loss at that step
  double pre_no_warmup_final = 0.0003;                  // about
  // Problem 9: the score table standardized per student (A and C) and per subject over A and B.
  std::vector<double> per_row_a = {1.2247, 0, -1.2247}, per_row_c = {1.2247, -1.2247, 0};
  double per_column_a = 1, per_column_b = -1;
  // Problem 10: random walk of unit steps from a unit start vector.
  std::vector<int> walk_depths = {1, 4, 16, 36};
  std::vector<double> walk_lengths = {1.414, 2.235, 4.120, 6.067};
  int walk_change_block = 36;  // the relative change block 36 makes: about 1/6
  double walk_change = 1.0 / 6;
  // Independent PyTorch implementation (docs/source.md).
  std::vector<ReferenceGradNorm> reference_gradnorms = {
      {4, 1.31, 1.22, 0.77, 0.32}, {8, 0.91, 1.01, 0.59, 0.25}, {16, 0.76, 0.86, 0.49, 0.21}, {32, 0.61, 0.77, 0.45, 0.18}};
  std::vector<ReferenceDepth> reference_depth = {
      {6, "0.0014", "0.0010"}, {12, "0.75 (still falling)", "0.0009"}, {18, "4.11", "0.0010"}, {24, "4.17", "below 0.003"}};
  // The trained Qwen3-VL-4B's mean prompt-token vector: experiments/residual.h, qwen_mean_vector_norms().
};
const SourceNumbers& source_numbers();

enum class Verdict {
  Agrees,         // the measurement reproduces the claim
  Partly,         // part of the claim holds
  Differs,        // it does not
  NotComparable,  // (quick version) not measured under the source's settings
  None,           // no verdict: a value to compare by eye, or a difference in percent
};
std::string to_string(Verdict);

struct ClaimRow {
  std::string id;        // stable key, e.g. "B.post_no_warmup.final_loss"
  std::string claim;     // what the source says, as the table's first column
  std::string source;    // the source's value
  std::string measured;  // this run's value
  Verdict verdict = Verdict::None;
  std::string verdict_text;  // as printed: "agrees (never started)", "-12% (scale depends on the batch)", ...
};

// The claims table, in report order, computed from the measurements alone (no files are read).
// Rows whose measurements are missing (no gradient profiles of both placements, no random walk) are
// left out.
std::vector<ClaimRow> judge_claims(const ReproduceOptions& options, const ReproduceMeasurements& measurements);
// The row with that id; nullptr when absent.
const ClaimRow* find_claim(const std::vector<ClaimRow>& rows, const std::string& id);

// ---- report -----------------------------------------------------------------------------------------

struct ReproduceResult {
  std::string report_md, report_html;
  double seconds = 0;
  std::vector<ClaimRow> claims;
};

// Writes OUT/report.md and the self-contained OUT/report.html.
ReproduceResult write_reproduce_report(const ReproduceOptions& options, const ReproducePlan& plan,
                                       const ReproduceMeasurements& measurements, const std::vector<ClaimRow>& claims);

// plan -> measure -> judge -> report. Throws Error on bad options or an output directory that holds
// something else (before any work), SweepInterrupted when interrupted, and Error when training runs failed.
ReproduceResult run_reproduce(const ReproduceOptions& options, const Log& log = {},
                              const SweepProgressFn& progress = {});

// Problem 11's figure of the two block forms (Post-LN and Pre-LN), drawn with gnuplot objects.
report::PlotFigure block_forms_figure(report::Lang lang = report::Lang::En);

}  // namespace blocklab::experiments
