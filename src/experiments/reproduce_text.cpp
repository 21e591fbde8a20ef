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

std::string outcomes_text(const Runs& runs, io::Lang lang) {
  std::map<std::string, int> counts;
  for (const auto* r : runs) ++counts[probe::to_string(r->curve.outcome)];
  std::vector<std::string> items;
  for (const auto& [label, n] : counts)
    items.push_back(lang == io::Lang::Ko ? label + " " + std::to_string(n) + "번" : std::to_string(n) + " " + label);
  return items.empty() ? io::tr(lang, "no runs", "실행 없음") : join(items, ", ");
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

std::string first_steps_below_text(const Runs& runs, io::Lang lang) {
  std::vector<std::string> firsts;
  for (const auto* r : runs)
    firsts.push_back(r->curve.first_step_below ? std::to_string(*r->curve.first_step_below) : io::tr(lang, "never", "없음"));
  return join(firsts, " / ");
}

std::string outcome_labels_text(io::Lang lang) {
  if (lang == io::Lang::Ko)
    return "결과 꼬리표는 이 차례로 따진다 (손실은 " + std::to_string(probe::kSmoothSteps) +
           "스텝 평균으로 읽음): `diverged` = 무한대나 NaN 손실이 나옴; `collapsed` = " + fmt(probe::kCollapseLow, "%g") +
           " 아래로 내려갔다가 나중에 ln V - " + fmt(probe::kCollapseBackBelowLnV, "%g") +
           " 위로 돌아감; `blew-up` = 손실은 모두 유한하지만 마지막 " + std::to_string(probe::kSmoothSteps) +
           "스텝 평균이 ln V 보다 " + fmt(probe::kBlewUpAboveLnV, "%g") +
           " 넘게 높음 (고르게 찍는 것보다 나쁨); `never-started` = ln V - " + fmt(probe::kStartedBelowLnV, "%g") +
           " 아래로 한 번도 못 내려감 (출발 못 함); `learned` = 마지막 " + std::to_string(probe::kSmoothSteps) +
           "스텝 평균이 " + fmt(probe::kLearnedFractionOfLnV, "%g") +
           " x ln V 아래; `learning` = 그 밖 (ln V 에서 벗어났지만 마지막 스텝까지 그 기준에는 못 닿음).";
  return "Outcome labels, checked in this order (the loss read as a mean of " + std::to_string(probe::kSmoothSteps) +
         " steps): `diverged` = a non-finite loss; `collapsed` = it went below " + fmt(probe::kCollapseLow, "%g") +
         " and later came back above ln V - " + fmt(probe::kCollapseBackBelowLnV, "%g") +
         "; `blew-up` = every loss finite, but its last " + std::to_string(probe::kSmoothSteps) +
         " steps average more than " + fmt(probe::kBlewUpAboveLnV, "%g") +
         " above ln V (worse than guessing uniformly)"
         "; `never-started` = it never fell below ln V - " + fmt(probe::kStartedBelowLnV, "%g") +
         "; `learned` = its last " + std::to_string(probe::kSmoothSteps) + " steps average below " +
         fmt(probe::kLearnedFractionOfLnV, "%g") + " x ln V; `learning` = otherwise (it left ln V but had not "
         "reached that threshold by its last step).";
}

std::string duration_text(double s, io::Lang lang) {
  const bool ko = lang == io::Lang::Ko;
  char buf[64];
  if (s < 60)
    std::snprintf(buf, sizeof buf, ko ? "%.0f초" : "%.0f s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, ko ? "%.1f분" : "%.1f min", s / 60);
  else
    std::snprintf(buf, sizeof buf, ko ? "%.2f시간" : "%.2f h", s / 3600);
  return buf;
}

}  // namespace blocklab::experiments::reproduce_text
