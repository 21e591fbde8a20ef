#include "experiments/curvature_grid.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "report/labels.h"
#include "io/atomic_file.h"
#include "io/csv.h"
#include "model/model.h"
#include "probe/curvature_run.h"
#include "jobs/train_job.h"
#include "train/run.h"
#include "util/error.h"

namespace blocklab::experiments {

namespace fs = std::filesystem;

namespace {

std::string run_name(NormPlacement p, int warmup) { return to_string(p) + "_warmup" + std::to_string(warmup); }

double number(const std::string& s) { return s.empty() ? std::nan("") : std::strtod(s.c_str(), nullptr); }

void read_run(CurvatureGridRun& run) {
  const auto rows = io::read_csv((fs::path(run.dir) / "curvature.csv").string());
  for (size_t r = 1; r < rows.size(); ++r) {
    const auto& f = rows[r].fields;
    if (f.size() < 8) throw Error(run.dir + "/curvature.csv: line " + std::to_string(rows[r].line) + " is short");
    run.steps.push_back(number(f[0]));
    run.lr.push_back(number(f[1]));
    run.sharpness.push_back(number(f[3]));
    run.preconditioned.push_back(number(f[4]));
    run.edge_adam.push_back(number(f[6]));
  }
  const auto metrics = io::read_csv((fs::path(run.dir) / "metrics.csv").string());
  for (size_t r = 1; r < metrics.size(); ++r) {
    run.loss_steps.push_back(number(metrics[r].fields[0]));
    run.loss.push_back(number(metrics[r].fields[1]));
  }
}

RunConfig run_config(const CurvatureGridOptions& o, NormPlacement p, int warmup) {
  RunConfig c = o.base;
  c.model.norm_placement = p;
  c.warmup = warmup;
  c.out = (fs::path(o.out) / run_name(p, warmup)).string();
  c.checkpoint_every = 0;
  c.tensorboard = false;
  c.weights = false;
  resolve(c);
  return c;
}

}  // namespace

void check_curvature_grid(const CurvatureGridOptions& o) {
  if (o.every < 1) throw Error("curvature interval must be >= 1");
  if (o.batch < 1) throw Error("the curvature batch needs at least one sequence");
  if (o.warmup < 1) throw Error("the warm-up column needs warmup >= 1");
  if (o.block_max_iter < 1) throw Error("block_max_iter must be >= 1");
  for (NormPlacement p : {NormPlacement::Post, NormPlacement::Pre})
    for (int w : {0, o.warmup}) run_config(o, p, w);  // resolve() validates
}

CurvatureGridResult run_curvature_grid(const CurvatureGridOptions& o, const Log& log) {
  check_curvature_grid(o);
  fs::create_directories(o.out);
  CurvatureGridResult result;
  probe::CurvatureOptions during = o.curvature;
  during.per_block = false;
  during.trace_samples = 0;
  during.progress = nullptr;
  for (NormPlacement p : {NormPlacement::Post, NormPlacement::Pre})
    for (int w : {0, o.warmup}) {
      const RunConfig c = run_config(o, p, w);
      CurvatureGridRun run;
      run.placement = p;
      run.warmup = w;
      run.dir = c.out;
      const bool done = fs::exists(fs::path(c.out) / "summary.json") && fs::exists(fs::path(c.out) / "curvature.csv");
      if (!done) {
        if (log)
          log("curvature: " + report::placement_label(p) + ", warm-up " + std::to_string(w) + ": " + std::to_string(c.steps) +
              " steps, preconditioned sharpness every " + std::to_string(o.every));
        jobs::TrainJob job;
        job.config = c;
        job.config.curvature_every = o.every;
        job.config.curvature_per_block = false;
        job.overwrite = true;
        job.curvature = {during, o.batch, {}};
        for (int s = 1; s < o.every; s *= 2) job.curvature.also_at.push_back(s);  // the first steps densely: 1, 2, 4, ...
        jobs::train_job(job);
      }
      read_run(run);
      result.runs.push_back(std::move(run));
    }

  // Per-block sharpness at initialization, on the same batch the runs use.
  const fs::path per_block_csv = fs::path(o.out) / "per_block_init.csv";
  if (fs::exists(per_block_csv)) {
    for (const auto& rec : io::read_csv(per_block_csv.string()))
      if (rec.line > 1 && rec.fields.size() == 3)
        result.per_block_init[parse_norm_placement(rec.fields[0])].push_back(number(rec.fields[2]));
  } else {
    std::string text = io::csv_line({"placement", "block", "sharpness"});
    for (NormPlacement p : {NormPlacement::Post, NormPlacement::Pre}) {
      if (log) log("curvature: " + report::placement_label(p) + ", per-block sharpness at initialization");
      const RunConfig c = run_config(o, p, 0);
      Model<float> model(c.model);
      model.init_weights(c.seed);
      const Batch batch = probe::curvature_batch(c, probe::curvature_batch_seed(c.seed), o.batch);
      probe::CurvatureLoss loss(c.model, std::span<const float>(model.params()), batch);
      probe::CurvatureOptions init = o.curvature;
      init.per_block = true;
      init.trace_samples = 0;
      init.block_max_iter = o.block_max_iter;
      init.max_iter = 1;  // the whole model's sharpness is the runs' first row
      init.progress = nullptr;
      const probe::CurvatureResult r = probe::measure_curvature(loss, nullptr, init);
      result.per_block_init[p] = r.per_block;
      for (size_t l = 0; l < r.per_block.size(); ++l)
        io::append_csv_line(text, {to_string(p), std::to_string(l + 1), io::csv_number(r.per_block[l])});
    }
    io::write_file_atomic(per_block_csv.string(), text);
  }
  result.figure = report::render_figure(curvature_grid_figure(result, o), (fs::path(o.out) / "curvature").string());
  result.per_block_figure =
      report::render_figure(per_block_init_figure(result, o.lang), (fs::path(o.out) / "per_block_init").string());
  return result;
}

report::PlotFigure curvature_grid_figure(const CurvatureGridResult& result, const CurvatureGridOptions& o) {
  const auto t = [&](const char* msgid, std::initializer_list<std::string> args = {}) {
    return report::tr(o.lang, msgid, args);
  };
  report::PlotFigure fig;
  fig.rows = 2;
  fig.cols = static_cast<int>(result.runs.size());
  fig.width = 420 * fig.cols;
  fig.height = 760;
  const double b1 = o.base.optimizer.beta1;
  const std::string edge = b1 == 0.9 ? "38/lr(t)" : "(2+2b1)/((1-b1) lr(t))";
  fig.title =
      t("Adam's preconditioned sharpness against its stability threshold {1}, loss beneath ({2} "
        "blocks, seed {3})",
        {edge, std::to_string(o.base.model.layers), std::to_string(o.base.seed)});
  const double steps = o.base.steps;
  std::vector<report::PlotPanel> top, bottom;
  for (const CurvatureGridRun& run : result.runs) {
    const std::string placement = report::placement_label(run.placement, o.lang);
    const std::string name = run.warmup > 0 ? t("{1}, warm-up {2}", {placement, std::to_string(run.warmup)})
                                            : t("{1}, no warm-up", {placement});
    report::PlotPanel p;
    p.title = name;
    p.xlabel = t("step");
    p.ylabel = "lambda_max(P^-1 H)";
    p.log_y = true;
    p.x_range = std::make_pair(0.0, steps);
    p.legend = "below";
    report::PlotSeries pre;
    pre.x = run.steps;
    pre.y = run.preconditioned;
    pre.title = t("preconditioned sharpness");
    pre.color = report::palette(0);
    pre.points = true;
    pre.line_width = 2;
    report::PlotSeries sharp;
    sharp.x = run.steps;
    sharp.y = run.sharpness;
    sharp.title = t("sharpness lambda_max(H)");
    sharp.color = report::palette(2);
    sharp.line_width = 1.2;
    report::PlotSeries threshold;  // every step of the schedule
    RunConfig c = o.base;
    c.warmup = run.warmup;
    const Schedule schedule = c.make_schedule();
    for (int s = 0; s <= o.base.steps; ++s) {
      threshold.x.push_back(s);
      threshold.y.push_back(probe::adam_edge(b1, schedule.at(std::min(s + 1, o.base.steps))));
    }
    threshold.title = edge;
    threshold.color = report::palette(1);
    threshold.dash = 2;
    threshold.line_width = 2;
    p.series = {pre, sharp, threshold};
    top.push_back(p);
    report::PlotPanel l;
    l.title = name;
    l.xlabel = t("step");
    l.ylabel = t("training loss");
    l.x_range = std::make_pair(0.0, steps);
    l.legend = "off";
    report::PlotSeries loss;
    loss.x = run.loss_steps;
    loss.y = run.loss;
    loss.color = report::palette(4);
    l.series = {loss};
    l.hlines.push_back({std::log(static_cast<double>(o.base.model.vocab)), "ln V", "#555555", 2, 1.2});
    bottom.push_back(l);
  }
  for (auto& p : top) fig.panels.push_back(p);
  for (auto& p : bottom) fig.panels.push_back(p);
  return fig;
}

report::PlotFigure per_block_init_figure(const CurvatureGridResult& result, report::Lang lang) {
  const auto t = [&](const char* msgid, std::initializer_list<std::string> args = {}) {
    return report::tr(lang, msgid, args);
  };
  report::PlotFigure fig;
  fig.width = 800;
  fig.height = 520;
  fig.title = t("Sharpness of each block's Hessian at initialization");
  report::PlotPanel p;
  p.xlabel = t("block");
  p.ylabel = "lambda_max(H_ll)";
  p.log_y = true;
  size_t i = 0;
  for (const auto& [placement, values] : result.per_block_init) {
    report::PlotSeries s;
    for (size_t l = 0; l < values.size(); ++l) {
      s.x.push_back(static_cast<double>(l + 1));
      s.y.push_back(values[l]);
    }
    s.title = report::placement_label(placement, lang);
    s.color = report::palette(i++);
    s.points = true;
    s.line_width = 2;
    p.series.push_back(s);
  }
  fig.panels.push_back(p);
  return fig;
}

}  // namespace blocklab::experiments
