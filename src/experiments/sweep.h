#pragma once
// A grid of training runs over any config keys, times a list of seeds, in three steps that any batch
// scheduler can drive: plan (write the ordered list of runs), run (one planned run by index, in this
// process, idempotently), merge (summary and figures of whatever has finished). The one-command sweep
// is the three of them with local workers: each run is a separate process in its own sub-directory OUT/<key>=<value>+...+seed=<S>/ (config.json,
// metrics.csv, summary.json, train.log), so runs share nothing and up to `jobs` of them run at once
// without changing any run's numbers (each run's results do not depend on its thread count). The
// worker is `blocklab sweep run OUT --index I`, which trains exactly the planned config; an interrupted
// run continues from its newest checkpoint.
//
//   OUT/experiment.json   the sweep's settings; a re-run with the same settings continues the sweep
//                         (finished runs are skipped, interrupted ones resume from their checkpoint),
//                         different settings are refused
//   OUT/plan.jsonl        the plan: one line per run, in grid order: {"index", "name", "cell", "values",
//                         "seed", "fingerprint", "config"}; the fingerprint hashes the keys that change
//                         results, so a run directory trained with another config is recognised
//   OUT/<run>/result.json written last, atomically, when the run has ended: the run is done
//   OUT/summary.csv       one row per finished run: final/min loss, first step below 0.01, outcome
//   OUT/loss.{png,svg,gp} one panel per grid cell, seeds as thin lines, a dashed line at ln V
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "report/lang.h"
#include "experiments/common.h"
#include "probe/outcome.h"
#include "report/plot.h"
#include "train/run.h"
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

struct SweepRun;

struct SweepOptions {
  RunConfig base;                // every key not in the grid; base.out is not used
  std::vector<GridAxis> grid;    // cells: the cartesian product of the axes' values, first axis slowest
  std::vector<uint64_t> seeds;   // runs per cell
  int jobs = 0;                  // runs at a time; 0 = the number of cores
  std::string out;
  std::string worker;            // the blocklab executable ("" = the running program)
  bool log_loss = true;          // loss axis of the figure
  std::string title;             // figure title ("" = derived from the settings)
  double poll_seconds = 0.25;    // how often running workers are checked
  report::Lang lang = report::Lang::En;  // of the figure's text (not part of the experiment: results do not depend on it)
  // Runs whose results were recorded elsewhere (the stability map's --finished rows): not run here, not in the
  // result, and counted as finished in the progress and the estimate. Empty: none.
  std::function<bool(const SweepRun&)> done_elsewhere;
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
  // Text task: the last and the lowest validation loss (metrics.csv), and the training text's unigram
  // entropy (summary.json), which is the run's "learned" threshold.
  std::optional<double> final_val_loss, min_val_loss, unigram_entropy;
  int min_val_loss_step = 0;
  std::vector<int> val_steps;  // the evaluated steps and their validation losses
  std::vector<double> val_losses;
  double seconds = 0;    // training time (summary.json)
  bool reused = false;   // finished before this invocation
};

struct SweepProgress {
  int runs_total = 0, runs_finished = 0, runs_reused = 0, runs_active = 0;  // reused: done before, here or elsewhere
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
  std::vector<std::string> unfinished;  // merge: "index name (state)" of planned runs not done yet
  report::PlotResult figure;
};

// Thrown after SIGINT/SIGTERM: the workers were asked to stop, wrote their checkpoints and exited;
// summary.csv and the figure cover the runs finished so far, and finished() holds them (the sweep's result as
// far as it got: callers that build on a sweep need not merge it again). A re-run continues the sweep.
class SweepInterrupted : public std::runtime_error {
 public:
  SweepInterrupted(int signal, int unfinished, SweepResult finished)
      : std::runtime_error("sweep interrupted by signal " + std::to_string(signal) + "; " + std::to_string(unfinished) +
                           " run(s) unfinished (re-run the same command to continue)"),
        signal_(signal),
        finished_(std::make_shared<const SweepResult>(std::move(finished))) {}
  int signal() const { return signal_; }
  const SweepResult& finished() const { return *finished_; }

 private:
  int signal_;
  std::shared_ptr<const SweepResult> finished_;  // shared: an exception is copied as it propagates
};

// Every run of the sweep, resolved and validated (Error on the first bad value), in grid order.
// The base config a sweep starts from before its flags: the defaults with weights = false, so that its many
// runs write no model.safetensors (a 24 x 128 run's weights are 19 MB); --weights true keeps them.
RunConfig sweep_base_config();
std::vector<SweepRun> plan_sweep(const SweepOptions& options);
// The settings stored in OUT/experiment.json.
nlohmann::json sweep_settings(const SweepOptions& options);

