#include "experiments/gradnorm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "data/copy_task.h"
#include "report/labels.h"
#include "experiments/manifest.h"
#include "experiments/reproduce_text.h"
#include "io/atomic_file.h"
#include "io/csv.h"
#include "model/model.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/threads.h"

namespace blocklab::experiments {

namespace {
const std::string kFc2 = "mlp.fc2.weight";

bool is_fc2(const probe::ParameterGradNorm& p) {
  return p.block > 0 && p.name.size() > kFc2.size() && p.name.compare(p.name.size() - kFc2.size(), kFc2.size(), kFc2) == 0;
}

// The init the shown placements ran with: "xavier" when it is one scheme for all of them, else the base
// scheme and the exceptions ("xavier (deepnorm: DeepNorm, tfixup: T-Fixup)"), as init = auto resolves it.
std::string init_text(const RunConfig& base, const std::vector<NormPlacement>& placements, report::Lang lang) {
  ModelConfig m = base.model;
  const auto name = [lang](InitScheme scheme) {
    return scheme == InitScheme::Xavier ? report::tr(lang, "xavier") : to_string(scheme);
  };
  const std::string common = name(m.effective_init());
  std::vector<std::string> exceptions;
  for (NormPlacement placement : placements) {
    m.norm_placement = placement;
    const std::string own = name(m.effective_init());
    if (own != common) exceptions.push_back(own + ": " + report::placement_label(placement));
  }
  return exceptions.empty() ? common : common + " (" + reproduce_text::join(exceptions, ", ") + ")";
}

template <typename Profiles>
std::vector<NormPlacement> placements_of(const Profiles& profiles) {
  std::vector<NormPlacement> placements;
  for (const auto& p : profiles) placements.push_back(p.placement);
  return placements;
}

// "24 blocks x 128, 4 heads, V=64 n=32, batch 16, xavier, emb N(0, 1^2)": the second title line.
std::string model_line(const RunConfig& base, int batches, const std::vector<NormPlacement>& placements,
                       report::Lang lang = report::Lang::En) {
  std::ostringstream std_text;
  std_text << base.model.embed_init_std;
  const std::string layers = std::to_string(base.model.layers), width = std::to_string(base.model.width),
                    heads = std::to_string(base.model.heads), vocab = std::to_string(base.model.vocab),
                    n = std::to_string(base.copy_len), batch = std::to_string(base.batch),
                    init = init_text(base, placements, lang);
  if (batches > 1)
    return report::tr(lang, "{1} blocks x {2}, {3} heads, V={4} n={5}, batch {6}, {7}, emb N(0, {8}^2), {9} batches",
                      {layers, width, heads, vocab, n, batch, init, std_text.str(), std::to_string(batches)});
  return report::tr(lang, "{1} blocks x {2}, {3} heads, V={4} n={5}, batch {6}, {7}, emb N(0, {8}^2)",
                    {layers, width, heads, vocab, n, batch, init, std_text.str()});
}

// Ten colours that stay apart on white: Okabe-Ito without its yellow, then three of Paul Tol's.
// The first two are report::palette's first two: the default post,pre figure keeps its colours.
// A placement keeps its colour in every figure, whatever the list asked for.
const std::string& placement_color(NormPlacement placement) {
  static const std::vector<std::string> colors = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00",
                                                  "#56B4E9", "#000000", "#882255", "#999933", "#888888",
                                                  "#332288", "#44AA99"};
  const auto& all = report::all_placements();
  return colors[static_cast<size_t>(std::find(all.begin(), all.end(), placement) - all.begin()) % colors.size()];
}

// Mean over seeds, block by block; NaN where a seed has no such tensor.
std::vector<double> mean_over_seeds(const std::vector<std::vector<double>>& per_seed) {
  std::vector<double> mean(per_seed.empty() ? 0 : per_seed[0].size(), 0.0);
  for (const auto& seed_profile : per_seed)
    for (size_t b = 0; b < seed_profile.size(); ++b) mean[b] += seed_profile[b] / per_seed.size();
  return mean;
}
}  // namespace

std::string parameter_family(const std::string& name) {
  const std::string prefix = "blocks.";
  if (name.compare(0, prefix.size(), prefix) != 0) return "";
  size_t i = prefix.size();
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == prefix.size() || i + 1 >= name.size() || name[i] != '.') return "";
  return name.substr(i + 1);
}

