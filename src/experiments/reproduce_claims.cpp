// The claims table of the reproduction: each row is {claim, the source's value, a rule} and the rule
// turns the measurements into the measured value and a verdict. The source's numbers come from
// source_numbers() only.
#include <algorithm>
#include <cmath>
#include <functional>

#include "experiments/reproduce.h"
#include "experiments/reproduce_text.h"

namespace blocklab::experiments {

using namespace reproduce_text;

const SourceNumbers& source_numbers() {
  static const SourceNumbers numbers;
  return numbers;
}

std::string to_string(Verdict v) {
  switch (v) {
    case Verdict::Agrees: return "agrees";
    case Verdict::Partly: return "partly";
    case Verdict::Differs: return "differs";
    case Verdict::NotComparable: return "n/a";
    case Verdict::None: return "";
  }
  return "";
}

const ClaimRow* find_claim(const std::vector<ClaimRow>& rows, const std::string& id) {
  for (const ClaimRow& r : rows)
    if (r.id == id) return &r;
  return nullptr;
}

namespace {

// What the rules read: the measurements, with the runs of each cell and the main gradient profiles
// picked out once.
struct Inputs {
  const ReproduceOptions& options;  // options.lang: the language of the row texts
  const ReproduceMeasurements& m;
  const GradNormProfile* post_profile = nullptr;  // experiment A at the main batch size
  const GradNormProfile* pre_profile = nullptr;
  Runs post0, postw, pre0, prew;  // experiment B: placement x {no warm-up, warm-up}
};

// "0.461 (seeds 0.45-0.47)": the last block's mean value and its spread over the seeds.
std::string last_block_with_seed_range(const GradNormProfile& p, report::Lang lang) {
  double lo = p.per_seed.front().back(), hi = lo;
  for (const auto& s : p.per_seed) lo = std::min(lo, s.back()), hi = std::max(hi, s.back());
  return report::tr(lang, "{1} (seeds {2}-{3})", {fmt(p.mean.back(), "%.3f"), fmt(lo, "%.2f"), fmt(hi, "%.2f")});
}

std::string first_to_last(const GradNormProfile& p) {
  return fmt(p.mean.front(), "%.2f") + " -> " + fmt(p.mean.back(), "%.2f") + " (" + fmt(p.last_over_first(), "%.2f") +
         ")";
}

std::string numbers_text(const std::vector<double>& values, const char* format, const std::string& sep) {
  std::vector<std::string> items;
  for (double v : values) items.push_back(fmt(v, format));
  return join(items, sep);
}

void set(ClaimRow& row, Verdict verdict, const std::string& text) {
  row.verdict = verdict;
  row.verdict_text = text;
}

// The verdict as the report prints it: "agrees", ... in the report's language (msgctxt "verdict").
std::string verdict_word(Verdict v, report::Lang lang) {
  switch (v) {
    case Verdict::Agrees:
      return report::trc(lang, "verdict", "agrees");
    case Verdict::Partly:
      return report::trc(lang, "verdict", "partly");
    case Verdict::Differs:
      return report::trc(lang, "verdict", "differs");
    case Verdict::NotComparable:
      return report::trc(lang, "verdict", "n/a");
    case Verdict::None: return "";
  }
  return "";
}

// The verdict's own word ("agrees"), filled in by judge_claims in the report's language.
void set(ClaimRow& row, Verdict verdict) { set(row, verdict, std::string()); }

std::string T(const Inputs& in, const char* msgid, std::initializer_list<std::string> args = {}) {
  return report::tr(in.options.lang, msgid, args);
}

// Step-numbered claims cannot be compared when the quick version trains another model and schedule.
bool not_comparable_when_quick(const Inputs& in, ClaimRow& row) {
  if (!in.options.quick) return false;
  set(row, Verdict::NotComparable, report::tr(in.options.lang, "n/a (quick: smaller model, other schedule)"));
  return true;
}

struct ClaimRule {
  std::string id, claim, source;  // claim and source in the report's language
  // Fills row.measured and the verdict; false leaves the row out (its measurements are missing).
  std::function<bool(const Inputs&, ClaimRow&)> judge;
};

std::vector<ClaimRule> claim_rules(report::Lang lang) {
  static const SourceNumbers& src = source_numbers();  // static: the rules use it without a capture
  std::vector<ClaimRule> rules;
  const auto t = [lang](const char* msgid, std::initializer_list<std::string> args = {}) {
    return report::tr(lang, msgid, args);
  };

  // ---- Experiment A: gradient norms at initialization ----
  rules.push_back({"A.post.last_block", t("A: Post-LN, fc2 gradient norm at the last block"),
                   fmt(src.post_last_block, "%.2f"), [](const Inputs& in, ClaimRow& row) {
                     if (!in.post_profile || !in.pre_profile) return false;
                     const GradNormProfile& p = *in.post_profile;
                     row.measured = last_block_with_seed_range(p, in.options.lang);
                     set(row, Verdict::None,
                         T(in, "{1} (scale depends on the batch)", {pct_diff(p.mean.back(), src.post_last_block)}));
                     return true;
                   }});
  rules.push_back({"A.post.grows", t("A: Post-LN profile grows toward the output (last / first block)"), t("grows"),
                   [](const Inputs& in, ClaimRow& row) {
                     if (!in.post_profile || !in.pre_profile) return false;
                     row.measured = first_to_last(*in.post_profile);
                     set(row, in.post_profile->last_over_first() > 1 ? Verdict::Agrees : Verdict::Differs);
                     return true;
                   }});
  rules.push_back({"A.pre.last_block", t("A: Pre-LN, fc2 gradient norm at the last block"),
                   fmt(src.pre_last_block, "%.2f"), [](const Inputs& in, ClaimRow& row) {
                     if (!in.post_profile || !in.pre_profile) return false;
                     const GradNormProfile& p = *in.pre_profile;
                     row.measured = last_block_with_seed_range(p, in.options.lang);
                     set(row, Verdict::None,
                         T(in, "{1} (scale depends on the batch)", {pct_diff(p.mean.back(), src.pre_last_block)}));
                     return true;
                   }});
  rules.push_back({"A.pre.shrinks_slightly", t("A: Pre-LN profile does not grow, shrinks slightly (last / first)"),
                   t("shrinks slightly"), [](const Inputs& in, ClaimRow& row) {
                     if (!in.post_profile || !in.pre_profile) return false;
                     const double ratio = in.pre_profile->last_over_first();
                     row.measured = first_to_last(*in.pre_profile);
                     if (ratio >= 1) {
                       set(row, Verdict::Differs);
                     } else if (ratio > 0.67) {
                       set(row, Verdict::Agrees);
                     } else {
                       const ReferenceGradNorm* reference = nullptr;
                       for (const ReferenceGradNorm& r : src.reference_gradnorms)
                         if (r.batch == 16) reference = &r;
                       set(row, Verdict::Partly,
                           reference ? T(in,
                                         "partly: does not grow, but falls by more than 'slightly' (so does the "
                                         "PyTorch reference: {1} -> {2} at batch 16)",
                                         {fmt(reference->pre_first, "%.2f"), fmt(reference->pre_last, "%.2f")})
                                     : T(in, "partly: does not grow, but falls by more than 'slightly'"));
                     }
                     return true;
                   }});

  // ---- Experiment B: with and without warm-up ----
  rules.push_back({"B.post_no_warmup.final_loss", t("B: Post-LN, no warm-up: final loss (ln 64 = 4.159)"),
                   numbers_text(src.post_no_warmup_final, "%.4f", " / "), [](const Inputs& in, ClaimRow& row) {
                     row.measured = losses_text(in.post0, -1) + " (" + outcomes_text(in.post0, in.options.lang) + ")";
                     const bool stuck = !in.post0.empty() && count_outcome(in.post0, probe::Outcome::NeverStarted) ==
                                                                 static_cast<int>(in.post0.size());
                     if (stuck)
                       set(row, Verdict::Agrees, T(in, "agrees (never started)"));
                     else
                       set(row, Verdict::Differs);
                     return true;
                   }});
  rules.push_back({"B.post_warmup.losses", t("B: Post-LN, warm-up: loss at steps 100 / 200 / 300"),
                   src.post_warmup_losses, [](const Inputs& in, ClaimRow& row) {
                     row.measured = T(in, "step 100: {1}; 200: {2}; 300: {3}",
                                      {losses_text(in.postw, 100, "%.3f"), losses_text(in.postw, 200, "%.3f"),
                                       losses_text(in.postw, 300, "%.3f")});
                     if (not_comparable_when_quick(in, row)) return true;
                     if (count_outcome(in.postw, probe::Outcome::NeverStarted) > 0)
                       set(row, Verdict::Differs);
                     else
                       set(row, Verdict::None, T(in, "see figure"));
                     return true;
                   }});
  rules.push_back({"B.post_warmup.outcomes", t("B: Post-LN, warm-up: outcomes"),
                   report::trc(lang, "source", src.post_warmup_outcomes),  // the source's words, po/ko.po msgctxt "source"
                   [](const Inputs& in, ClaimRow& row) {
                     row.measured =
                         T(in, "{1}; final {2}", {outcomes_text(in.postw, in.options.lang), losses_text(in.postw, -1)});
                     if (count_outcome(in.postw, probe::Outcome::Collapsed) > 0)
                       set(row, Verdict::Agrees, T(in, "agrees (a collapse)"));
                     else if (count_outcome(in.postw, probe::Outcome::NeverStarted) > 0)
                       set(row, Verdict::Differs, T(in, "differs (did not start)"));
                     else
                       set(row, Verdict::Partly, T(in, "partly (no collapse)"));
                     return true;
                   }});
  rules.push_back({"B.post.failed", t("B: Post-LN runs that failed (did not start, collapsed or diverged)"),
                   t("{1} of {2}", {std::to_string(src.post_failed), std::to_string(src.post_runs)}),
                   [](const Inputs& in, ClaimRow& row) {
                     int failed = 0, total = 0;
                     for (const Runs* cell : {&in.post0, &in.postw})
                       for (const auto* r : *cell) {
                         ++total;
                         if (r->curve.outcome != probe::Outcome::Learned && r->curve.outcome != probe::Outcome::Learning)
                           ++failed;
                       }
                     row.measured = T(in, "{1} of {2}", {std::to_string(failed), std::to_string(total)});
                     set(row, failed == src.post_failed && total == src.post_runs ? Verdict::Agrees : Verdict::Differs);
                     return true;
                   }});
  rules.push_back({"B.pre_no_warmup.loss_at_100", t("B: Pre-LN, no warm-up: loss at step 100"),
                   fmt(src.pre_no_warmup_at_100.first, "%.2f") + "-" + fmt(src.pre_no_warmup_at_100.second, "%.2f"),
                   [](const Inputs& in, ClaimRow& row) {
                     row.measured = losses_text(in.pre0, 100);
                     if (!not_comparable_when_quick(in, row)) set(row, Verdict::None);
                     return true;
                   }});
  rules.push_back({"B.pre_no_warmup.below_at_step",
                   t("B: Pre-LN, no warm-up: every seed below {1} at step {2}",
                     {fmt(src.pre_no_warmup_below, "%g"), std::to_string(src.pre_no_warmup_step)}),
                   t("yes"), [](const Inputs& in, ClaimRow& row) {
                     row.measured = losses_text(in.pre0, src.pre_no_warmup_step);
                     if (not_comparable_when_quick(in, row)) return true;
                     if (max_loss_at(in.pre0, src.pre_no_warmup_step) < src.pre_no_warmup_below)
                       set(row, Verdict::Agrees);
                     else
                       set(row, Verdict::Differs, T(in, "differs (later)"));
                     return true;
                   }});
  rules.push_back({"B.pre_no_warmup.first_below", t("B: Pre-LN, no warm-up: first step below 0.01"),
                   t("before {1}", {std::to_string(src.pre_no_warmup_step)}), [](const Inputs& in, ClaimRow& row) {
                     row.measured = first_steps_below_text(in.pre0, in.options.lang);
                     if (!not_comparable_when_quick(in, row)) set(row, Verdict::None);
                     return true;
                   }});
  rules.push_back({"B.pre_no_warmup.final_loss", t("B: Pre-LN, no warm-up: final loss"),
                   t("about {1}", {fmt(src.pre_no_warmup_final, "%g")}), [](const Inputs& in, ClaimRow& row) {
                     row.measured = losses_text(in.pre0, -1, "%.5f") + " (" + outcomes_text(in.pre0, in.options.lang) + ")";
                     const bool learned = !in.pre0.empty() && count_outcome(in.pre0, probe::Outcome::Learned) ==
                                                                  static_cast<int>(in.pre0.size());
                     if (learned)
                       set(row, Verdict::Agrees, T(in, "agrees (all learned)"));
                     else
                       set(row, Verdict::Differs);
                     return true;
                   }});
  rules.push_back({"B.pre_warmup.final_loss", t("B: Pre-LN, warm-up: final loss"), t("(figure only)"),
                   [](const Inputs& in, ClaimRow& row) {
                     row.measured = losses_text(in.prew, -1, "%.5f") + " (" + outcomes_text(in.prew, in.options.lang) + ")";
                     set(row, Verdict::None);
                     return true;
                   }});

  // ---- Problem 9: standardizing ----
  auto parenthesized = [](const std::vector<double>& v, const char* format) {
    std::string s = "(";
    s += numbers_text(v, format, ", ");
    return s + ")";
  };
  auto row_text = [parenthesized](const std::vector<double>& v) { return parenthesized(v, "%.4g"); };
  auto measured_row = [parenthesized](const ScoreTable& t, size_t r) {
    return parenthesized({t.values[r][0], t.values[r][1], t.values[r][2]}, "%.3f");
  };
  rules.push_back({"9.per_student.A", t("Problem 9: A per student"), row_text(src.per_row_a),
                   [measured_row](const Inputs& in, ClaimRow& row) {
                     row.measured = measured_row(in.m.per_row, 0);
                     set(row, std::fabs(in.m.per_row.values[0][0] - src.per_row_a[0]) < 1e-3 ? Verdict::Agrees
                                                                                              : Verdict::Differs);
                     return true;
                   }});
  rules.push_back({"9.per_student.C", t("Problem 9: C per student"), row_text(src.per_row_c),
                   [measured_row](const Inputs& in, ClaimRow& row) {
                     row.measured = measured_row(in.m.per_row, 2);
                     set(row, std::fabs(in.m.per_row.values[2][1] - src.per_row_c[1]) < 1e-3 ? Verdict::Agrees
                                                                                              : Verdict::Differs);
                     return true;
                   }});
  rules.push_back({"9.per_subject", t("Problem 9: per subject over A, B"),
                   "A " + fmt(src.per_column_a, "%+.0f") + ", B " + fmt(src.per_column_b, "%+.0f"),
                   [](const Inputs& in, ClaimRow& row) {
                     const ScoreTable& t = in.m.per_column;
                     row.measured = "A " + fmt(t.values[0][0], "%+.0f") + ", B " + fmt(t.values[1][0], "%+.0f");
                     set(row, std::fabs(t.values[0][0] - src.per_column_a) < 1e-9 ? Verdict::Agrees : Verdict::Differs);
                     return true;
                   }});

  // ---- Problem 10: the residual stream ----
  std::vector<std::string> depths;
  for (int d : src.walk_depths) depths.push_back(std::to_string(d));
  rules.push_back({"10.walk.length", t("Problem 10: mean length after L = {1} blocks", {join(depths, ", ")}),
                   numbers_text(src.walk_lengths, "%.3f", " / "), [](const Inputs& in, ClaimRow& row) {
                     const std::vector<double>& length = in.m.residual.walk.mean_length;
                     if (length.empty()) return false;
                     std::vector<std::string> measured;
                     bool all_close = true;
                     for (size_t i = 0; i < src.walk_depths.size(); ++i) {
                       const int d = src.walk_depths[i];
                       if (d < static_cast<int>(length.size())) {
                         measured.push_back(fmt(length[d], "%.3f"));
                         all_close = all_close && std::fabs(length[d] / src.walk_lengths[i] - 1) < 0.02;
                       } else {
                         measured.push_back("n/a");
                         all_close = false;
                       }
                     }
                     row.measured = join(measured, " / ");
                     if (all_close)
                       set(row, Verdict::Agrees, T(in, "agrees (within 2%)"));
                     else
                       set(row, Verdict::Differs);
                     return true;
                   }});
  rules.push_back({"10.walk.change", t("Problem 10: relative change made by the deepest block"), t("about 1/6"),
                   [](const Inputs& in, ClaimRow& row) {
                     const std::vector<double>& change = in.m.residual.walk.mean_relative_change;
                     if (change.empty()) return false;
                     const int deepest = static_cast<int>(change.size()) - 1;
                     row.claim = T(in, "Problem 10: relative change made by block {1}", {std::to_string(deepest)});
                     row.measured = fmt(change[deepest], "%.3f");
                     const bool close =
                         deepest == src.walk_change_block && std::fabs(change[deepest] - src.walk_change) < 0.02;
                     set(row, close ? Verdict::Agrees : Verdict::None);
                     return true;
                   }});
  // The source's Qwen3-VL-4B numbers are not a row: the reproduction runs no such model. They are drawn beside
  // the random walk in the residual figure as the source's points; `blocklab probe residual --model DIR`
  // measures a checkout of that model.
  return rules;
}

}  // namespace

std::vector<ClaimRow> judge_claims(const ReproduceOptions& options, const ReproduceMeasurements& m) {
  Inputs in{options, m, nullptr, nullptr, {}, {}, {}, {}};
  if (!m.gradnorms.empty()) {
    const GradNormResult& main = m.gradnorms.at(main_batch(m.gradnorms, options.gradnorm_main_batch));
    in.post_profile = profile(main, NormPlacement::Post);
    in.pre_profile = profile(main, NormPlacement::Pre);
  }
  in.post0 = cell_runs(m.sweep, "post", 0);
  in.postw = cell_runs(m.sweep, "post", options.warmup);
  in.pre0 = cell_runs(m.sweep, "pre", 0);
  in.prew = cell_runs(m.sweep, "pre", options.warmup);

  std::vector<ClaimRow> rows;
  for (const ClaimRule& rule : claim_rules(options.lang)) {
    ClaimRow row;
    row.id = rule.id;
    row.claim = rule.claim;
    row.source = rule.source;
    if (!rule.judge(in, row)) continue;
    if (row.verdict_text.empty()) row.verdict_text = verdict_word(row.verdict, options.lang);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace blocklab::experiments
