#include "experiments/gradnorm.h"

#include <sstream>

#include "data/copy_task.h"
#include "experiments/labels.h"
#include "experiments/manifest.h"
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
}  // namespace

std::vector<probe::ParameterGradNorm> gradnorms_at_init(const RunConfig& given, int batches) {
  if (batches < 1) throw Error("batches must be >= 1, got " + std::to_string(batches));
  RunConfig config = given;
  resolve(config);  // the sequence length comes from the task
  Model<float> model(config.model);
  Activations<float> acts = model.make_activations(config.batch, config.model.seq_len);
  model.init_weights(config.seed);
  CopyTask task(config.model.vocab, config.copy_len, Trainer::data_seed(config.seed));
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

io::PlotFigure gradnorm_figure(const std::vector<GradNormProfile>& profiles, const RunConfig& base, int batches) {
  io::PlotFigure fig;
  fig.width = 1050;
  fig.height = 620;
  io::PlotPanel panel;
  std::ostringstream title;
  title << "MLP second-layer weight: gradient norm at initialization\n"
        << base.model.layers << " blocks x " << base.model.width << ", " << base.model.heads << " heads, V=" << base.model.vocab
        << " n=" << base.copy_len << ", batch " << base.batch << ", " << to_string(base.model.effective_init()) << ", emb N(0, "
        << base.model.embed_init_std << "^2)" << (batches > 1 ? ", " + std::to_string(batches) + " batches" : "");
  panel.title = title.str();
  panel.xlabel = "block";
  panel.ylabel = "|| grad of blocks.N.mlp.fc2.weight ||  (Frobenius)";
  panel.legend = "outside right top";
  double hi = 0;
  for (size_t p = 0; p < profiles.size(); ++p) {
    const GradNormProfile& prof = profiles[p];
    const std::string color = io::palette(p);
    const std::string label = placement_label(prof.placement);
    std::vector<double> blocks;
    for (size_t b = 0; b < prof.mean.size(); ++b) blocks.push_back(static_cast<double>(b + 1));
    for (size_t s = 0; s < prof.per_seed.size(); ++s) {
      io::PlotSeries ser{blocks, prof.per_seed[s], s == 0 ? label + ", each seed" : "", color, 1.0, 1, false};
      panel.series.push_back(ser);
      for (double v : prof.per_seed[s]) hi = std::max(hi, v);
    }
    panel.series.push_back({blocks, prof.mean, label + ", mean of " + std::to_string(prof.per_seed.size()) + " seeds",
                            color, 3.5, 1, true});
  }
  panel.x_range = std::make_pair(0.5, profiles.empty() ? 1.5 : profiles[0].mean.size() + 0.5);
  panel.y_range = std::make_pair(0.0, hi * 1.1);
  fig.panels.push_back(panel);
  return fig;
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
  size_t index = 0;
  for (NormPlacement placement : options.placements) {
    GradNormProfile prof{placement, {}, std::vector<double>(base.model.layers, 0.0)};
    for (uint64_t seed : options.seeds) {
      const RunConfig& c = configs[index++];
      const auto norms = gradnorms_at_init(c, options.batches);
      std::vector<double> fc2(base.model.layers, 0.0);
      for (const auto& p : norms) {
        csv.row({to_string(placement), std::to_string(seed), p.block > 0 ? std::to_string(p.block) : "", p.name,
                 io::csv_number(p.norm)});
        if (is_fc2(p)) fc2[p.block - 1] = p.norm;
      }
      if (log)
        log(placement_label(placement) + " seed " + std::to_string(seed) + ": fc2 gradient norm block 1 " +
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

  result.figure = io::render_figure(gradnorm_figure(result.profiles, base, options.batches), dir + "/gradnorm");
  if (log) log(result.figure.drawn ? "wrote " + dir + "/gradnorm.{csv,png,svg}" : result.figure.message);
  return result;
}

}  // namespace blocklab::experiments