std::vector<probe::ParameterGradNorm> gradnorms_at_init(const RunConfig& given, int batches) {
  if (batches < 1) throw Error("batches must be >= 1, got " + std::to_string(batches));
  RunConfig config = given;
  resolve(config);  // the sequence length comes from the task
  Model<float> model(config.model);
  Activations<float> acts = model.make_activations(config.batch, config.model.seq_len);
  model.init_weights(config.seed);
  TaskStream task = make_task_stream(config, Trainer::data_seed(config.seed));
  Batch batch;
  std::vector<probe::ParameterGradNorm> mean;
  for (int k = 0; k < batches; ++k) {
    task.next(batch, config.batch);
    model.forward(acts, batch.inputs.data(), batch.targets.data(), batch.loss_mask.data());
    model.backward(acts);
    const auto norms = probe::parameter_grad_norms(model);
    if (k == 0) {
      mean = norms;
    } else {
      for (size_t i = 0; i < norms.size(); ++i) mean[i].norm += norms[i].norm;
    }
  }
  for (auto& p : mean) p.norm /= batches;
  return mean;
}

report::PlotFigure gradnorm_figure(const std::vector<GradNormProfile>& profiles, const RunConfig& base, int batches,
                               report::Lang lang) {
  report::PlotFigure fig;
  fig.width = 1050;
  fig.height = 620;
  report::PlotPanel panel;
  panel.title = report::tr(lang, "MLP second-layer weight: gradient norm at initialization") + "\n" +
                model_line(base, batches, placements_of(profiles), lang);
  panel.xlabel = report::tr(lang, "block");
  panel.ylabel = report::tr(lang, "|| grad of blocks.N.mlp.fc2.weight ||  (Frobenius)");
  panel.legend = "outside right top";
  double hi = 0;
  for (size_t p = 0; p < profiles.size(); ++p) {
    const GradNormProfile& prof = profiles[p];
    const std::string color = placement_color(prof.placement);
    const std::string label = report::placement_label(prof.placement, lang);
    std::vector<double> blocks;
    for (size_t b = 0; b < prof.mean.size(); ++b) blocks.push_back(static_cast<double>(b + 1));
    for (size_t s = 0; s < prof.per_seed.size(); ++s) {
      report::PlotSeries ser{blocks, prof.per_seed[s], s == 0 ? report::tr(lang, "{1}, each seed", {label}) : "",
                             color, 1.0, 1, false};
      panel.series.push_back(ser);
      for (double v : prof.per_seed[s]) hi = std::max(hi, v);
    }
    const std::string n = std::to_string(prof.per_seed.size());
    panel.series.push_back({blocks, prof.mean, report::tr(lang, "{1}, mean of {2} seeds", {label, n}), color, 3.5, 1, true});
  }
  panel.x_range = std::make_pair(0.5, profiles.empty() ? 1.5 : profiles[0].mean.size() + 0.5);
  panel.y_range = std::make_pair(0.0, hi * 1.1);
  fig.panels.push_back(panel);
  return fig;
}

report::PlotFigure gradnorm_family_figure(const GradNormFamily& family, const RunConfig& base, int batches) {
  report::PlotFigure fig;
  fig.width = 1100;
  fig.height = 620;
  report::PlotPanel panel;
  const size_t seeds = family.profiles.empty() ? 0 : family.profiles[0].per_seed.size();
  panel.title = "blocks.N." + family.name + ": gradient norm at initialization\n" + model_line(base, batches, placements_of(family.profiles)) +
                "; thin: each seed, thick: mean of " + std::to_string(seeds) + (seeds == 1 ? " seed" : " seeds");
  panel.xlabel = "block";
  panel.ylabel = "|| grad of blocks.N." + family.name + " ||  (Frobenius)";
  panel.legend = "outside right top";

  // A log axis when the positive values span two decades or more; zeros cannot be drawn on it.
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const auto& prof : family.profiles)
    for (const auto& seed_profile : prof.per_seed)
      for (double v : seed_profile)
        if (std::isfinite(v) && v > 0) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
  panel.log_y = hi > 0 && hi / lo >= 100;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  size_t blocks_max = 0;
  for (const GradNormProfile& prof : family.profiles) {
    const std::string color = placement_color(prof.placement);
    bool any_positive = false, any_zero = false;
    for (double v : prof.mean) {
      any_positive = any_positive || (std::isfinite(v) && v > 0);
      any_zero = any_zero || v == 0;
    }
    std::string label = report::placement_label(prof.placement);
    if (!any_positive) label += " (0 at every block)";
    else if (any_zero && panel.log_y) label += " (zeros not drawn)";
    auto drawn = [&](const std::vector<double>& ys) {
      std::vector<double> out = ys;
      if (panel.log_y)
        for (double& v : out)
          if (!(v > 0)) v = nan;
      return out;
    };
    std::vector<double> blocks;
    for (size_t b = 0; b < prof.mean.size(); ++b) blocks.push_back(static_cast<double>(b + 1));
    blocks_max = std::max(blocks_max, prof.mean.size());
    for (const auto& seed_profile : prof.per_seed)
      panel.series.push_back({blocks, drawn(seed_profile), "", color, 1.0, 1, false});
    panel.series.push_back({blocks, drawn(prof.mean), label, color, 3.5, 1, true});
  }
  panel.x_range = std::make_pair(0.5, blocks_max + 0.5);
  if (panel.log_y)
    panel.y_range = std::make_pair(std::pow(10.0, std::floor(std::log10(lo))), std::pow(10.0, std::ceil(std::log10(hi))));
  else
    panel.y_range = std::make_pair(0.0, hi > 0 ? hi * 1.1 : 1.0);
  fig.panels.push_back(panel);
  return fig;
}

