#pragma once
// The stability map: placement x optimizer x warm-up x learning rate x seeds, each run labelled
// (probe/outcome.h) and timed to its first step below 0.01, as the depth map does for depth. Where does a
// placement and optimizer stop learning as lr grows, and how much warm-up moves that edge? The runs are one
// sweep (experiments/sweep.h) per optimizer entry over the axes norm_placement, warmup, lr, run one after
// the other, so the map is resumable and parallel like any sweep:
//
//   OUT/experiment.json        the map's settings; re-running the same map in OUT continues it
//   OUT/runs/<optimizer>/      one sweep per optimizer entry ("adam", "adam+v0", ...): its runs, summary.csv, loss.*
//   OUT/stabilitymap.csv       one row per run: placement, optimizer, warmup, lr, seed, outcome,
//                              first_step_below, final_loss, min_loss, seconds
//   OUT/stabilitymap.md        one table per placement and optimizer: lr as rows, warm-up as columns
//   OUT/stabilitymap.{png,svg,gp}   every placement (rows) and optimizer (columns) as a panel, with a key
//   OUT/stabilitymap_<placement>_<optimizer>.{png,svg,gp}   one panel each
//
// A panel puts warm-up length across and lr up a log axis; a cell's shade is the fraction of its seeds that
// learned and its text "k/n" with the median first step below 0.01 (or the most common other label). A thick
// line separates the cells where at least half the seeds learned from those where fewer did.
//
// An optimizer entry is an optimizer name (train/optimizer.h: adam, adamw, radam, sgd, lion, muon), with
// "+v0" for GI-Adam's second moment started from the first gradient (adam_v0 = grad; adam, adamw and radam
// only): "adam", "adam+v0", "radam+v0".
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "experiments/common.h"
#include "experiments/depthmap.h"
#include "experiments/sweep.h"
#include "report/lang.h"
#include "report/plot.h"
#include "train/optimizer.h"
#include "train/run_config.h"

