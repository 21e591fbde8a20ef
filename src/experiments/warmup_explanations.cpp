// Three explanations of warm-up, each a prediction checked against this reproduction's measurements.
#include "experiments/warmup_explanations.h"

#include <algorithm>
#include <cmath>

#include "experiments/reproduce.h"
#include "experiments/reproduce_text.h"
#include "report/labels.h"

namespace blocklab::experiments {

using reproduce_text::join;

std::string to_string(ExplanationVerdict verdict) {
  switch (verdict) {
    case ExplanationVerdict::Holds:
      return "holds";
    case ExplanationVerdict::DoesNot:
      return "does not";
    case ExplanationVerdict::CannotTell:
      return "cannot tell here";
  }
  return "";
}

std::string verdict_text(ExplanationVerdict verdict, report::Lang lang) {
  switch (verdict) {
    case ExplanationVerdict::Holds:
      return report::trc(lang, "explanation verdict", "holds");
    case ExplanationVerdict::DoesNot:
      return report::trc(lang, "explanation verdict", "does not");
    case ExplanationVerdict::CannotTell:
      return report::trc(lang, "explanation verdict", "cannot tell here");
  }
  return "";
}

namespace {

// tr in one language: t("{1} blocks", {n}).
struct Translate {
  report::Lang lang;
  std::string operator()(const char* msgid, std::initializer_list<std::string> args = {}) const {
    return report::tr(lang, msgid, args);
  }
};

std::string lr_text(double lr) { return fmt(lr, "%g"); }

// "2/3": seeds learned of the cell's runs; "-" without runs.
std::string learned_text(const StabilityCell* c) {
  return c && c->runs > 0 ? std::to_string(c->learned) + "/" + std::to_string(c->runs) : "-";
}

bool trains(const StabilityCell* c) { return c && c->learned_side(); }

bool has_entry(const StabilityMapOptions& map, const std::string& name) {
  for (const OptimizerEntry& e : map.optimizers)
    if (to_string(e) == name) return true;
  return false;
}

std::string ratio_text(double r) { return fmt(r, "%.3g"); }

}  // namespace

// ---- 1. gradient scale at initialization ---------------------------------------------------------------

ExplanationCheck check_gradient_scale(const GradNormProfile* post, const GradNormProfile* pre, int batch,
                                      report::Lang lang) {
  const Translate t{lang};
  ExplanationCheck c;
  c.id = "gradient_scale";
  c.explanation = t("1. Gradient scale at initialization (Xiong et al. 2020)");
  c.prediction =
      t("At initialization the last block's fc2 gradient exceeds the first block's under Post-LN, and "
        "not under Pre-LN.");
  c.rule =
      t("Holds when the last / first ratio of the seed means is above 1 under Post-LN and at most 1 under "
        "Pre-LN; does not otherwise.");
  const auto usable = [](const GradNormProfile* p) { return p && !p->mean.empty() && !p->per_seed.empty(); };
  if (!usable(post) || !usable(pre)) {
    c.measured = t("Experiment A has no gradient profile of both Post-LN and Pre-LN.");
    return c;
  }
  const size_t blocks = post->mean.size();
  c.header = {t("placement"), t("block 1"), t("block {1}", {std::to_string(blocks)}), t("last / first"),
              t("last / first per seed")};
  for (const GradNormProfile* p : {post, pre}) {
    double lo = INFINITY, hi = -INFINITY;
    for (const std::vector<double>& seed : p->per_seed) {
      const double r = seed.back() / seed.front();
      lo = std::min(lo, r), hi = std::max(hi, r);
    }
    c.rows.push_back({report::placement_label(p->placement, lang), fmt(p->mean.front(), "%.3g"),
                      fmt(p->mean.back(), "%.3g"), ratio_text(p->last_over_first()),
                      ratio_text(lo) + " - " + ratio_text(hi)});
  }
  const double post_ratio = post->last_over_first(), pre_ratio = pre->last_over_first();
  c.measured =
      t("Experiment A, the fc2 weight's gradient norm at initialization, batch {1}, mean of {2} seeds: last "
        "/ first block {3} under Post-LN and {4} under Pre-LN.",
        {std::to_string(batch), std::to_string(post->per_seed.size()), ratio_text(post_ratio), ratio_text(pre_ratio)});
  c.verdict = post_ratio > 1 && pre_ratio <= 1 ? ExplanationVerdict::Holds : ExplanationVerdict::DoesNot;
  return c;
}

// ---- 2. the variance of Adam's adaptive learning rate -----------------------------------------------------

ExplanationCheck check_adam_variance(const StabilityMapOptions* map, const std::vector<StabilityCell>& cells,
                                     report::Lang lang) {
  const Translate t{lang};
  ExplanationCheck c;
  c.id = "adam_variance";
  c.explanation = t("2. The variance of Adam's adaptive learning rate early on (Liu et al. 2020, RAdam)");
  c.prediction =
      t("Without warm-up, RAdam or Adam with its second moment started from the first gradient squared "
        "(`adam+v0`) trains Post-LN at a learning rate where plain Adam does not.");
  c.rule =
      t("A cell trains when at least half of its seeds learned. Holds when `adam` without warm-up does not "
        "train Post-LN at some lr and `radam` or `adam+v0` without warm-up trains it at one of those; does not "
        "when neither trains at any of them; cannot tell when `adam` trains at every lr (nothing to rescue).");
  if (!map) {
    c.measured = t("The stability map was not run (`--no-stabilitymap`).");
    return c;
  }
  const bool has_post =
      std::find(map->placements.begin(), map->placements.end(), NormPlacement::Post) != map->placements.end();
  const bool has_no_warmup = std::find(map->warmups.begin(), map->warmups.end(), 0) != map->warmups.end();
  if (!has_post || !has_no_warmup) {
    c.measured = t("The stability map has no Post-LN runs without warm-up.");
    return c;
  }
  if (!has_entry(*map, "adam")) {
    c.measured = t("The stability map has no plain `adam` entry.");
    return c;
  }
  std::vector<std::string> rescuers;
  for (const char* name : {"radam", "adam+v0"})
    if (has_entry(*map, name)) rescuers.push_back(name);
  if (rescuers.empty()) {
    c.measured = t("The stability map has neither `radam` nor `adam+v0`.");
    return c;
  }
  std::vector<double> lrs = map->lrs;
  std::sort(lrs.rbegin(), lrs.rend());
  const auto cell = [&](const std::string& optimizer, double lr) {
    const StabilityCell* x = find_cell(cells, NormPlacement::Post, optimizer, 0, lr);
    return x && x->runs > 0 ? x : nullptr;
  };
  c.header = {"lr", "adam"};
  for (const std::string& r : rescuers) c.header.push_back(r);
  std::vector<double> failing;
  std::vector<std::string> adam_all;
  for (double lr : lrs) {
    std::vector<std::string> row = {lr_text(lr), learned_text(cell("adam", lr))};
    for (const std::string& r : rescuers) row.push_back(learned_text(cell(r, lr)));
    c.rows.push_back(row);
    if (const StabilityCell* a = cell("adam", lr)) {
      adam_all.push_back(lr_text(lr) + " (" + learned_text(a) + ")");
      if (!trains(a)) failing.push_back(lr);
    }
  }
  if (adam_all.empty()) {
    c.measured = t("The stability map has no Post-LN runs without warm-up.");
    c.header.clear();
    c.rows.clear();
    return c;
  }
  if (failing.empty()) {
    c.measured =
        t("Post-LN without warm-up: `adam` trains at every lr of the map ({1}), so there is nothing to "
          "rescue.",
          {join(adam_all, ", ")});
    return c;
  }
  std::vector<std::string> failing_text, parts;
  for (double lr : failing) failing_text.push_back(lr_text(lr) + " (" + learned_text(cell("adam", lr)) + ")");
  bool rescued = false;
  for (const std::string& r : rescuers) {
    std::vector<std::string> at, all;
    for (double lr : failing) {
      const StabilityCell* x = cell(r, lr);
      all.push_back(lr_text(lr) + " (" + learned_text(x) + ")");
      if (trains(x)) at.push_back(lr_text(lr) + " (" + learned_text(x) + ")");
    }
    rescued = rescued || !at.empty();
    parts.push_back(at.empty() ? t("`{1}` trains at none of them ({2})", {r, join(all, ", ")})
                               : t("`{1}` trains at {2}", {r, join(at, ", ")}));
  }
  c.measured = t("Post-LN without warm-up (seeds learned): `adam` does not train at lr {1}; there, {2}.",
                 {join(failing_text, ", "), join(parts, "; ")});
  c.verdict = rescued ? ExplanationVerdict::Holds : ExplanationVerdict::DoesNot;
  return c;
}

// ---- 3a. the largest learning rate that trains, by warm-up ----------------------------------------------------

ExplanationCheck check_warmup_raises_lr(const StabilityMapOptions* map, const std::vector<StabilityCell>& cells,
                                        report::Lang lang) {
  const Translate t{lang};
  ExplanationCheck c;
  c.id = "warmup_raises_lr";
  c.explanation = t("3a. Curvature: the largest stable learning rate (Kalra and Barkeshli 2024)");
  c.prediction = t("The largest learning rate that trains rises with the warm-up length.");
  c.rule =
      t("A cell trains when at least half of its seeds learned. A panel (placement and optimizer) holds when "
        "its largest training lr never falls as the warm-up grows and ends higher than at the shortest "
        "warm-up; it cannot tell when it trains at no lr, or already at the map's largest lr with the shortest "
        "warm-up. Holds when at least one panel holds and none fails; does not when any panel fails.");
  if (!map) {
    c.measured = t("The stability map was not run (`--no-stabilitymap`).");
    return c;
  }
  std::vector<int> warmups = map->warmups;
  std::sort(warmups.begin(), warmups.end());
  if (warmups.size() < 2 || map->lrs.empty()) {
    c.measured = t("The stability map has fewer than two warm-up lengths.");
    return c;
  }
  const double top_lr = *std::max_element(map->lrs.begin(), map->lrs.end());
  c.header = {t("placement, optimizer")};
  for (int w : warmups) c.header.push_back(w == 0 ? t("no warm-up") : t("warm-up {1} steps", {std::to_string(w)}));
  c.header.push_back(report::trc(lang, "explanation table", "verdict"));
  int holds = 0, fails = 0, cannot = 0;
  for (NormPlacement p : map->placements)
    for (const OptimizerEntry& e : map->optimizers) {
      const std::string name = to_string(e);
      std::vector<std::string> row = {report::placement_label(p, lang) + ", " + name};
      std::vector<double> largest;  // per warm-up; 0: trains at no lr
      bool any_runs = false;
      for (int w : warmups) {
        double best = 0;
        const StabilityCell* best_cell = nullptr;
        for (double lr : map->lrs) {
          const StabilityCell* x = find_cell(cells, p, name, w, lr);
          any_runs = any_runs || (x && x->runs > 0);
          if (trains(x) && lr > best) best = lr, best_cell = x;
        }
        largest.push_back(best);
        row.push_back(best_cell ? lr_text(best) + " (" + learned_text(best_cell) + ")" : t("none"));
      }
      std::string verdict;
      if (!any_runs) {
        ++cannot;
        verdict = verdict_text(ExplanationVerdict::CannotTell, lang) + " (" + t("no runs") + ")";
      } else if (*std::max_element(largest.begin(), largest.end()) == 0) {
        ++cannot;
        verdict = verdict_text(ExplanationVerdict::CannotTell, lang) + " (" + t("trains at no lr") + ")";
      } else if (largest.front() >= top_lr) {
        ++cannot;
        verdict = verdict_text(ExplanationVerdict::CannotTell, lang) + " (" +
                  t("trains at the largest lr already with the shortest warm-up") + ")";
      } else {
        bool never_falls = true;
        for (size_t i = 1; i < largest.size(); ++i) never_falls = never_falls && largest[i] >= largest[i - 1];
        const bool rises = never_falls && largest.back() > largest.front();
        ++(rises ? holds : fails);
        verdict = verdict_text(rises ? ExplanationVerdict::Holds : ExplanationVerdict::DoesNot, lang);
      }
      row.push_back(verdict);
      c.rows.push_back(row);
    }
  const int panels = holds + fails + cannot;
  c.measured =
      t("The largest lr at which at least half of the seeds learned, by warm-up (table): it rises with the "
        "warm-up in {1} of {2} panels, does not in {3}, and cannot tell in {4}.",
        {std::to_string(holds), std::to_string(panels), std::to_string(fails), std::to_string(cannot)});
  c.verdict = fails > 0   ? ExplanationVerdict::DoesNot
              : holds > 0 ? ExplanationVerdict::Holds
                          : ExplanationVerdict::CannotTell;
  return c;
}

std::vector<ExplanationCheck> check_stabilitymap_explanations(const StabilityMapOptions& map,
                                                              const std::vector<StabilityCell>& cells,
                                                              report::Lang lang) {
  return {check_adam_variance(&map, cells, lang), check_warmup_raises_lr(&map, cells, lang)};
}

// ---- 3b. Adam's preconditioned sharpness against its threshold ------------------------------------------------

ExplanationCheck check_adaptive_edge(const CurvatureGridResult* curvature, double beta1, report::Lang lang,
                                     double factor) {
  const Translate t{lang};
  const std::string edge = fmt((2 + 2 * beta1) / (1 - beta1), "%.3g"), factor_text = fmt(factor, "%g");
  ExplanationCheck c;
  c.id = "adaptive_edge";
  c.explanation = t("3b. Curvature: Adam's adaptive edge of stability (Cohen et al.)");
  c.prediction =
      t("After the first steps, Adam's preconditioned sharpness lambda_max(P^-1 H) stays near its "
        "stability threshold {1}/lr (beta1 = {2}).",
        {edge, fmt(beta1, "%g")});
  c.rule =
      t("Near: every ratio lambda_max(P^-1 H) / ({1}/lr(t)) over the last half of the probed steps (from half "
        "the last probed step on, step 0 left out) lies between 1/{2} and {2}. Holds when every run with at "
        "least two estimates there is near; does not when any of them is not.",
        {edge, factor_text});
  if (!curvature) {
    c.measured = t("The curvature experiment was not run (`--no-curvature`).");
    return c;
  }
  c.header = {t("case"), t("steps in the window"), t("ratio to {1}/lr, smallest - largest", {edge}),
              report::trc(lang, "explanation table", "verdict")};
  int near = 0, far = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (const CurvatureGridRun& run : curvature->runs) {
    const std::string placement = report::placement_label(run.placement, lang);
    const std::string name = run.warmup > 0 ? t("{1}, warm-up {2}", {placement, std::to_string(run.warmup)})
                                            : t("{1}, no warm-up", {placement});
    double last = 0;
    for (double s : run.steps) last = std::max(last, s);
    double run_lo = INFINITY, run_hi = -INFINITY, first = -1, until = -1;
    int n = 0;
    for (size_t i = 0; i < run.steps.size() && i < run.preconditioned.size() && i < run.edge_adam.size(); ++i) {
      const double step = run.steps[i];
      if (step <= 0 || step < last / 2) continue;
      const double r = run.preconditioned[i] / run.edge_adam[i];
      if (!std::isfinite(r) || !(run.edge_adam[i] > 0)) continue;
      ++n;
      run_lo = std::min(run_lo, r), run_hi = std::max(run_hi, r);
      if (first < 0) first = step;
      until = step;
    }
    std::vector<std::string> row = {
        name, n > 0 ? fmt(first, "%g") + "-" + fmt(until, "%g") + " (" + std::to_string(n) + ")" : "-",
        n > 0 ? ratio_text(run_lo) + " - " + ratio_text(run_hi) : "-"};
    if (n < 2) {
      row.push_back(verdict_text(ExplanationVerdict::CannotTell, lang));
    } else {
      const bool is_near = run_lo >= 1 / factor && run_hi <= factor;
      ++(is_near ? near : far);
      lo = std::min(lo, run_lo), hi = std::max(hi, run_hi);
      row.push_back(is_near ? t("near") : t("not near"));
    }
    c.rows.push_back(row);
  }
  if (near + far == 0) {
    c.measured = t("No curvature run has two finite estimates in the last half of its probed steps.");
    return c;
  }
  c.measured =
      t("Over the last half of the probed steps, lambda_max(P^-1 H) / ({1}/lr(t)) ranged from {2} to {3}; "
        "{4} of {5} runs stayed within a factor {6} of the threshold (table).",
        {edge, ratio_text(lo), ratio_text(hi), std::to_string(near), std::to_string(near + far), factor_text});
  c.verdict = far > 0 ? ExplanationVerdict::DoesNot : ExplanationVerdict::Holds;
  return c;
}

// ---- all four -------------------------------------------------------------------------------------------

std::vector<ExplanationCheck> check_warmup_explanations(const ReproduceOptions& options,
                                                        const ReproduceMeasurements& m) {
  const report::Lang L = options.lang;
  std::vector<ExplanationCheck> checks;
  const GradNormProfile *post = nullptr, *pre = nullptr;
  int batch = options.gradnorm_main_batch;
  if (!m.gradnorms.empty()) {
    batch = reproduce_text::main_batch(m.gradnorms, options.gradnorm_main_batch);
    post = reproduce_text::profile(m.gradnorms.at(batch), NormPlacement::Post);
    pre = reproduce_text::profile(m.gradnorms.at(batch), NormPlacement::Pre);
  }
  checks.push_back(check_gradient_scale(post, pre, batch, L));
  const StabilityMapOptions* map = m.stabilitymap ? &options.stabilitymap_options : nullptr;
  static const std::vector<StabilityCell> no_cells;
  const std::vector<StabilityCell>& cells = m.stabilitymap ? m.stabilitymap->cells : no_cells;
  checks.push_back(check_adam_variance(map, cells, L));
  checks.push_back(check_warmup_raises_lr(map, cells, L));
  checks.push_back(
      check_adaptive_edge(m.curvature ? &*m.curvature : nullptr, options.curvature_options.base.optimizer.beta1, L));
  return checks;
}

}  // namespace blocklab::experiments
