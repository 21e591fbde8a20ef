#include "experiments/reproduce_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace blocklab::experiments::reproduce_text {

int main_batch(const std::map<int, GradNormResult>& gradnorms, int wanted) {
  return gradnorms.count(wanted) ? wanted : gradnorms.begin()->first;
}

const GradNormProfile* profile(const GradNormResult& result, NormPlacement placement) {
  for (const auto& p : result.profiles)
    if (p.placement == placement) return &p;
  return nullptr;
}

double loss_at(const SweepRunResult& run, int step) {
  for (size_t i = 0; i < run.steps.size(); ++i)
    if (run.steps[i] == step) return run.losses[i];
  return std::nan("");
}

Runs cell_runs(const SweepResult& sweep, const std::string& placement, int warmup) {
  Runs out;
  for (const auto& r : sweep.runs)
    if (to_string(r.run.config.model.norm_placement) == placement && r.run.config.warmup == warmup) out.push_back(&r);
  return out;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

std::string losses_text(const Runs& runs, int step, const char* format) {
  std::vector<std::string> items;
  for (const auto* r : runs) items.push_back(fmt(step < 0 ? r->curve.final_loss : loss_at(*r, step), format));
  return items.empty() ? "n/a" : join(items, " / ");
}

std::string outcomes_text(const Runs& runs, report::Lang lang) {
  std::map<std::string, int> counts;
  for (const auto* r : runs) ++counts[probe::to_string(r->curve.outcome)];
  std::vector<std::string> items;
  for (const auto& [label, n] : counts)
    items.push_back(report::trc(lang, "outcome count", "{1} {2}", {std::to_string(n), label}));
  return items.empty() ? report::tr(lang, "no runs") : join(items, ", ");
}

int count_outcome(const Runs& runs, probe::Outcome outcome) {
  int n = 0;
  for (const auto* r : runs) n += r->curve.outcome == outcome ? 1 : 0;
  return n;
}

double max_loss_at(const Runs& runs, int step) {
  double m = -1;
  for (const auto* r : runs) m = std::max(m, loss_at(*r, step));
  return runs.empty() ? std::nan("") : m;
}

std::string pct_diff(double measured, double source) {
  if (!std::isfinite(measured) || source == 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.0f%%", 100.0 * (measured - source) / source);
  return buf;
}

std::string first_steps_below_text(const Runs& runs, report::Lang lang) {
  std::vector<std::string> firsts;
  for (const auto* r : runs)
    firsts.push_back(r->curve.first_step_below ? std::to_string(*r->curve.first_step_below) : report::tr(lang, "never"));
  return join(firsts, " / ");
}

std::string outcome_labels_text(report::Lang lang) {
  const std::string smooth = std::to_string(probe::kSmoothSteps);
  return report::tr(
      lang,
      "Outcome labels, checked in this order (the loss read as a mean of {1} steps): `diverged` = a "
      "non-finite loss; `collapsed` = it went below {2} and later came back above ln V - {3}; `blew-up` = "
      "every loss finite, but its last {1} steps average more than {4} above ln V (worse than guessing "
      "uniformly); `never-started` = it never fell below ln V - {5}; `learned` = its last {1} steps "
      "average below {6} x ln V; `learning` = otherwise (it left ln V but had not reached that threshold "
      "by its last step).",
      {smooth, fmt(probe::kCollapseLow, "%g"), fmt(probe::kCollapseBackBelowLnV, "%g"),
       fmt(probe::kBlewUpAboveLnV, "%g"), fmt(probe::kStartedBelowLnV, "%g"), fmt(probe::kLearnedFractionOfLnV, "%g")});
}

std::string duration_text(double s, report::Lang lang) {
  if (s < 60) return report::tr(lang, "{1} s", {fmt(s, "%.0f")});
  if (s < 3600) return report::tr(lang, "{1} min", {fmt(s / 60, "%.1f")});
  return report::tr(lang, "{1} h", {fmt(s / 3600, "%.2f")});
}

}  // namespace blocklab::experiments::reproduce_text
