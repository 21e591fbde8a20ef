#include "experiments/reproduce.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "experiments/manifest.h"
#include "experiments/reproduce_text.h"
#include "io/atomic_file.h"
#include "util/error.h"

namespace blocklab::experiments {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// ---- presets -------------------------------------------------------------------------------------

ReproduceOptions reproduce_preset(bool quick) {
  ReproduceOptions o;
  o.quick = quick;
  RunConfig source;  // the defaults are the source's model: 24 x 128, 4 heads, V 64, n 32, Xavier, lr 1e-3
  source.steps = 1200;
  source.lr = 1e-3;
  source.weights = false;  // the grids' runs keep no model.safetensors (the report reads their metrics)
  o.gradnorm_model = source;
  o.residual_model = source;
  o.residual_model.batch = 16;
  o.seeds = {0, 1, 2};
  o.gradnorm_main_batch = 16;
  o.depthmap_options = depthmap_preset(quick);
  o.stabilitymap_options = stabilitymap_preset(true);  // in both versions: the full map would add ~10 h on 2 cores
  if (!quick) {
    o.depthmap_options.depths = {6, 12, 24};
    o.depthmap_options.seeds = {0};  // one seed inside the reproduction (the depth map's own full preset has three)
  }
  // Curvature: the first steps of the 2x2 grid (seed 0), the preconditioned sharpness on an 8-sequence batch,
  // Lanczos to a relative residual of 1e-3 in at most 20 products.
  o.curvature_options.curvature.max_iter = 20;
  o.curvature_options.curvature.tol = 1e-3;
  o.curvature_options.batch = 8;
  o.curvature_options.block_max_iter = 20;
  if (!quick) {
    o.gradnorm_batch_sizes = {4, 8, 16, 32};
    o.gradnorm_batches = 2;
    o.train = source;
    o.train.batch = 32;
    o.warmup = 400;
    o.probe_every = 100;
    o.depth_layers = {6, 12, 18, 24};
    o.depth_train = source;
    o.depth_train.batch = 16;
    o.depth_train.steps = 600;
    o.curvature_options.base = o.train;
    o.curvature_options.base.seed = 0;
    o.curvature_options.base.steps = 200;
    o.curvature_options.warmup = o.warmup;
    o.curvature_options.every = 20;
  } else {
    // Experiment A still measures the source's 24 x 128 model (one forward/backward per seed). The
    // training grid uses 12 blocks x width 64, sequences of 8+8 tokens and batch 8 for 400 steps
    // (warm-up 100): deep enough that Post-LN does not start without warm-up, small enough for minutes.
    o.gradnorm_batch_sizes = {16};
    o.gradnorm_batches = 1;
    o.train = source;
    o.train.model.layers = 12;
    o.train.model.width = 64;
    o.train.copy_len = 8;
    o.train.batch = 8;
    o.train.steps = 400;
    o.warmup = 100;
    o.probe_every = 50;
    o.curvature_options.base = o.train;
    o.curvature_options.base.seed = 0;
    o.curvature_options.base.steps = 150;
    o.curvature_options.warmup = o.warmup;
    o.curvature_options.every = 10;
  }
  return o;
}

void cap_training_steps(ReproduceOptions& o, int max_steps) {
  if (max_steps < 1) throw Error("max_steps must be >= 1, got " + std::to_string(max_steps));
  o.max_steps = max_steps;
  for (RunConfig* c : {&o.train, &o.depth_train, &o.depthmap_options.base, &o.stabilitymap_options.base,
                       &o.curvature_options.base})
    c->steps = std::min(c->steps, max_steps);
  o.probe_every = std::min(o.probe_every, max_steps);
  o.curvature_options.every = std::min(o.curvature_options.every, max_steps);
}

nlohmann::json reproduce_settings(const ReproduceOptions& o) {
  auto config = [](RunConfig c) {
    resolve(c);
    return results_json(c);
  };
  nlohmann::json j = {{"quick", o.quick},
                      {"gradnorm_model", config(o.gradnorm_model)},
                      {"gradnorm_batch_sizes", o.gradnorm_batch_sizes},
                      {"gradnorm_batches", o.gradnorm_batches},
                      {"seeds", o.seeds},
                      {"train", config(o.train)},
                      {"warmup", o.warmup},
                      {"probe_every", o.probe_every},
                      {"depth_layers", o.depth_layers},
                      {"walk", {{"dim", o.walk.dim}, {"trials", o.walk.trials}, {"depths", o.walk.depths}}},
                      {"residual_model", config(o.residual_model)}};
  if (o.max_steps > 0) j["max_steps"] = o.max_steps;  // absent otherwise, as in directories written before it
  if (!o.depth_layers.empty()) j["depth_train"] = config(o.depth_train);
  if (o.depthmap) j["depthmap"] = depthmap_settings(o.depthmap_options);
  if (o.stabilitymap) j["stabilitymap"] = stabilitymap_settings(o.stabilitymap_options);
  if (o.curvature) {
    const CurvatureGridOptions& c = o.curvature_options;
    j["curvature"] = {{"base", config(c.base)},          {"warmup", c.warmup},
                      {"every", c.every},                {"batch", c.batch},
                      {"max_iter", c.curvature.max_iter}, {"tol", c.curvature.tol},
                      {"block_max_iter", c.block_max_iter}};
  }
  return j;
}

// ---- problem 11: the block forms ------------------------------------------------------------------

namespace {

// One element of a block diagram, bottom to top: a norm, a sub-layer's F, or the residual addition.
struct DiagramElement {
  enum Kind { Norm, Attention, Mlp, Add } kind;
  bool on_stream = false;  // a norm of the stream itself (Post-LN's), not of a branch's input or output
  bool opens_branch = false;  // the first element of a sub-layer's branch: its skip starts below it
};

// The elements of a block as its design's plan says (model/designs.h): per sub-layer [in norm] F [out norm] +
// [after norm].
std::vector<DiagramElement> block_elements(const ModelConfig& c) {
  std::vector<DiagramElement> e;
  for (Sublayer which : {Sublayer::Attention, Sublayer::Mlp}) {
    const SublayerPlan p = c.sublayer_plan(0, which);
    if (p.in_norm) e.push_back({DiagramElement::Norm, false, true});
    e.push_back({which == Sublayer::Attention ? DiagramElement::Attention : DiagramElement::Mlp, false, !p.in_norm});
    if (p.out_norm) e.push_back({DiagramElement::Norm});
    e.push_back({DiagramElement::Add});
    if (p.after_norm) e.push_back({DiagramElement::Norm, true});
  }
  return e;
}

struct DiagramText {
  std::string attention, norm, entry, middle, top, note;  // middle: the formula beside the second skip
};

// A block drawn on a 10 x 12 canvas (gnuplot objects, labels and arrows): its elements evenly spaced up the
// middle, the residual stream's arrows in red (from the entry, an addition or a stream norm), each sub-layer's
// skip around its branch on the right.
std::string block_diagram(const ModelConfig& c, const DiagramText& text) {
  const char* stream = "#a5003c";
  const char* dark = "#333333";
  std::ostringstream g;
  int id = 100;
  auto arrow = [&](double x1, double y1, double x2, double y2, const char* color, bool head) {
    g << "set arrow from " << x1 << "," << y1 << " to " << x2 << "," << y2 << (head ? " head filled size 0.25,20" : " nohead")
      << " lw 2.2 lc rgb \"" << color << "\" back\n";
  };
  auto label = [&](double x, double y, const std::string& t, const char* opts) {
    g << "set label " << ++id << " \"" << t << "\" at " << x << "," << y << " " << opts << " front\n";
  };
  const std::vector<DiagramElement> elements = block_elements(c);
  const double first = 2.0, last = 9.2, step = (last - first) / static_cast<double>(std::max<size_t>(elements.size() - 1, 1));
  double below = 0.6;  // the top of what is below the next element
  bool below_is_stream = true;
  std::vector<double> skips;  // where each sub-layer's skip leaves the stream
  double skip_from = 0;
  for (size_t k = 0; k < elements.size(); ++k) {
    const DiagramElement& e = elements[k];
    const double y = first + step * static_cast<double>(k), half = e.kind == DiagramElement::Add ? 0.32 : 0.42;
    arrow(5, below, 5, y - half, below_is_stream ? stream : dark, true);
    if (e.opens_branch) skip_from = (below + y - half) / 2;
    if (e.kind == DiagramElement::Add) {
      g << "set object " << ++id << " circle at 5," << y << " size 0.32 fc rgb \"#ffffff\" fs solid 1.0 border lc rgb \""
        << stream << "\" lw 2 front\n";
      g << "set label " << id << " \"+\" at 5," << y << " center front font \",14\"\n";
      arrow(5, skip_from, 8.6, skip_from, stream, false);
      arrow(8.6, skip_from, 8.6, y, stream, false);
      arrow(8.6, y, 5.35, y, stream, true);
      skips.push_back(skip_from);
    } else {
      const char* fill = e.kind == DiagramElement::Norm ? "#F6E8A6" : e.kind == DiagramElement::Attention ? "#BFD9F2" : "#C8E6C9";
      const std::string name = e.kind == DiagramElement::Norm ? text.norm : e.kind == DiagramElement::Attention ? text.attention : "MLP";
      g << "set object " << ++id << " rect from 2.6," << y - 0.42 << " to 7.4," << y + 0.42 << " fc rgb \"" << fill
        << "\" fs solid 1.0 border lc rgb \"#333333\" lw 1.2 front\n";
      g << "set label " << id << " \"" << name << "\" at 5," << y << " center front font \",12\"\n";
    }
    below = y + half;
    below_is_stream = e.kind == DiagramElement::Add || e.on_stream;
  }
  arrow(5, below, 5, 10.5, below_is_stream ? stream : dark, true);
  label(5, 0.35, text.entry, "center font \",11\"");
  label(5, 10.8, text.top, "center font \",11\"");
  if (skips.size() > 1) label(4.75, skips[1], text.middle, "right font \",10\"");
  label(5, 11.6, text.note, "center font \",10\" textcolor rgb \"#555555\"");
  return g.str();
}

}  // namespace

report::PlotFigure block_forms_figure(report::Lang lang) {
  const auto t = [lang](const char* msgid) { return report::tr(lang, msgid); };
  report::PlotFigure fig;
  fig.rows = 1;
  fig.cols = 2;
  fig.width = 1000;
  fig.height = 640;
  fig.title = t("Problem 11: where the normalisation sits (residual stream in red)");
  struct Form {
    NormPlacement placement;
    std::string title, middle, top, note;
  };
  const std::vector<Form> forms = {
      {NormPlacement::Post, t("Post-LN (Vaswani et al. 2017): h <- LN(h + F(h))"), "u = LN(h + Attn(h))",
       "h' = LN(u + MLP(u))", t("the stream itself is normalised after every addition")},
      {NormPlacement::Pre, t("Pre-LN (GPT-2 2019, Xiong et al. 2020): h <- h + F(LN(h))"), "u = h + Attn(LN(h))",
       "h' = u + MLP(LN(u))", t("the stream is never normalised; one final LN after the last block")},
  };
  for (const Form& f : forms) {
    ModelConfig c;
    c.norm_placement = f.placement;
    report::PlotPanel p;
    p.title = f.title;
    p.axes = false;
    p.legend = "off";
    p.x_range = std::make_pair(0.0, 10.0);
    p.y_range = std::make_pair(0.0, 12.0);
    p.raw = block_diagram(c, {t("Multi-head attention"), t("LayerNorm"), t("h (from the block below)"), f.middle, f.top,
                              f.note});
    fig.panels.push_back(p);
  }
  return fig;
}

// ---- plan ----------------------------------------------------------------------------------------

ReproducePlan plan_reproduce(const ReproduceOptions& options) {
  if (options.out.empty()) throw Error("no output directory given");
  if (options.seeds.empty()) throw Error("seeds: the list is empty");
  if (options.gradnorm_batch_sizes.empty()) throw Error("no batch sizes for the gradient norms");
  if (options.jobs < 0) throw Error("jobs must be >= 0");
  const fs::path out(options.out);
  ReproducePlan plan;

  // Experiment A
  for (int batch : options.gradnorm_batch_sizes) {
    GradNormOptions g;
    g.base = options.gradnorm_model;
    g.base.batch = batch;
    g.seeds = options.seeds;
    g.batches = options.gradnorm_batches;
    g.out = (out / "gradnorm" / ("batch_" + std::to_string(batch))).string();
    g.lang = options.lang;
    plan.gradnorm.push_back(g);
  }

  // Experiment B
  SweepOptions& grid = plan.grid;
  grid.base = options.train;
  grid.grid = {parse_grid_axis("norm_placement=post,pre"), parse_grid_axis("warmup=0," + std::to_string(options.warmup))};
  grid.seeds = options.seeds;
  grid.jobs = options.jobs;
  grid.out = (out / "sweep").string();
  grid.base.probe_every = options.probe_every;
  grid.worker = options.worker;
  grid.lang = options.lang;
  const std::string layers_b = std::to_string(options.train.model.layers), width_b = std::to_string(options.train.model.width),
                    batch_b = std::to_string(options.train.batch), seeds_b = std::to_string(options.seeds.size());
  const std::string lr_b = fmt(options.train.lr, "%g");
  grid.title =
      options.quick
          ? report::tr(options.lang,
                       "Experiment B (quick version): copy-task loss, {1} blocks x width {2}, batch {3}, Adam {4}, {5} seeds",
                       {layers_b, width_b, batch_b, lr_b, seeds_b})
          : report::tr(options.lang, "Experiment B: copy-task loss, {1} blocks x width {2}, batch {3}, Adam {4}, {5} seeds",
                       {layers_b, width_b, batch_b, lr_b, seeds_b});
  plan_sweep(grid);

  // Depth sweep
  if (!options.depth_layers.empty()) {
    std::string layers;
    for (int l : options.depth_layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
    for (const char* placement : {"post", "pre"}) {
      SweepOptions d;
      d.base = options.depth_train;
      set_config_value(d.base, "norm_placement", placement);
      d.base.warmup = std::string(placement) == "post" ? options.warmup : 0;
      d.grid = {parse_grid_axis("layers=" + layers)};
      d.seeds = {options.seeds.front()};
      d.jobs = options.jobs;
      d.out = (out / (std::string("depth_") + placement)).string();
      d.worker = options.worker;
      d.lang = options.lang;
      const std::string w = std::to_string(options.warmup), batch = std::to_string(d.base.batch),
                        seed = std::to_string(d.seeds[0]);
      d.title = std::string(placement) == "post"
                    ? report::tr(options.lang, "Depth sweep: Post-LN with {1} warm-up steps, batch {2}, seed {3}",
                                 {w, batch, seed})
                    : report::tr(options.lang, "Depth sweep: Pre-LN without warm-up, batch {1}, seed {2}", {batch, seed});
      plan_sweep(d);
      plan.depth.push_back(d);
    }
  }

  // Depth map
  if (options.depthmap) {
    DepthMapOptions d = options.depthmap_options;
    d.out = (out / "depthmap").string();
    d.jobs = options.jobs;
    d.worker = options.worker;
    d.lang = options.lang;
    plan_depthmap(d);
    plan.depthmap = d;
  }

  // Stability map
  if (options.stabilitymap) {
    StabilityMapOptions m = options.stabilitymap_options;
    m.out = (out / "stabilitymap").string();
    m.jobs = options.jobs;
    m.worker = options.worker;
    m.lang = options.lang;
    plan_stabilitymap(m);
    plan.stabilitymap = m;
  }

  // Curvature
  if (options.curvature) {
    CurvatureGridOptions c = options.curvature_options;
    c.out = (out / "curvature").string();
    c.lang = options.lang;
    check_curvature_grid(c);
    plan.curvature = c;
  }

  // Problem 10
  plan.residual.walk = options.walk;
  plan.residual.base = options.residual_model;
  plan.residual.seeds = {options.seeds.front()};
  plan.residual.out = (out / "residual").string();
  plan.residual.lang = options.lang;

  for (RunConfig c : {options.gradnorm_model, options.residual_model}) resolve(c);
  return plan;
}

// ---- run -----------------------------------------------------------------------------------------

ReproduceMeasurements measure_reproduce(const ReproduceOptions& options, const ReproducePlan& plan, const Log& log,
                                        const SweepProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path out(options.out);
  const auto say = [&](const std::string& s) {
    if (log) log(s);
  };
  claim_output_dir(options.out, "reproduce", reproduce_settings(options), true);
  ReproduceMeasurements m;

  // Problem 9
  say("== problem 9: standardizing per student and per subject ==");
  auto t = std::chrono::steady_clock::now();
  m.scores = source_score_table();
  m.per_row = standardize_rows(m.scores);
  m.per_column = standardize_columns(m.scores, {"A", "B"});
  claim_output_dir((out / "standardize").string(), "standardize", nlohmann::json::object(), false);
  io::write_file_atomic((out / "standardize" / "scores.csv").string(), table_csv(m.scores));
  io::write_file_atomic((out / "standardize" / "per_row.csv").string(), table_csv(m.per_row));
  io::write_file_atomic((out / "standardize" / "per_column.csv").string(), table_csv(m.per_column));
  say("per row:\n" + format_table(m.per_row, 3) + "per column over A, B:\n" + format_table(m.per_column, 3));
  m.seconds["problem 9"] = seconds_since(t);

  // Experiment A
  say("== experiment A: gradient norms at initialization ==");
  t = std::chrono::steady_clock::now();
  for (const GradNormOptions& g : plan.gradnorm) {
    say("batch " + std::to_string(g.base.batch) + ":");
    m.gradnorms[g.base.batch] = run_gradnorm(g, log);
  }
  m.seconds["experiment A"] = seconds_since(t);

  // Experiment B (and the depth sweeps)
  say("== experiment B: " + std::to_string(plan_sweep(plan.grid).size()) + " training runs ==");
  t = std::chrono::steady_clock::now();
  m.sweep = run_sweep(plan.grid, log, progress);
  {
    const double ln_v = std::log(static_cast<double>(options.train.model.vocab));
    const report::PlotResult linear = report::render_figure(
        sweep_figure(plan.grid.grid, m.sweep.runs, ln_v, false, plan.grid.title, options.lang), (out / "sweep" / "loss_linear").string());
    if (!linear.drawn) say(linear.message);
  }
  m.seconds["experiment B"] = seconds_since(t);
  if (!plan.depth.empty()) {
    say("== depth sweep ==");
    t = std::chrono::steady_clock::now();
    for (const SweepOptions& d : plan.depth) m.depth.push_back(run_sweep(d, log, progress));
    m.seconds["depth sweep"] = seconds_since(t);
  }

  if (plan.depthmap) {
    say("== depth map: " + std::to_string(plan_sweep(plan_depthmap(*plan.depthmap)).size()) + " training runs ==");
    t = std::chrono::steady_clock::now();
    m.depthmap = run_depthmap(*plan.depthmap, log, progress);
    m.seconds["depth map"] = seconds_since(t);
  }

  if (plan.stabilitymap) {
    size_t runs = 0;
    for (const SweepOptions& s : plan_stabilitymap(*plan.stabilitymap)) runs += plan_sweep(s).size();
    say("== stability map: " + std::to_string(runs) + " training runs ==");
    t = std::chrono::steady_clock::now();
    m.stabilitymap = run_stabilitymap(*plan.stabilitymap, log, progress);
    m.seconds["stability map"] = seconds_since(t);
  }

  if (plan.curvature) {
    say("== curvature: preconditioned sharpness over the first " + std::to_string(plan.curvature->base.steps) +
        " steps of the 2x2 grid ==");
    t = std::chrono::steady_clock::now();
    m.curvature = run_curvature_grid(*plan.curvature, log);
    if (!m.curvature->figure.drawn) say(m.curvature->figure.message);
    m.seconds["curvature"] = seconds_since(t);
  }

  // Problem 10: the model at init, and the first seed of each placement's no-warm-up runs as trained
  say("== problem 10: residual stream ==");
  t = std::chrono::steady_clock::now();
  ResidualOptions residual = plan.residual;
  for (const char* placement : {"pre", "post"}) {
    const auto runs = reproduce_text::cell_runs(m.sweep, placement, 0);
    if (!runs.empty() && fs::exists(fs::path(runs.front()->run.config.out) / "residual.csv"))
      residual.runs.push_back(runs.front()->run.config.out);
  }
  m.residual = run_residual(residual, log);
  m.seconds["problem 10"] = seconds_since(t);

  // Problem 11
  m.block_forms = report::render_figure(block_forms_figure(options.lang), (out / "block_forms").string());
  if (!m.block_forms.drawn) say(m.block_forms.message);
  m.total_seconds = seconds_since(t0);
  return m;
}

// ---- all four steps --------------------------------------------------------------------------------

ReproduceResult run_reproduce(const ReproduceOptions& options, const Log& log, const SweepProgressFn& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const ReproducePlan plan = plan_reproduce(options);  // every option set is checked before anything is written
  const ReproduceMeasurements measurements = measure_reproduce(options, plan, log, progress);
  const std::vector<ClaimRow> claims = judge_claims(options, measurements);
  ReproduceResult result = write_reproduce_report(options, plan, measurements, claims);
  result.seconds = seconds_since(t0);
  if (log)
    log("wrote " + result.report_md + " and " + result.report_html + " (" +
        reproduce_text::duration_text(result.seconds) + ")");
  return result;
}

}  // namespace blocklab::experiments
