#pragma once
// Three explanations of why warm-up helps, each turned into a prediction that the reproduction's own data can
// test, with a verdict computed from those data alone:
//   1. gradient scale at initialization (Xiong et al. 2020): under Post-LN the last block's fc2 gradient exceeds
//      the first block's, under Pre-LN it does not (experiment A's gradient profiles);
//   2. the variance of Adam's adaptive learning rate in its first steps (Liu et al. 2020, RAdam): without warm-up,
//      radam or adam+v0 trains Post-LN at a learning rate where plain adam does not (the stability map);
//   3. curvature and the stability threshold: (a) the largest learning rate that trains rises with the warm-up
//      length (Kalra and Barkeshli 2024; the stability map, per placement and optimizer), and (b) after the first
//      steps Adam's preconditioned sharpness stays near its threshold 38/lr (Cohen et al., adaptive edge of
//      stability; the curvature experiment).
// A cell of the stability map "trains" when at least half of its seeds learned (SeedCell::learned_side, the rule
// of the map's line). Each check is a plain function of the measurements it needs; a missing input (an
// experiment that was not run) gives "cannot tell here" with the reason.
#include <string>
#include <vector>

#include "experiments/curvature_grid.h"
#include "experiments/gradnorm.h"
#include "experiments/stabilitymap.h"
#include "report/lang.h"

namespace blocklab::experiments {

struct ReproduceOptions;
struct ReproduceMeasurements;

enum class ExplanationVerdict {
  Holds,       // the data show what the explanation predicts
  DoesNot,     // they show otherwise
  CannotTell,  // the input was not measured, or its grid cannot show it
};
std::string to_string(ExplanationVerdict verdict);  // "holds", "does not", "cannot tell here"
// The same in the report's language (msgctxt "explanation verdict").
std::string verdict_text(ExplanationVerdict verdict, report::Lang lang);

struct ExplanationCheck {
  std::string id;           // "gradient_scale", "adam_variance", "warmup_raises_lr", "adaptive_edge"
  std::string explanation;  // the explanation and its paper, in the report's language
  std::string prediction;   // one sentence
  ExplanationVerdict verdict = ExplanationVerdict::CannotTell;
  std::string measured;             // the numbers that decided the verdict, or why it cannot be told
  std::string rule;                 // how the verdict follows from the numbers
  std::vector<std::string> header;  // a table of the deciding numbers (empty: none)
  std::vector<std::vector<std::string>> rows;
};

// 1. Experiment A's fc2 gradient profiles at initialization (nullptr: not measured), mean over the seeds.
ExplanationCheck check_gradient_scale(const GradNormProfile* post, const GradNormProfile* pre, int batch,
                                      report::Lang lang = report::Lang::En);

// 2. From the stability map's Post-LN cells without warm-up (map == nullptr: the map was not run). Holds when plain
// adam does not train at some lr and radam or adam+v0 trains at one of those; does not when neither trains at any
// of them; cannot tell when adam trains at every lr (nothing to rescue) or the map lacks a part it needs.
ExplanationCheck check_adam_variance(const StabilityMapOptions* map, const std::vector<StabilityCell>& cells,
                                     report::Lang lang = report::Lang::En);

// 3a. Per placement and optimizer of the stability map: the largest lr that trains at each warm-up, warm-ups in
// increasing order. A panel holds when that lr never falls as the warm-up grows and is larger at the longest
// warm-up than at the shortest; it cannot tell when it trains at no lr, or already at the map's largest lr with
// the shortest warm-up. The whole: does not when any panel does not, holds when at least one holds and none
// fails, cannot tell when no panel can tell (or the map has fewer than two warm-ups, or was not run).
ExplanationCheck check_warmup_raises_lr(const StabilityMapOptions* map, const std::vector<StabilityCell>& cells,
                                        report::Lang lang = report::Lang::En);

// 2 and 3a, the two checks that read the stability map alone, in report order: the verdicts of a map run on its own
// (stabilitymap.md and the command's summary), e.g. the full preset, outside a reproduction.
std::vector<ExplanationCheck> check_stabilitymap_explanations(const StabilityMapOptions& map,
                                                              const std::vector<StabilityCell>& cells,
                                                              report::Lang lang = report::Lang::En);

// 3b. The ratio lambda_max(P^-1 H) / edge_adam (edge_adam = (2 + 2 beta1) / ((1 - beta1) lr(t)), 38/lr for
// beta1 = 0.9) of each curvature run over the last half of its probed steps (step > 0 and at least half the last
// probed step). A run is near the threshold when every finite ratio there lies within [1/factor, factor]; it
// cannot tell with fewer than two finite ratios. Holds when every run that can tell is near, does not when any is
// not, cannot tell when none can (or curvature == nullptr: not run). beta1 only names the threshold in the text.
ExplanationCheck check_adaptive_edge(const CurvatureGridResult* curvature, double beta1,
                                     report::Lang lang = report::Lang::En, double factor = 2);

// All four, from the reproduction's measurements (experiment A at its main batch), in report order.
std::vector<ExplanationCheck> check_warmup_explanations(const ReproduceOptions& options,
                                                        const ReproduceMeasurements& measurements);

}  // namespace blocklab::experiments