std::string gradnorm_summary(const std::vector<GradNormProfile>& profiles, const RunConfig& base,
                             const std::vector<uint64_t>& seeds, int batches) {
  std::ostringstream md;
  const std::string last = std::to_string(base.model.layers);
  std::string seed_text;
  for (uint64_t s : seeds) seed_text += (seed_text.empty() ? "" : ",") + std::to_string(s);
  md << "# Gradient norm of the MLP second-layer weight at initialization: last block / first block\n\n"
     << "Does the gradient grow toward the output (Xiong et al. 2020, Fig. 3)? `blocks.N.mlp.fc2.weight`, "
     << model_line(base, batches, placements_of(profiles)) << "; mean of " << seeds.size() << (seeds.size() == 1 ? " seed" : " seeds") << " ("
     << seed_text << ").\n\n";
  md << "| placement | norm_placement | block 1 | block " << last << " | last / first |"
     << (seeds.size() > 1 ? " per seed (min - max) |" : "") << " toward the output |\n";
  md << "|---|---|--:|--:|--:|" << (seeds.size() > 1 ? "--:|" : "") << "---|\n";
  bool zero_note = false;
  for (const auto& prof : profiles) {
    const double ratio = prof.last_over_first();
    std::string verdict = "flat (within 10%)";
    if (!std::isfinite(ratio)) {
      verdict = "no gradient in block 1";
      if (prof.mean.front() == 0 && prof.mean.back() == 0) {
        verdict = "zero in both blocks";
        zero_note = true;
      }
    } else if (ratio > 1.1) {
      verdict = "grows";
    } else if (ratio < 1 / 1.1) {
      verdict = "shrinks";
    }
    md << "| " << report::placement_label(prof.placement) << " | `" << to_string(prof.placement) << "` | "
       << fmt(prof.mean.front()) << " | " << fmt(prof.mean.back()) << " | " << (std::isfinite(ratio) ? fmt(ratio, "%.3g") : "n/a") << " |";
    if (seeds.size() > 1) {
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (const auto& s : prof.per_seed) {
        const double r = s.back() / s.front();
        if (std::isfinite(r)) {
          lo = std::min(lo, r);
          hi = std::max(hi, r);
        }
      }
      md << " " << (hi >= lo ? fmt(lo, "%.3g") + " - " + fmt(hi, "%.3g") : "n/a") << " |";
    }
    md << " " << verdict << " |\n";
  }
  md << "\n\"grows\": last / first > 1.1; \"shrinks\": < 1/1.1.";
  if (zero_note) md << " \"zero in both blocks\": the branch is gated by 0 at initialization, so no gradient reaches its weights.";
  md << "\n";
  return md.str();
}