namespace blocklab::experiments {

struct OptimizerEntry {
  OptimizerKind kind = OptimizerKind::Adam;
  AdamV0 v0 = AdamV0::Zero;
  bool operator==(const OptimizerEntry&) const = default;
};
std::string to_string(const OptimizerEntry& entry);  // "adam", "adam+v0"
// Throws Error naming the valid spellings for an unknown optimizer or "+v0" on an optimizer without Adam's
// second moment.
OptimizerEntry parse_optimizer_entry(const std::string& text);
// "adam,adam+v0,radam" -> entries. Throws Error naming `what` for an empty list or item, or a repeated entry.
std::vector<OptimizerEntry> parse_optimizer_entries(const std::string& text, const std::string& what = "optimizers");
// "1e-4,1e-3" -> learning rates, each rounded to 6 significant digits (the run directories' names). Throws
// Error naming `what` for an empty list or item, a value that is not a positive finite number, or a repeat.
std::vector<double> parse_lr_list(const std::string& text, const std::string& what = "lrs");

struct StabilityMapOptions {
  RunConfig base;                         // every key but norm_placement, optimizer, adam_v0, warmup, lr, seed
  std::vector<NormPlacement> placements;  // rows of the figure
  std::vector<OptimizerEntry> optimizers;  // columns of the figure, one sweep each
  std::vector<int> warmups;               // across each panel
  std::vector<double> lrs;                // up each panel (log axis)
  std::vector<uint64_t> seeds;
  int jobs = 0;                           // runs at a time (0 = cores)
  std::string out;
  std::string worker;                     // the blocklab executable ("" = the running program)
  double poll_seconds = 0.25;
  // A directory holding the experiment.json and stabilitymap.csv of a map with the same per-run settings
  // (settings.base), finished elsewhere, e.g. on another machine: its rows inside this map's lists count as
  // finished runs and are not trained again ("" = none). Not part of the map's settings.
  std::string finished;
  bool quick = false;                     // for titles only
  report::Lang lang = report::Lang::En;   // of the figures, the tables and stabilitymap.md (not of the results)
};

// The full map: the source's model (24 blocks x width 128, 4 heads, V 64, n 32), batch 16, 600 steps;
// Post-LN and Pre-LN; adam, radam, adam+v0; warm-up 0, 100, 400; lr 1e-4 to 1e-2 (a log grid through the
// source's 1e-3); seeds 0, 1, 2. The quick one (for reproduce --quick): 6 blocks x width 64 on 8+8-token
// sequences, batch 8, 400 steps; adam and adam+v0; warm-up 0 and 100; lr 1e-3, 3e-3, 1e-2; seeds 0, 1, 2.
StabilityMapOptions stabilitymap_preset(bool quick);
nlohmann::json stabilitymap_settings(const StabilityMapOptions& options);

// ---- plan ----------------------------------------------------------------------------------------

// One run of the map: its cell, seed and outcome (a row of stabilitymap.csv).
struct StabilityRun {
  NormPlacement placement = NormPlacement::Post;
  std::string optimizer;  // the entry's spelling
  int warmup = 0;
  double lr = 0;
  uint64_t seed = 0;
  probe::Outcome outcome = probe::Outcome::NeverStarted;
  std::optional<int> first_step_below;  // first step with loss < 0.01
  double final_loss = 0, min_loss = 0, seconds = 0;
  bool reused = false;                  // finished before this invocation (or elsewhere: --finished)
};

// The rows of a stabilitymap.csv. Throws Error "<where>:<line>: ..." for another header, a row without ten
// fields, or a field that does not parse.
std::vector<StabilityRun> parse_stabilitymap_csv(const std::string& text, const std::string& where);

struct FinishedRuns {
  std::vector<StabilityRun> runs;  // inside this map's lists, reused = true
  int outside = 0;                 // rows of other placements, optimizers, warm-ups, lrs or seeds: not used
  std::set<std::string> keys() const;  // one per run: placement, optimizer, warm-up, lr and seed
};
// options.finished's rows (none when it is ""). Throws Error when the directory holds no stability map, its
// per-run settings differ from this map's (naming the first setting that does), or a run appears twice.
FinishedRuns read_finished_runs(const StabilityMapOptions& options);

// The sweeps behind the map, one per optimizer entry (out OUT/runs/<entry>), the runs of `finished` marked
// done elsewhere (the first form reads them from options.finished). Throws Error, writing nothing, for an
// empty list, a repeated value, a warm-up below 0, or a config the engine refuses.
std::vector<SweepOptions> plan_stabilitymap(const StabilityMapOptions& options);
std::vector<SweepOptions> plan_stabilitymap(const StabilityMapOptions& options, const FinishedRuns& finished);

// ---- run and summarize ------------------------------------------------------------------------------

struct StabilityCell : SeedCell {
  NormPlacement placement = NormPlacement::Post;
  std::string optimizer;
  int warmup = 0;
  double lr = 0;
};

struct StabilityMapResult {
  std::vector<StabilityRun> runs;    // plan order: optimizer, then placement, warm-up, lr, seed
  std::vector<StabilityCell> cells;  // placement, optimizer, warm-up, lr
  std::vector<SweepResult> sweeps;   // one per optimizer entry
  report::PlotResult figure;         // stabilitymap.*
  std::vector<report::PlotResult> panel_figures;  // stabilitymap_<placement>_<optimizer>.*, placement outer
  std::string csv, markdown;         // paths written
};

// The finished runs of one optimizer entry's sweep.
std::vector<StabilityRun> stabilitymap_runs(const std::string& optimizer, const SweepResult& sweep);
std::vector<StabilityCell> summarize_stabilitymap(const StabilityMapOptions& options,
                                                  const std::vector<StabilityRun>& runs);
const StabilityCell* find_cell(const std::vector<StabilityCell>& cells, NormPlacement placement,
                               const std::string& optimizer, int warmup, double lr);

// ---- write ---------------------------------------------------------------------------------------

std::string stabilitymap_csv(const std::vector<StabilityRun>& runs);

// One edge of the majority boundary in a panel's coordinates: x is the warm-up's column (0, 1, ...), y is
// log10(lr); a cell spans x +- 0.5 and y halfway to its neighbours' log10(lr) (its own spacing at the ends).
struct BoundarySegment {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};
// The edges between neighbouring cells (across or up) of which one is on the learned side (at least half
// its seeds learned) and the other is not; cells without runs draw no edge.
std::vector<BoundarySegment> majority_boundary(const StabilityMapOptions& options, const std::vector<StabilityCell>& cells,
                                               NormPlacement placement, const std::string& optimizer);
// The shade of a cell: white through green by the fraction of its seeds that learned; white without runs.
std::string fraction_color(const SeedCell& cell);

report::PlotPanel stabilitymap_panel(const StabilityMapOptions& options, const std::vector<StabilityCell>& cells,
                                     NormPlacement placement, const std::string& optimizer);
// Every panel (placements as rows, optimizers as columns) and a key.
report::PlotFigure stabilitymap_figure(const StabilityMapOptions& options, const std::vector<StabilityCell>& cells,
                                       const std::string& title);
// "| lr | no warm-up | warm-up 100 |" and one row per lr, largest first.
std::vector<std::string> stabilitymap_table_header(const StabilityMapOptions& options);
std::vector<std::vector<std::string>> stabilitymap_table(const StabilityMapOptions& options,
                                                         const std::vector<StabilityCell>& cells,
                                                         NormPlacement placement, const std::string& optimizer);

// Writes stabilitymap.csv, stabilitymap.md and the figures into options.out.
void write_stabilitymap(const StabilityMapOptions& options, StabilityMapResult& result);

// plan -> run (each optimizer's sweep in turn) -> summarize -> write. Throws Error on bad options (before
// anything is written), SweepInterrupted when interrupted (after writing the map of the runs finished so far,
// options.finished's included, so that an interrupted map's stabilitymap.csv can be carried to another
// machine), Error when runs failed.
StabilityMapResult run_stabilitymap(const StabilityMapOptions& options, const Log& log = {},
                                    const SweepProgressFn& progress = {});

}  // namespace blocklab::experiments
