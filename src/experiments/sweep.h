#pragma once
// A grid of training runs over any config keys, times a list of seeds. Each run is a separate
// `blocklab train` process in its own sub-directory OUT/<key>=<value>+...+seed=<S>/ (config.json,
// metrics.csv, summary.json, train.log), so runs share nothing and up to `jobs` of them run at once
// without changing any run's numbers (each run's results do not depend on its thread count). The
// sweep writes each new run's resolved config.json first and the worker trains exactly that
// (`blocklab train --config-json RUN/config.json`); an interrupted run continues with --resume.
//
//   OUT/experiment.json   the sweep's settings; a re-run with the same settings continues the sweep
//                         (finished runs are skipped, interrupted ones resume from their checkpoint),
//                         different settings are refused
//   OUT/summary.csv       one row per finished run: final/min loss, first step below 0.01, outcome
//   OUT/loss.{png,svg,gp} one panel per grid cell, seeds as thin lines, a dashed line at ln V
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "report/lang.h"
#include "experiments/common.h"
#include "probe/outcome.h"
#include "report/plot.h"
#include "train/run_config.h"

namespace blocklab::experiments {

struct GridAxis {
  std::string key;                  // a config key (snake_case)
  std::vector<std::string> values;  // as text, checked by the key table
};

// "norm_placement=post,pre" (or "norm-placement=post,pre") -> axis. Throws Error for a malformed spec,
// an unknown key, a key that does not define a run (out, threads, log_every, seed: use --seeds), an
// empty or repeated value, or a value the key rejects.
GridAxis parse_grid_axis(const std::string& spec);

struct SweepOptions {
  RunConfig base;                // every key not in the grid; base.out is not used
  std::vector<GridAxis> grid;    // cells: the cartesian product of the axes' values, first axis slowest
  std::vector<uint64_t> seeds;   // runs per cell
  int jobs = 0;                  // runs at a time; 0 = the number of cores
  std::string out;
  int probe_every = 0;           // > 0: each run also writes residual.csv (train --probe-every)
  std::string worker;            // the blocklab executable ("" = the running program)
  bool log_loss = true;          // loss axis of the figure
  std::string title;             // figure title ("" = derived from the settings)
  double poll_seconds = 0.25;    // how often running workers are checked
  io::Lang lang = io::Lang::En;  // of the figure's text (not part of the experiment: results do not depend on it)
};

struct SweepRun {
  std::string name;                     // sub-directory of OUT
  size_t cell = 0;                      // index of its grid cell
  std::vector<std::string> cell_values; // one per axis
  uint64_t seed = 0;
  RunConfig config;                     // resolved; out = OUT/name
};

struct SweepRunResult {
  SweepRun run;
  std::vector<int> steps;
  std::vector<double> losses;
  probe::CurveSummary curve;
  double seconds = 0;    // training time (summary.json)
  bool reused = false;   // finished before this invocation
};

struct SweepProgress {
  int runs_total = 0, runs_finished = 0, runs_reused = 0, runs_active = 0;
  long steps_total = 0, steps_done = 0;  // over all runs; reused runs count as done
  long steps_done_here = 0;              // steps trained by this invocation (for the rate)
  double elapsed = 0;                    // seconds since this invocation started
  double eta = -1;                       // seconds, -1 when unknown
  struct Active {
    std::string name;
    int step = 0, steps = 0;
    double loss = 0;
  };
  std::vector<Active> active;
};
using SweepProgressFn = std::function<void(const SweepProgress&)>;

struct SweepResult {
  std::vector<SweepRunResult> runs;  // finished runs, in plan order
  std::vector<std::string> failed;   // "name (exit N)" of runs that did not finish
  io::PlotResult figure;
};

// Thrown after SIGINT/SIGTERM: the workers were asked to stop, wrote their checkpoints and exited;
// summary.csv and the figure cover the runs finished so far. A re-run continues the sweep.
class SweepInterrupted : public std::runtime_error {
 public:
  SweepInterrupted(int signal, int unfinished)
      : std::runtime_error("sweep interrupted by signal " + std::to_string(signal) + "; " + std::to_string(unfinished) +
                           " run(s) unfinished (re-run the same command to continue)"),
        signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Every run of the sweep, resolved and validated (Error on the first bad value), in grid order.
std::vector<SweepRun> plan_sweep(const SweepOptions& options);
// The settings stored in OUT/experiment.json.
nlohmann::json sweep_settings(const SweepOptions& options);

// Runs the sweep. Throws Error on bad options (before anything is written), on a directory that holds
// another experiment, and, after the other runs finished, when some runs failed.
SweepResult run_sweep(const SweepOptions& options, const Log& log = {}, const SweepProgressFn& progress = {});

// A finished run directory's loss curve (metrics.csv), its outcome and its training seconds.
SweepRunResult read_run(const SweepRun& run);
// True when run_dir holds a run that ended (summary.json with a status other than "interrupted").
bool run_finished(const std::string& run_dir);

// "Post-LN, no warm-up" style title of a grid cell.
std::string cell_title(const std::vector<GridAxis>& grid, const std::vector<std::string>& values,
                       io::Lang lang = io::Lang::En);
// Loss curves of finished runs, one panel per cell.
io::PlotFigure sweep_figure(const std::vector<GridAxis>& grid, const std::vector<SweepRunResult>& runs, double ln_vocab,
                            bool log_loss, const std::string& title, io::Lang lang = io::Lang::En);

}  // namespace blocklab::experiments
