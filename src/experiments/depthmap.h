#pragma once
// The depth map: placement x depth x warm-up x seeds, each run labelled (probe/outcome.h) and timed to
// its first step below 0.01. The runs are one sweep (experiments/sweep.h) over the axes
// norm_placement, layers, warmup, so the map is resumable and parallel like any sweep:
//
//   OUT/experiment.json        the map's settings; re-running the same map in OUT continues it
//   OUT/runs/                  the sweep: one `blocklab train` run per cell and seed, summary.csv, loss.*
//   OUT/depthmap.csv           one row per run: placement, depth, warmup, seed, outcome,
//                              first_step_below, final_loss, min_loss, seconds
//   OUT/depthmap.md            placements as rows, depths as columns, one table per warm-up
//   OUT/depthmap.{png,svg,gp}  the same as a heat map, one panel per warm-up
//   OUT/depthmap_stream.{png,svg,gp}  with --stream-every N: the residual stream's RMS by block at init and at
//                              the end, one curve per placement (report/stream_plot.h); depthmap.csv gains
//                              the stream columns
//
// Four steps: plan (the sweep, checked; writes nothing) -> estimate (FLOPs and a measured rate) ->
// run (the sweep, then the per-run rows) -> summarize (one cell per placement, depth, warm-up) -> write.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "report/lang.h"
#include "experiments/common.h"
#include "experiments/sweep.h"
#include "model/config.h"
#include "probe/outcome.h"
#include "probe/stream_probe.h"
#include "report/plot.h"
#include "train/run_config.h"