// Throws Error (one line, as `train` does) when the largest of the pending runs, as many times as run at
// once (min(pending, jobs)), does not fit in the memory available. run_sweep calls it before any worker
// starts, so sweep, depthmap and reproduce refuse up front instead of in each worker.
void require_sweep_memory(const std::vector<SweepRun>& runs, const std::vector<size_t>& pending, int jobs);

// Runs the sweep. Throws Error on bad options (before anything is written), on a directory that holds
// another experiment, and, after the other runs finished, when some runs failed.
SweepResult run_sweep(const SweepOptions& options, const Log& log = {}, const SweepProgressFn& progress = {});

// A finished run directory's loss curve (metrics.csv), its outcome and its training seconds.
SweepRunResult read_run(const SweepRun& run);
// True when run_dir holds a run that ended (summary.json with a status other than "interrupted").
bool run_finished(const std::string& run_dir);

// ---- plan / run / merge ----

inline constexpr const char* kPlanName = "plan.jsonl";
inline constexpr const char* kResultName = "result.json";

// 16 hex digits: a stable hash (FNV-1a, 64 bits) of results_json(config) as compact JSON. Two configs
// with the same fingerprint compute the same numbers; execution keys (out, threads, ...) do not count.
std::string config_fingerprint(const RunConfig& config);

// A plan read back from OUT: the grid and seeds from experiment.json, the runs from plan.jsonl (each
// config's out set to OUT/<name>).
struct SweepPlan {
  std::string out;
  std::vector<GridAxis> grid;
  std::vector<uint64_t> seeds;
  int probe_every = 0;  // the settings' probe_every (old plans; newer ones carry it in each run's config)
  std::vector<SweepRun> runs;
  std::vector<std::string> fingerprints;  // one per run
};

// Validates the options, claims OUT (refusing another experiment or other settings) and writes
// plan.jsonl; planning the same sweep again leaves the files as they are. Returns the plan.
SweepPlan write_sweep_plan(const SweepOptions& options);
// Reads OUT's plan. Throws Error when OUT holds no sweep plan, or a line is malformed or its fingerprint
// does not match its config.
SweepPlan read_sweep_plan(const std::string& out);

// True when the run's directory holds its result record with the planned fingerprint and a summary of
// a run that ended.
bool run_done(const SweepPlan& plan, size_t index);

enum class PlannedRunOutcome { AlreadyDone, Trained, Resumed };
std::string to_string(PlannedRunOutcome);

// Runs planned run `index` in this process: nothing when it is done; from its newest checkpoint when it
// was interrupted; else from the start. The run directory must hold nothing or a run with the planned
// fingerprint (Error otherwise, before anything is written), and only one process may run it at a time
// (a lock file; Error when another holds it). threads >= 0 overrides the planned config's (0 = all
// cores). The result record is written last. SIGINT/SIGTERM: Interrupted (train/run.h) after a checkpoint.
PlannedRunOutcome run_planned(const SweepPlan& plan, size_t index, int threads, const StepObserver& observer = {});

// Under mpirun: every run of the plan, as a dynamic task farm. Rank 0 hands out the next index not done to
// each rank that asks (and, when the MPI library allows a second thread, runs runs itself in between);
// a run's numbers do not depend on which rank ran it, so the results do not depend on the number of
// ranks or on the order. threads < 0: the cores of a machine shared among its ranks. Rank 0 merges at
// the end. Returns the exit status: 0 when every run is done. Throws Error when built without MPI.
int run_sweep_mpi(const SweepPlan& plan, int threads, const Log& log = {});

// "I", "A:B" (A <= i < B) -> indices; Error when malformed or outside [0, runs).
std::vector<size_t> parse_run_indices(const std::string& index, const std::string& range, size_t runs);

// Reads every finished run of the plan, writes OUT/summary.csv and OUT/loss.{png,svg}, and lists the
// runs that are not done in result.unfinished. title "" = derived from the settings.
SweepResult merge_sweep(const SweepPlan& plan, bool log_loss = true, const std::string& title = "",
                        const Log& log = {}, report::Lang lang = report::Lang::En);

// "Post-LN, no warm-up" style title of a grid cell.
std::string cell_title(const std::vector<GridAxis>& grid, const std::vector<std::string>& values,
                       report::Lang lang = report::Lang::En);
// Loss curves of finished runs, one panel per cell.
report::PlotFigure sweep_figure(const std::vector<GridAxis>& grid, const std::vector<SweepRunResult>& runs, double ln_vocab,
                            bool log_loss, const std::string& title, report::Lang lang = report::Lang::En);

}  // namespace blocklab::experiments
