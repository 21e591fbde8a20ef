#pragma once
// What happened in a training run, read from its loss curve. The thresholds below are applied to the
// loss averaged over kSmoothSteps consecutive steps, so that one noisy batch (small batches at ln V
// scatter by a few hundredths) does not count as leaving ln V or as a collapse. The labels, checked in
// this order:
//   diverged       some loss is not finite
//   collapsed      the loss went below 0.1 and later came back above ln V - 0.1
//   blew-up        every loss finite, but the run ended worse than guessing uniformly: its averaged final
//                  loss is more than kBlewUpAboveLnV above ln V (the optimizer pushed the model away from
//                  the uniform prediction that a stuck run settles on, without overflowing)
//   never-started  the loss never fell below ln V - 0.05 (the untrained model's first losses sit
//                  above ln V; only a drop below the band around ln V counts as leaving it)
//   learned        the averaged loss of the last kSmoothSteps steps is below the "learned" threshold:
//                  kLearnedFractionOfLnV x ln V for the copy and reverse tasks (0.1 ln V = 0.42 for V = 64),
//                  the unigram entropy of the training text for the text task (the model predicts better
//                  than each token's frequency alone: it uses the context)
//   learning       otherwise: it left ln V and did not come back, but had not reached that threshold by
//                  its last step (a run from 4.16 to 3.05 is still learning, not learned)
#include <optional>
#include <string>
#include <vector>

namespace blocklab::probe {

enum class Outcome { NeverStarted, Learning, Learned, Collapsed, BlewUp, Diverged };
std::string to_string(Outcome);

constexpr double kStartedBelowLnV = 0.05;   // left ln V: loss < ln V - this
constexpr double kCollapseLow = 0.1;        // collapsed: first below this ...
constexpr double kCollapseBackBelowLnV = 0.1;  // ... then above ln V - this
constexpr double kLearnedFractionOfLnV = 0.1;  // learned: final averaged loss < this x ln V
constexpr double kBlewUpAboveLnV = 0.5;     // blew-up: final averaged loss > ln V + this
constexpr double kSolvedLoss = 0.01;        // first_step_below is reported for this threshold (raw loss)
constexpr int kSmoothSteps = 10;            // trailing window of the averaged loss

struct CurveSummary {
  int steps = 0;
  double final_loss = 0, min_loss = 0;  // raw per-step losses
  int min_loss_step = 0;
  std::optional<int> first_step_below;  // first step with loss < kSolvedLoss
  double smoothed_final_loss = 0;       // mean of the last kSmoothSteps losses (NaN: too few finite ones)
  Outcome outcome = Outcome::NeverStarted;
};

// Every label, in the order of the checks above (diverged first).
const std::vector<Outcome>& all_outcomes();
// "learned" etc. -> the label; nullopt for any other text.
std::optional<Outcome> parse_outcome(const std::string& text);

// steps and losses are parallel (one entry per step, increasing). learned_below: the "learned" threshold
// (default: kLearnedFractionOfLnV x ln_vocab). Throws Error when empty or uneven.
CurveSummary summarize_curve(const std::vector<int>& steps, const std::vector<double>& losses, double ln_vocab,
                             std::optional<double> learned_below = std::nullopt);

}  // namespace blocklab::probe