namespace blocklab::experiments {

struct DepthMapOptions {
  RunConfig base;                        // every key but norm_placement, layers, warmup, seed
  std::vector<NormPlacement> placements;  // rows
  std::vector<int> depths;                // columns (blocks)
  std::vector<int> warmups;               // one table / panel each
  std::vector<uint64_t> seeds;
  int jobs = 0;                           // runs at a time (0 = cores)
  std::string out;
  std::string worker;                     // the blocklab executable ("" = the running program)
  double poll_seconds = 0.25;
  bool quick = false;                     // for titles only
  report::Lang lang = report::Lang::En;           // of the figure, the tables and depthmap.md (not of the results)
};

// The full map (the source's model: width 128, batch 16, Adam 1e-3; depths 6-96, warm-up 0 and 400,
// 600 steps, seeds 0, 1, 2, every placement) or the quick one (the same but width 64, 8+8-token sequences,
// depths 4/8/16, seed 0 only).
DepthMapOptions depthmap_preset(bool quick);
nlohmann::json depthmap_settings(const DepthMapOptions& options);

// ---- plan ----------------------------------------------------------------------------------------

// The sweep behind the map (its out is OUT/runs). Throws Error, writing nothing, for an empty list, a
// repeated value, a depth or a warm-up out of range, or a config the engine refuses.
SweepOptions plan_depthmap(const DepthMapOptions& options);

// ---- estimate ------------------------------------------------------------------------------------

struct DepthMapEstimate {
  int runs = 0, runs_left = 0;         // runs_left: not finished in OUT yet
  double flops = 0, flops_left = 0;    // training_flops_per_step x steps, summed over the runs
  double gflops_per_second = 0;        // of one worker at its thread count
  int worker_threads = 1, jobs = 1;
  double worker_seconds = 0;           // flops_left / rate: the sum of the runs' training times
  double wall_seconds = 0;             // worker_seconds / min(jobs, runs_left)
  std::string method;                  // how the rate was obtained
};

// FLOPs from model/flops.h; the rate is measured by timing steps 2 and 3 of the map's smallest run in
// this process at the workers' thread count (the first step pays for first-touch allocation).
// measure = false uses `assumed_gflops` instead.
DepthMapEstimate estimate_depthmap(const DepthMapOptions& options, const SweepOptions& plan, bool measure = true,
                                   double assumed_gflops = 5.0);
// The same over several sweeps run one after another (the stability map's, one per optimizer): their runs
// together, at the first sweep's jobs and threads, the rate measured on the smallest run of all.
DepthMapEstimate estimate_sweeps(const std::vector<SweepOptions>& plans, bool measure = true,
                                 double assumed_gflops = 5.0);
std::string estimate_text(const DepthMapEstimate& e);

// ---- run and summarize ------------------------------------------------------------------------------

struct DepthMapRun {
  NormPlacement placement = NormPlacement::Post;
  int depth = 0, warmup = 0;
  uint64_t seed = 0;
  probe::Outcome outcome = probe::Outcome::NeverStarted;
  std::optional<int> first_step_below;  // first step with loss < 0.01
  double final_loss = 0, min_loss = 0, seconds = 0;
  bool reused = false;                  // finished before this invocation
  // With stream_every > 0 (--stream-every N): the run's stream.csv at its first and last recorded step
  // (probe/stream_probe.h); nullopt when the run wrote none.
  std::optional<probe::StreamSummary> stream;
};

// The seeds of one cell of a map (depth map, stability map), counted and labelled.
struct SeedCell {
  int runs = 0, learned = 0;
  std::map<probe::Outcome, int> outcomes;
  std::optional<double> median_steps;  // over the learned runs that went below 0.01
  // learned when at least half the runs learned (colour: steps to learn), else the most common other
  // label; nullopt when no run finished
  std::optional<probe::Outcome> shown;
  std::string text;   // "180", "never-started", "2/3 learned, median 180 steps", "no runs"
  std::string short_text;  // for the figure: "180", "never", "2/3: 180"
  bool learned_side() const { return runs > 0 && 2 * learned >= runs; }  // the majority rule of `shown`
};

struct SeedOutcome {
  probe::Outcome outcome = probe::Outcome::NeverStarted;
  std::optional<int> first_step_below;
};

// Counts the runs of a cell (its seeds) and fills every field of `cell` but the cell's coordinates.
void label_seeds(SeedCell& cell, const std::vector<SeedOutcome>& runs, report::Lang lang = report::Lang::En);

struct DepthMapCell : SeedCell {
  NormPlacement placement = NormPlacement::Post;
  int depth = 0, warmup = 0;
};

struct DepthMapResult {
  std::vector<DepthMapRun> runs;   // plan order
  std::vector<DepthMapCell> cells;  // warm-up, then placement, then depth
  SweepResult sweep;
  report::PlotResult figure;
  report::PlotResult stream_figure;    // depthmap_stream.*: drawn when some run recorded its stream
  std::string csv, markdown;       // paths written
};

std::vector<DepthMapRun> depthmap_runs(const SweepResult& sweep);
std::vector<DepthMapCell> summarize_depthmap(const DepthMapOptions& options, const std::vector<DepthMapRun>& runs);
const DepthMapCell* find_cell(const std::vector<DepthMapCell>& cells, NormPlacement placement, int depth, int warmup);

// ---- write ---------------------------------------------------------------------------------------

// With stream statistics in some run, four more columns (empty for runs without): stream_rms_last (the RMS of
// the last block's output at the last recorded step), stream_rms_ratio (that over the first block's), stream_max_abs
// (the largest |h| over the blocks at that step), sink_max (the largest attention-sink share over the blocks).
std::string depthmap_csv(const std::vector<DepthMapRun>& runs);
// The stream figure: the RMS by block at init (dashed) and at the end (solid), one curve per placement, one
// panel per warm-up, for the deepest depth of the map and its first seed. nullopt when no run recorded its stream.
std::optional<report::PlotFigure> depthmap_stream_figure(const DepthMapOptions& options, const std::vector<DepthMapRun>& runs);
// One markdown table per warm-up (without headings); "| placement | 6 blocks | ... |".
std::vector<std::vector<std::string>> depthmap_table(const DepthMapOptions& options,
                                                      const std::vector<DepthMapCell>& cells, int warmup);
std::vector<std::string> depthmap_table_header(const DepthMapOptions& options);
report::PlotFigure depthmap_figure(const DepthMapOptions& options, const std::vector<DepthMapCell>& cells,
                               const std::string& title);
// The colour of a cell in the figure (fixed colours for the failure labels, a scale for steps to learn).
std::string cell_color(const DepthMapCell& cell, int steps);

// Public results on where Post-LN stops training (docs/placements.md), each with the cell of this map that
// comes closest: {source, their task and setting, their result, our cell, our result}.
// A published (or this project's reference) result on where Post-LN stops training, from docs/data/anchors.json:
// source, task and result as English msgids (translated where shown), and the cell of a depth map it compares
// with (depth: the nearest depth of the map; warmup: the map's largest warm-up, else its smallest).
struct LiteratureAnchor {
  std::string source, task, result;
  NormPlacement placement;
  int depth;
  bool warmup;
};
const std::vector<LiteratureAnchor>& literature_anchors();

std::vector<std::vector<std::string>> depthmap_anchor_rows(const DepthMapOptions& options,
                                                           const std::vector<DepthMapCell>& cells);
std::vector<std::string> depthmap_anchor_header(report::Lang lang = report::Lang::En);
std::string depthmap_tasks_differ(report::Lang lang = report::Lang::En);  // the caveat printed with the anchors

// A markdown table: the header, a |---| line, then the rows (the depth and stability maps' tables).
std::string markdown_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

// Writes depthmap.csv, depthmap.md and the figure into options.out.
void write_depthmap(const DepthMapOptions& options, DepthMapResult& result);

// plan -> run -> summarize -> write. Throws Error on bad options (before anything is written),
// SweepInterrupted when interrupted, Error when runs failed.
DepthMapResult run_depthmap(const DepthMapOptions& options, const Log& log = {}, const SweepProgressFn& progress = {});

}  // namespace blocklab::experiments