GradNormResult run_gradnorm(const GradNormOptions& options, const Log& log) {
  if (options.placements.empty()) throw Error("no norm placements given");
  if (options.seeds.empty()) throw Error("seeds: the list is empty");
  if (options.batches < 1) throw Error("batches must be >= 1, got " + std::to_string(options.batches));
  if (options.out.empty()) throw Error("no output directory given");
  RunConfig base = options.base;
  base.out = options.out;
  resolve(base);
  const std::vector<RunConfig> configs = configs_per_placement_and_seed(base, options.placements, options.seeds);
  nlohmann::json settings = results_json(base);  // seed and placement vary within the experiment
  for (const char* k : {"seed", "norm_placement"}) settings.erase(k);
  claim_output_dir(options.out, "gradnorm", settings, false);
  set_num_threads(base.threads);

  GradNormResult result;
  io::CsvWriter csv({"placement", "seed", "block", "parameter", "grad_norm"});
  // families[f].profiles.back() is the placement being measured while it has that family.
  std::map<std::string, size_t> family_index;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  size_t index = 0;
  for (NormPlacement placement : options.placements) {
    GradNormProfile prof{placement, {}, std::vector<double>(base.model.layers, 0.0)};
    for (size_t s = 0; s < options.seeds.size(); ++s) {
      const uint64_t seed = options.seeds[s];
      const RunConfig& c = configs[index++];
      const auto norms = gradnorms_at_init(c, options.batches);
      std::vector<double> fc2(base.model.layers, 0.0);
      for (const auto& p : norms) {
        csv.row({to_string(placement), std::to_string(seed), p.block > 0 ? std::to_string(p.block) : "", p.name,
                 io::csv_number(p.norm)});
        if (is_fc2(p)) fc2[p.block - 1] = p.norm;
        const std::string family = p.block > 0 ? parameter_family(p.name) : "";
        if (family.empty()) continue;
        auto [it, added] = family_index.emplace(family, result.families.size());
        if (added) result.families.push_back({family, {}, {}});
        GradNormFamily& fam = result.families[it->second];
        if (fam.profiles.empty() || fam.profiles.back().placement != placement)
          fam.profiles.push_back({placement, {}, {}});
        auto& per_seed = fam.profiles.back().per_seed;
        while (per_seed.size() <= s) per_seed.emplace_back(base.model.layers, nan);
        per_seed[s][p.block - 1] = p.norm;
      }
      if (log)
        log(report::placement_label(placement) + " seed " + std::to_string(seed) + ": fc2 gradient norm block 1 " +
            fmt(fc2.front()) + ", block " + std::to_string(base.model.layers) + " " + fmt(fc2.back()));
      prof.per_seed.push_back(fc2);
    }
    for (const auto& seed_profile : prof.per_seed)
      for (size_t b = 0; b < seed_profile.size(); ++b) prof.mean[b] += seed_profile[b] / prof.per_seed.size();
    result.profiles.push_back(std::move(prof));
  }
  const std::string dir = options.out;
  io::write_file_atomic(dir + "/gradnorm.csv", csv.text());

  std::vector<std::string> fc2_header = {"placement", "block", "mean"};
  for (uint64_t seed : options.seeds) fc2_header.push_back("seed_" + std::to_string(seed));
  io::CsvWriter fc2csv(fc2_header);
  for (const auto& prof : result.profiles)
    for (size_t b = 0; b < prof.mean.size(); ++b) {
      std::vector<std::string> row = {to_string(prof.placement), std::to_string(b + 1), io::csv_number(prof.mean[b])};
      for (const auto& s : prof.per_seed) row.push_back(io::csv_number(s[b]));
      fc2csv.row(row);
    }
  io::write_file_atomic(dir + "/gradnorm_fc2.csv", fc2csv.text());

  result.figure = report::render_figure(gradnorm_figure(result.profiles, base, options.batches, options.lang), dir + "/gradnorm");
  if (log) log(result.figure.drawn ? "wrote " + dir + "/gradnorm.{csv,png,svg}" : result.figure.message);

  for (GradNormFamily& fam : result.families) {
    for (GradNormProfile& prof : fam.profiles) prof.mean = mean_over_seeds(prof.per_seed);
    fam.figure = report::render_figure(gradnorm_family_figure(fam, base, options.batches), dir + "/gradnorm_" + fam.name);
  }
  result.summary = gradnorm_summary(result.profiles, base, options.seeds, options.batches);
  io::write_file_atomic(dir + "/gradnorm_summary.md", result.summary);
  if (log) {
    const auto undrawn = std::find_if(result.families.begin(), result.families.end(),
                                      [](const GradNormFamily& f) { return !f.figure.drawn; });
    log(undrawn == result.families.end()
            ? "wrote " + std::to_string(result.families.size()) + " family figures " + dir +
                  "/gradnorm_FAMILY.{png,svg} and " + dir + "/gradnorm_summary.md"
            : "wrote " + dir + "/gradnorm_summary.md; family figures: " + undrawn->figure.message);
  }
  return result;
}

}  // namespace blocklab::experiments
