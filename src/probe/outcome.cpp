#include "probe/outcome.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace blocklab::probe {

std::string to_string(Outcome o) {
  switch (o) {
    case Outcome::NeverStarted: return "never-started";
    case Outcome::Learning: return "learning";
    case Outcome::Learned: return "learned";
    case Outcome::Collapsed: return "collapsed";
    case Outcome::BlewUp: return "blew-up";
    case Outcome::Diverged: return "diverged";
  }
  return "?";
}

const std::vector<Outcome>& all_outcomes() {
  static const std::vector<Outcome> outcomes = {Outcome::Diverged, Outcome::Collapsed, Outcome::BlewUp, Outcome::NeverStarted,
                                                Outcome::Learned, Outcome::Learning};
  return outcomes;
}

std::optional<Outcome> parse_outcome(const std::string& text) {
  for (Outcome o : all_outcomes())
    if (to_string(o) == text) return o;
  return std::nullopt;
}

CurveSummary summarize_curve(const std::vector<int>& steps, const std::vector<double>& losses, double ln_vocab,
                             std::optional<double> learned_below) {
  if (steps.empty() || steps.size() != losses.size()) throw Error("a loss curve needs one loss per step");
  CurveSummary s;
  s.steps = steps.back();
  s.final_loss = losses.back();
  s.min_loss = losses.front();
  s.min_loss_step = steps.front();
  bool finite = true, left = false, went_low = false, came_back = false;
  const size_t window = std::min<size_t>(kSmoothSteps, losses.size());
  double window_sum = 0;
  double smooth = std::nan("");
  for (size_t i = 0; i < losses.size(); ++i) {
    const double loss = losses[i];
    if (!std::isfinite(loss)) {
      finite = false;
      continue;
    }
    if (loss < s.min_loss || !std::isfinite(s.min_loss)) s.min_loss = loss, s.min_loss_step = steps[i];
    if (loss < kSolvedLoss && !s.first_step_below) s.first_step_below = steps[i];
    // the thresholds read the mean of the last `window` losses (once there are that many)
    window_sum += loss;
    if (i >= window) window_sum -= losses[i - window];
    if (i + 1 < window) continue;
    smooth = window_sum / window;
    if (smooth < ln_vocab - kStartedBelowLnV) left = true;
    if (went_low && smooth > ln_vocab - kCollapseBackBelowLnV) came_back = true;
    if (smooth < kCollapseLow) went_low = true;
  }
  s.smoothed_final_loss = smooth;
  const bool reached = std::isfinite(smooth) && smooth < learned_below.value_or(kLearnedFractionOfLnV * ln_vocab);
  const bool blew_up = std::isfinite(smooth) && smooth > ln_vocab + kBlewUpAboveLnV;
  s.outcome = !finite ? Outcome::Diverged
              : came_back ? Outcome::Collapsed
              : blew_up ? Outcome::BlewUp
              : !left ? Outcome::NeverStarted
              : reached ? Outcome::Learned
                        : Outcome::Learning;
  return s;
}

}  // namespace blocklab::probe
