#include "experiments/residual.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <utility>

#include "data/copy_task.h"
#include "report/labels.h"
#include "experiments/manifest.h"
#include "io/atomic_file.h"
#include "io/csv.h"
#include "io/metrics.h"
#include "model/model.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/rng.h"
#include "util/threads.h"

namespace blocklab::experiments {

namespace fs = std::filesystem;

namespace {

void random_unit(Rng& rng, std::vector<double>& v) {
  double sq = 0;
  for (double& x : v) {
    x = rng.normal();
    sq += x * x;
  }
  const double inv = 1.0 / std::sqrt(sq);
  for (double& x : v) x *= inv;
}

// The run's label and whether it is a Pre-LN run, from its config.json.
std::pair<std::string, bool> run_label(const fs::path& dir, report::Lang lang) {
  std::ifstream in(dir / "config.json");
  if (!in) return {dir.filename().string(), false};
  try {
    const auto j = nlohmann::json::parse(in);
    const std::string placement = j.value("norm_placement", std::string("?"));
    const int warmup = j.value("warmup", 0);
    std::string name = placement;
    try {
      name = report::placement_label(parse_norm_placement(placement), lang);
    } catch (const Error&) {
    }
    const std::string layers = std::to_string(j.value("layers", 0)), seed = std::to_string(j.value("seed", 0));
    const std::string s =
        warmup > 0 ? report::tr(lang, "{1} {2} blocks, seed {3}, warm-up {4}", {name, layers, seed, std::to_string(warmup)})
                   : report::tr(lang, "{1} {2} blocks, seed {3}", {name, layers, seed});
    return {s, placement == "pre"};
  } catch (const nlohmann::json::exception&) {
    return {dir.filename().string(), false};
  }
}

// A colour between two "#rrggbb" colours; t in [0, 1].
std::string ramp(const std::string& from, const std::string& to, double t) {
  auto channel = [](const std::string& c, int i) { return std::stoi(c.substr(1 + 2 * i, 2), nullptr, 16); };
  char buf[8];
  int rgb[3];
  for (int i = 0; i < 3; ++i) rgb[i] = static_cast<int>(std::lround(channel(from, i) + t * (channel(to, i) - channel(from, i))));
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return buf;
}

// Up to `count` indices spread over [0, n): always the first and the last.
std::vector<size_t> spread(size_t n, size_t count) {
  std::vector<size_t> idx;
  if (n == 0) return idx;
  if (n <= count) {
    for (size_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  for (size_t k = 0; k < count; ++k) idx.push_back(k * (n - 1) / (count - 1));
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  return idx;
}

}  // namespace

const std::vector<SourcePoint>& qwen_mean_vector_norms() {
  static const std::vector<SourcePoint> points = {{1, 5.9}, {20, 59.8}, {35, 533.6}};
  return points;
}

RandomWalkResult simulate_random_walk(const RandomWalkOptions& options) {
  if (options.dim < 1) throw Error("dim must be >= 1, got " + std::to_string(options.dim));
  if (options.trials < 1) throw Error("trials must be >= 1, got " + std::to_string(options.trials));
  if (options.depths.empty()) throw Error("depths: the list is empty");
  for (int d : options.depths)
    if (d < 1) throw Error("depths must be >= 1, got " + std::to_string(d));
  const int max_depth = *std::max_element(options.depths.begin(), options.depths.end());
  RandomWalkResult r;
  r.depths = options.depths;
  r.mean_length.assign(max_depth + 1, 0.0);
  r.mean_relative_change.assign(max_depth + 1, 0.0);
  Rng rng(options.seed);
  std::vector<double> h(options.dim), x(options.dim);
  for (int trial = 0; trial < options.trials; ++trial) {
    random_unit(rng, h);  // the start vector, length 1
    double length = 1.0;
    r.mean_length[0] += length;
    for (int l = 1; l <= max_depth; ++l) {
      random_unit(rng, x);  // what block l adds: length 1, random direction
      r.mean_relative_change[l] += 1.0 / length;
      double sq = 0;
      for (int i = 0; i < options.dim; ++i) {
        h[i] += x[i];
        sq += h[i] * h[i];
      }
      length = std::sqrt(sq);
      r.mean_length[l] += length;
    }
  }
  for (double& v : r.mean_length) v /= options.trials;
  for (double& v : r.mean_relative_change) v /= options.trials;
  r.mean_relative_change[0] = std::nan("");
  return r;
}

probe::ResidualNorms residual_norms_at_init(const RunConfig& given) {
  RunConfig config = given;
  resolve(config);  // the sequence length comes from the task
  Model<float> model(config.model);
  Activations<float> acts = model.make_activations(config.batch, config.model.seq_len);
  model.init_weights(config.seed);
  TaskStream task = make_task_stream(config, Trainer::data_seed(config.seed));
  Batch batch;
  task.next(batch, config.batch);
  model.forward_hidden(acts, batch.inputs.data());
  return probe::residual_norms(acts, config.model.width);
}

RunResidualProbe read_residual_probe(const std::string& run_dir, report::Lang lang) {
  const fs::path path = fs::path(run_dir) / "residual.csv";
  if (!fs::exists(path))
    throw Error(path.string() + ": not found (train the run with --probe-every N to write it)");
  const io::MetricsTable table = io::read_metrics(path.string());
  const int step = table.column("step"), layer = table.column("layer"), vec = table.column("mean_vector_norm"),
            tok = table.column("mean_token_norm");
  if (step < 0 || layer < 0 || vec < 0 || tok < 0)
    throw Error(path.string() + ": expected columns step,layer,mean_vector_norm,mean_token_norm");
  std::map<int, probe::ResidualNorms> by_step;
  for (const auto& row : table.rows) {
    auto& n = by_step[static_cast<int>(row[step])];
    const size_t l = static_cast<size_t>(row[layer]);
    if (l != n.mean_token_norm.size()) throw Error(path.string() + ": layers of step " + fmt(row[step], "%.0f") + " are not 0,1,2,...");
    n.mean_vector_norm.push_back(row[vec]);
    n.mean_token_norm.push_back(row[tok]);
  }
  if (by_step.empty()) throw Error(path.string() + ": no probes");
  RunResidualProbe p;
  p.dir = run_dir;
  std::tie(p.label, p.pre) = run_label(run_dir, lang);
  for (auto& [s, n] : by_step) {
    p.steps.push_back(s);
    p.norms.push_back(std::move(n));
  }
  return p;
}

report::PlotFigure walk_figure(const RandomWalkResult& walk, const RandomWalkOptions& options, report::Lang lang) {
  report::PlotFigure fig;
  fig.rows = 1;
  fig.cols = 2;
  fig.width = 1200;
  fig.height = 520;
  fig.title = report::tr(lang,
                     "Random-walk residual stream: start length 1, each block adds a random unit "
                     "vector (D={1}, {2} trials)",
                     {std::to_string(options.dim), std::to_string(options.trials)});
  const int max_depth = static_cast<int>(walk.mean_length.size()) - 1;
  report::PlotPanel len;
  len.title = report::tr(lang, "stream length after L blocks");
  len.xlabel = report::tr(lang, "blocks L");
  len.ylabel = report::tr(lang, "mean |h^(L)|");
  len.legend = "top left";
  report::PlotSeries sim, ref, marks;
  for (int l = 0; l <= max_depth; ++l) {
    sim.x.push_back(l);
    sim.y.push_back(walk.mean_length[l]);
    ref.x.push_back(l);
    ref.y.push_back(std::sqrt(l + 1.0));
  }
  for (int d : walk.depths) {
    marks.x.push_back(d);
    marks.y.push_back(walk.mean_length[d]);
  }
  sim.title = report::tr(lang, "simulated mean length");
  sim.color = report::palette(0);
  sim.line_width = 2.5;
  ref.title = "sqrt(L+1)";
  ref.color = "#555555";
  ref.dash = 2;
  ref.line_width = 1.5;
  marks.title = report::tr(lang, "the table's depths");
  marks.color = report::palette(1);
  marks.points = true;
  marks.no_line = true;
  for (int d : walk.depths) {
    char label[160];
    std::snprintf(label, sizeof label, "set label \"L=%d: %.3f (sqrt(%d) = %.3f)\" at %d,%.4f %s font \",10\"\n",
                  d, walk.mean_length[d], d + 1, std::sqrt(d + 1.0), d, walk.mean_length[d],
                  2 * d > max_depth ? "right offset -1.2,0.9" : "left offset 1.2,-0.9");
    len.raw += label;
  }
  ref.color = "#000000";
  len.series = {sim, ref, marks};
  len.x_range = std::make_pair(0.0, static_cast<double>(max_depth) + 1);
  report::PlotPanel rel;
  rel.title = report::tr(lang, "how much block l changes the stream");
  rel.xlabel = report::tr(lang, "block l");
  rel.ylabel = report::tr(lang, "mean |added| / |h^(l-1)|");
  rel.legend = "top right";
  report::PlotSeries rs, rref;
  for (int l = 1; l <= max_depth; ++l) {
    rs.x.push_back(l);
    rs.y.push_back(walk.mean_relative_change[l]);
    rref.x.push_back(l);
    rref.y.push_back(1.0 / std::sqrt(static_cast<double>(l)));
  }
  rs.title = report::tr(lang, "simulated");
  rs.color = report::palette(0);
  rs.line_width = 2.5;
  rref.title = "1/sqrt(l)";
  rref.color = "#555555";
  rref.dash = 2;
  rref.color = "#000000";
  rel.series = {rs, rref};
  rel.x_range = std::make_pair(0.0, static_cast<double>(max_depth) + 1);
  rel.y_range = std::make_pair(0.0, 1.1);
  fig.panels = {len, rel};
  return fig;
}

report::PlotFigure residual_probe_figure(const std::vector<InitResidualProbe>& init,
                                     const std::vector<RunResidualProbe>& trained, const std::string& model_text,
                                     report::Lang lang) {
  report::PlotFigure fig;
  fig.rows = 2;
  fig.cols = 1;
  fig.width = 1150;
  fig.height = 1000;
  fig.title = model_text.empty()
                  ? report::tr(lang, "Residual stream per layer (0 = embeddings, l = after block l)")
                  : report::tr(lang, "Residual stream per layer (0 = embeddings, l = after block l); models at init: {1}",
                               {model_text});
  report::PlotPanel rel, vec;
  rel.title = report::tr(lang, "mean per-token norm, relative to the embeddings");
  rel.xlabel = report::tr(lang, "layer l");
  rel.ylabel = report::tr(lang, "mean |h_t^(l)| / mean |h_t^(0)|");
  rel.legend = "at screen 0.63, graph 1 left top";
  vec.title = report::tr(lang, "norm of the mean token vector");
  vec.xlabel = report::tr(lang, "layer l");
  vec.ylabel = report::tr(lang, "| mean_t h_t^(l) |  (log scale)");
  vec.log_y = true;
  vec.legend = "at screen 0.63, graph 1 left top";
  int max_layer = 1;
  auto add = [&](const probe::ResidualNorms& n, const std::string& label, const std::string& col, int dash, double width) {
    report::PlotSeries a, b;
    for (size_t l = 0; l < n.mean_token_norm.size(); ++l) {
      a.x.push_back(static_cast<double>(l));
      a.y.push_back(n.mean_token_norm[l] / n.mean_token_norm[0]);
      b.x.push_back(static_cast<double>(l));
      b.y.push_back(n.mean_vector_norm[l]);
    }
    max_layer = std::max(max_layer, static_cast<int>(n.mean_token_norm.size()) - 1);
    a.title = b.title = label;
    a.color = b.color = col;
    a.dash = b.dash = dash;
    a.line_width = b.line_width = width;
    rel.series.push_back(a);
    vec.series.push_back(b);
  };
  // Models at init in black/grey; each training run in one hue, lighter for earlier probes.
  for (const auto& p : init)
    add(p.norms,
        report::tr(lang, "{1}, {2} blocks, at init",
                   {report::placement_label(p.placement, lang), std::to_string(p.norms.mean_token_norm.size() - 1)}),
        p.placement == NormPlacement::Pre ? "#000000" : "#8c8c8c", 1, 3.0);
  size_t run_index = 0;
  for (const auto& run : trained) {
    const bool pre = run.pre;
    const std::vector<size_t> picks = spread(run.steps.size(), run_index == 0 ? 4 : 2);
    for (size_t k = 0; k < picks.size(); ++k) {
      const double shade = picks.size() > 1 ? static_cast<double>(k) / (picks.size() - 1) : 1.0;
      // light -> dark: orange for Pre-LN runs, blue for Post-LN runs
      const std::string col = pre ? ramp("#fdae6b", "#a63603", shade) : ramp("#9ecae1", "#08519c", shade);
      add(run.norms[picks[k]], report::tr(lang, "{1}, step {2}", {run.label, std::to_string(run.steps[picks[k]])}), col,
          1, 1.5 + shade);
    }
    ++run_index;
  }
  report::PlotSeries ref;
  for (int l = 0; l <= max_layer; ++l) {
    ref.x.push_back(l);
    ref.y.push_back(std::sqrt(l + 1.0));
  }
  ref.title = report::tr(lang, "sqrt(l+1): unit random additions");
  ref.color = "#555555";
  ref.dash = 2;
  rel.series.push_back(ref);
  report::PlotSeries qwen;
  for (const auto& p : qwen_mean_vector_norms()) {
    qwen.x.push_back(p.layer);
    qwen.y.push_back(p.value);
  }
  qwen.title = report::tr(lang, "Qwen3-VL-4B, trained (source)");
  qwen.color = "#000000";
  qwen.points = true;
  qwen.dash = 3;
  qwen.line_width = 1.2;
  vec.series.push_back(qwen);
  rel.raw = vec.raw = "set rmargin at screen 0.61\nset lmargin at screen 0.08\n";  // aligned x axes
  rel.x_range = std::make_pair(0.0, static_cast<double>(max_layer));
  vec.x_range = std::make_pair(0.0, std::max(36.0, static_cast<double>(max_layer)));
  fig.panels = {rel, vec};
  return fig;
}

ResidualResult run_residual(const ResidualOptions& options, const Log& log) {
  if (options.out.empty()) throw Error("no output directory given");
  ResidualResult result;
  std::vector<RunConfig> configs;
  RunConfig base = options.base;
  if (options.probe_init) {
    if (options.placements.empty()) throw Error("no norm placements given");
    if (options.seeds.empty()) throw Error("seeds: the list is empty");
    base.out = options.out;
    resolve(base);
    configs = configs_per_placement_and_seed(base, options.placements, options.seeds);
  }
  for (const std::string& dir : options.runs) result.trained.push_back(read_residual_probe(dir, options.lang));
  result.walk = simulate_random_walk(options.walk);  // validates the walk options
  claim_output_dir(options.out, "residual", nlohmann::json::object(), false);
  const fs::path dir(options.out);

  io::CsvWriter walk_csv({"depth", "mean_length", "sqrt_depth_plus_1", "mean_relative_change"});
  for (size_t l = 0; l < result.walk.mean_length.size(); ++l)
    walk_csv.row({std::to_string(l), io::csv_number(result.walk.mean_length[l]), io::csv_number(std::sqrt(l + 1.0)),
                  l == 0 ? "" : io::csv_number(result.walk.mean_relative_change[l])});
  io::write_file_atomic((dir / "residual_walk.csv").string(), walk_csv.text());
  if (log)
    for (int d : result.walk.depths)
      log("random walk, " + std::to_string(d) + " blocks: mean length " + fmt(result.walk.length_at(d), "%.3f") +
          " (sqrt(" + std::to_string(d + 1) + ") = " + fmt(std::sqrt(d + 1.0), "%.3f") + "); block " +
          std::to_string(d) + " changed the stream by " + fmt(result.walk.mean_relative_change[d], "%.3f"));
  result.walk_figure = report::render_figure(walk_figure(result.walk, options.walk, options.lang), (dir / "residual_walk").string());
  if (log && !result.walk_figure.drawn) log(result.walk_figure.message);

  if (options.probe_init) {
    set_num_threads(base.threads);
    io::CsvWriter init_csv({"placement", "seed", "layer", "mean_vector_norm", "mean_token_norm"});
    for (const RunConfig& c : configs) {
      InitResidualProbe p{c.model.norm_placement, c.seed, residual_norms_at_init(c)};
      for (size_t l = 0; l < p.norms.mean_token_norm.size(); ++l)
        init_csv.row({to_string(p.placement), std::to_string(p.seed), std::to_string(l),
                      io::csv_number(p.norms.mean_vector_norm[l]), io::csv_number(p.norms.mean_token_norm[l])});
      if (log)
        log(report::placement_label(p.placement) + " at init, seed " + std::to_string(p.seed) + ": mean token norm " +
            fmt(p.norms.mean_token_norm.front(), "%.2f") + " (embeddings) -> " +
            fmt(p.norms.mean_token_norm.back(), "%.2f") + " (after block " +
            std::to_string(p.norms.mean_token_norm.size() - 1) + ")");
      result.init.push_back(std::move(p));
    }
    io::write_file_atomic((dir / "residual_init.csv").string(), init_csv.text());
  }
  if (!result.init.empty() || !result.trained.empty()) {
    std::string model_text;
    if (options.probe_init)
      model_text = report::tr(options.lang, "width {1}, batch {2}",
                              {std::to_string(base.model.width), std::to_string(base.batch)});
    result.probe_figure =
        report::render_figure(residual_probe_figure(result.init, result.trained, model_text, options.lang), (dir / "residual_probe").string());
    if (log && !result.probe_figure.drawn) log(result.probe_figure.message);
  }
  if (log) log("wrote " + options.out + "/residual_*.csv and figures");
  return result;
}

}  // namespace blocklab::experiments
