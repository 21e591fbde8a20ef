#pragma once
// Pieces shared by the reproduction's claims and its report: picking the runs of one grid cell out of a
// sweep, and the measured values as table text.
#include <map>
#include <string>
#include <vector>

#include "report/lang.h"
#include "experiments/common.h"
#include "experiments/gradnorm.h"
#include "experiments/sweep.h"
#include "probe/outcome.h"

namespace blocklab::experiments::reproduce_text {

using Runs = std::vector<const SweepRunResult*>;

// The batch size of experiment A that the report draws: `wanted` when measured, else the smallest.
// gradnorms must not be empty.
int main_batch(const std::map<int, GradNormResult>& gradnorms, int wanted);
// The profile of one placement; nullptr when not measured.
const GradNormProfile* profile(const GradNormResult& result, NormPlacement placement);

// The loss a run logged at `step`; NaN when it has no such step.
double loss_at(const SweepRunResult& run, int step);
// The runs of one cell of experiment B ("post" or "pre", warm-up steps), in seed order.
Runs cell_runs(const SweepResult& sweep, const std::string& placement, int warmup);
// "0.0112 / 0.0126": the loss of each run at `step` (the final loss for step < 0); "n/a" for no runs.
std::string losses_text(const Runs& runs, int step, const char* format = "%.4f");
// "2 learned, 1 never-started"; "no runs".
std::string outcomes_text(const Runs& runs, report::Lang lang = report::Lang::En);
int count_outcome(const Runs& runs, probe::Outcome outcome);
// The largest loss at `step` over the runs; NaN for no runs.
double max_loss_at(const Runs& runs, int step);
// "+12%": measured relative to source; "n/a" when measured is not finite or source is 0.
std::string pct_diff(double measured, double source);
// "12 / never / 40": each run's first step below 0.01.
std::string first_steps_below_text(const Runs& runs, report::Lang lang = report::Lang::En);
std::string join(const std::vector<std::string>& items, const std::string& sep);
// The outcome labels and their thresholds, as one paragraph for reports.
std::string outcome_labels_text(report::Lang lang = report::Lang::En);
// "42 s", "3.5 min", "2.10 h".
std::string duration_text(double seconds, report::Lang lang = report::Lang::En);

}  // namespace blocklab::experiments::reproduce_text
