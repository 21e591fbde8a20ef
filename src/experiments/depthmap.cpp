#include "experiments/depthmap.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "experiments/manifest.h"
#include "experiments/reproduce_text.h"
#include "io/atomic_file.h"
#include "io/csv.h"
#include "model/flops.h"
#include "report/grid_plot.h"
#include "report/labels.h"
#include "report/stream_plot.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/threads.h"

namespace blocklab::experiments {

extern const char* const kLiteratureAnchorsJson;  // docs/data/anchors.json, compiled in by CMake (generated source)

namespace fs = std::filesystem;

// ---- presets -------------------------------------------------------------------------------------

DepthMapOptions depthmap_preset(bool quick) {
  DepthMapOptions o;
  o.quick = quick;
  o.placements = report::all_placements();
  o.seeds = {0, 1, 2};
  RunConfig& c = o.base;  // the source's model: width 128, 4 heads, V 64, n 32, Xavier
  c.batch = 16;
  c.lr = 1e-3;
  c.steps = 600;
  c.weights = false;  // hundreds of runs: no model.safetensors each (--weights true keeps them)
  o.depths = {6, 12, 24, 48, 96};
  o.warmups = {0, 400};
  if (quick) {
    // Width 64 on 8+8-token sequences (instead of 32+32), depths 4/8/16, with the full map's batch,
    // steps and warm-ups: all fifteen placements and both warm-ups in under 10 minutes on 2 cores. A run's
    // time grows with its depth (about 2.2 s of CPU per block here); at depths 4/12/18 the map took 11.6
    // minutes, hyper-connections' rows costing 1.8x (hc) and 2.2x (mhc) a Pre-LN row. (Width 32 with 200
    // steps at batch 8 ran in 11 s but left every run `learning` or `never-started`.)
    c.model.width = 64;
    c.copy_len = 8;
    o.depths = {4, 8, 16};
    o.seeds = {0};  // one seed: three would triple the quick map's time
  }
  return o;
}

nlohmann::json depthmap_settings(const DepthMapOptions& o) {
  RunConfig base = o.base;
  base.model.layers = o.depths.empty() ? 1 : o.depths.front();
  resolve(base);
  nlohmann::json b = results_json(base);
  for (const char* key : {"seed", "layers", "norm_placement", "warmup"}) b.erase(key);
  std::vector<std::string> placements;
  for (NormPlacement p : o.placements) placements.push_back(to_string(p));
  return {{"base", b}, {"placements", placements}, {"depths", o.depths}, {"warmups", o.warmups}, {"seeds", o.seeds}};
}

// ---- plan ----------------------------------------------------------------------------------------

namespace {

template <typename T>
std::string join_values(const std::vector<T>& values) {
  std::string s;
  for (const T& v : values) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

template <typename T>
void check_list(const std::vector<T>& values, const std::string& what) {
  if (values.empty()) throw Error(what + ": the list is empty");
  std::set<T> seen;
  for (const T& v : values)
    if (!seen.insert(v).second) throw Error(what + ": " + std::to_string(v) + " appears twice");
}

}  // namespace

SweepOptions plan_depthmap(const DepthMapOptions& options) {
  if (options.out.empty()) throw Error("no output directory given");
  if (options.placements.empty()) throw Error("placements: the list is empty");
  std::set<NormPlacement> seen;
  for (NormPlacement p : options.placements)
    if (!seen.insert(p).second) throw Error("placements: '" + to_string(p) + "' appears twice");
  check_list(options.depths, "depths");
  check_list(options.warmups, "warmups");
  for (int d : options.depths)
    if (d <= 0) throw Error("depths: " + std::to_string(d) + " is not a number of blocks (must be >= 1)");
  for (int w : options.warmups)
    if (w < 0) throw Error("warmups: " + std::to_string(w) + " must be >= 0");
  if (options.seeds.empty()) throw Error("seeds: the list is empty");

  SweepOptions s;
  s.base = options.base;
  std::string placements;
  for (NormPlacement p : options.placements) placements += (placements.empty() ? "" : ",") + to_string(p);
  s.grid = {parse_grid_axis("norm_placement=" + placements), parse_grid_axis("layers=" + join_values(options.depths)),
            parse_grid_axis("warmup=" + join_values(options.warmups))};
  s.seeds = options.seeds;
  s.jobs = options.jobs;
  s.out = (fs::path(options.out) / "runs").string();
  s.worker = options.worker;
  s.poll_seconds = options.poll_seconds;
  s.title = std::string("Depth map") + (options.quick ? " (quick)" : "") + ": copy-task loss, width " +
            std::to_string(options.base.model.width) + ", batch " + std::to_string(options.base.batch) + ", lr " +
            fmt(options.base.lr, "%g");
  plan_sweep(s);  // every run resolved and validated
  return s;
}

// ---- estimate ------------------------------------------------------------------------------------

DepthMapEstimate estimate_depthmap(const DepthMapOptions&, const SweepOptions& plan, bool measure,
                                   double assumed_gflops) {
  return estimate_sweeps({plan}, measure, assumed_gflops);
}

DepthMapEstimate estimate_sweeps(const std::vector<SweepOptions>& plans, bool measure, double assumed_gflops) {
  if (plans.empty()) throw Error("no sweeps to estimate");
  const SweepOptions& plan = plans.front();
  std::vector<SweepRun> runs;
  std::vector<bool> elsewhere;
  for (const SweepOptions& p : plans)
    for (SweepRun& r : plan_sweep(p)) {
      elsewhere.push_back(p.done_elsewhere && p.done_elsewhere(r));
      runs.push_back(std::move(r));
    }
  DepthMapEstimate e;
  e.runs = static_cast<int>(runs.size());
  const int cores = hardware_threads();
  e.jobs = plan.jobs > 0 ? plan.jobs : cores;
  e.worker_threads = e.jobs > 1 ? std::max(1, cores / e.jobs) : (plan.base.threads > 0 ? plan.base.threads : cores);
  const SweepRun* smallest = &runs.front();
  double smallest_flops = 1e300;
  for (size_t i = 0; i < runs.size(); ++i) {
    const SweepRun& r = runs[i];
    const double per_step = training_flops_per_step(r.config.model, r.config.batch, r.config.model.seq_len);
    e.flops += per_step * r.config.steps;
    if (!elsewhere[i] && !run_finished(r.config.out)) {
      ++e.runs_left;
      e.flops_left += per_step * r.config.steps;
    }
    if (per_step < smallest_flops) smallest_flops = per_step, smallest = &r;
  }
  e.gflops_per_second = assumed_gflops;
  e.method = "an assumed " + fmt(assumed_gflops, "%g") + " GFLOP/s per worker";
  if (measure) {
    const int saved_threads = num_threads();
    RunConfig c = smallest->config;
    c.threads = e.worker_threads;
    set_num_threads(e.worker_threads);
    Trainer trainer(c);
    trainer.step();  // first touch of the activations and moments: not timed
    const auto t0 = std::chrono::steady_clock::now();
    trainer.step();
    trainer.step();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    set_num_threads(saved_threads);
    if (seconds > 0) {
      e.gflops_per_second = 2 * smallest_flops / seconds / 1e9;
      e.method = "steps 2-3 of the smallest run (" + to_string(c.model.norm_placement) + ", " +
                 std::to_string(c.model.layers) + " blocks) timed here at " + std::to_string(e.worker_threads) +
                 " thread(s): " + fmt(seconds / 2 * 1e3, "%.3g") + " ms/step, " + fmt(e.gflops_per_second, "%.2f") +
                 " GFLOP/s; larger runs usually run faster per FLOP, so this errs long";
    }
  }
  e.worker_seconds = e.gflops_per_second > 0 ? e.flops_left / (e.gflops_per_second * 1e9) : 0;
  e.wall_seconds = e.runs_left > 0 ? e.worker_seconds / std::min(e.jobs, e.runs_left) : 0;
  return e;
}

std::string estimate_text(const DepthMapEstimate& e) {
  std::ostringstream s;
  s << e.runs << " runs (" << e.runs_left << " to train), " << fmt(e.flops / 1e12, "%.3g") << " TFLOP in all ("
    << fmt(e.flops_left / 1e12, "%.3g") << " left, from model/flops.h: 6 x matmul parameters x tokens + attention, per step "
    << "x steps). Expected: " << reproduce_text::duration_text(e.worker_seconds) << " of training in "
    << e.worker_threads << "-thread workers (" << reproduce_text::duration_text(e.worker_seconds * e.worker_threads)
    << " CPU time), about " << reproduce_text::duration_text(e.wall_seconds) << " wall with " << e.jobs
    << " at a time; rate: " << e.method << ".";
  return s.str();
}

// ---- run and summarize ------------------------------------------------------------------------------

std::vector<DepthMapRun> depthmap_runs(const SweepResult& sweep) {
  std::vector<DepthMapRun> runs;
  for (const SweepRunResult& r : sweep.runs) {
    DepthMapRun d;
    d.placement = r.run.config.model.norm_placement;
    d.depth = r.run.config.model.layers;
    d.warmup = r.run.config.warmup;
    d.seed = r.run.seed;
    d.outcome = r.curve.outcome;
    d.first_step_below = r.curve.first_step_below;
    d.final_loss = r.curve.final_loss;
    d.min_loss = r.curve.min_loss;
    d.seconds = r.seconds;
    d.reused = r.reused;
    if (const fs::path stream = fs::path(r.run.config.out) / "stream.csv"; fs::exists(stream)) {
      const std::vector<probe::StreamRow> rows = probe::read_stream_csv(stream.string());
      if (!rows.empty()) d.stream = probe::summarize_stream(rows);
    }
    runs.push_back(d);
  }
  return runs;
}

void label_seeds(SeedCell& c, const std::vector<SeedOutcome>& runs, report::Lang L) {
  c = SeedCell{};
  std::vector<int> steps;
  for (const SeedOutcome& r : runs) {
    ++c.runs;
    ++c.outcomes[r.outcome];
    if (r.outcome == probe::Outcome::Learned) {
      ++c.learned;
      if (r.first_step_below) steps.push_back(*r.first_step_below);
    }
  }
  if (!steps.empty()) {
    std::sort(steps.begin(), steps.end());
    const size_t n = steps.size();
    c.median_steps = n % 2 ? steps[n / 2] : 0.5 * (steps[n / 2 - 1] + steps[n / 2]);
  }
  const std::string median = c.median_steps ? fmt(*c.median_steps, "%.0f") : "";
  if (c.runs == 0) {
    c.text = report::tr(L, "no runs");
    c.short_text = "-";
  } else if (2 * c.learned >= c.runs) {
    c.shown = probe::Outcome::Learned;
    if (c.runs == 1) {
      c.text = c.median_steps ? median : report::tr(L, "learned (not below 0.01)");
      c.short_text = c.median_steps ? median : "learned";
    } else {
      const std::string learned = std::to_string(c.learned), of = std::to_string(c.runs);
      c.text = c.median_steps ? report::tr(L, "{1}/{2} learned, median {3} steps", {learned, of, median})
                              : report::tr(L, "{1}/{2} learned (not below 0.01)", {learned, of});
      c.short_text = std::to_string(c.learned) + "/" + std::to_string(c.runs) + ": " +
                     (c.median_steps ? median : "learned");
    }
  } else {
    // the most common label other than learned; ties go to the earlier check (diverged first)
    probe::Outcome best = probe::Outcome::NeverStarted;
    int best_n = -1;
    for (probe::Outcome o : probe::all_outcomes()) {
      if (o == probe::Outcome::Learned) continue;
      const auto it = c.outcomes.find(o);
      const int n = it == c.outcomes.end() ? 0 : it->second;
      if (n > best_n) best = o, best_n = n;
    }
    c.shown = best;
    c.short_text = best == probe::Outcome::NeverStarted ? "never" : probe::to_string(best);
    if (c.runs == 1) {
      c.text = probe::to_string(best);
    } else {
      std::vector<std::string> parts;
      for (probe::Outcome o : probe::all_outcomes())
        if (c.outcomes.count(o))
          parts.push_back(std::to_string(c.outcomes[o]) + "/" + std::to_string(c.runs) + " " + probe::to_string(o));
      c.text = reproduce_text::join(parts, ", ");
      c.short_text = std::to_string(best_n) + "/" + std::to_string(c.runs) + " " + c.short_text;
    }
  }
}

std::vector<DepthMapCell> summarize_depthmap(const DepthMapOptions& options, const std::vector<DepthMapRun>& runs) {
  std::vector<DepthMapCell> cells;
  for (int warmup : options.warmups)
    for (NormPlacement placement : options.placements)
      for (int depth : options.depths) {
        DepthMapCell c;
        c.placement = placement;
        c.depth = depth;
        c.warmup = warmup;
        std::vector<SeedOutcome> seeds;
        for (const DepthMapRun& r : runs)
          if (r.placement == placement && r.depth == depth && r.warmup == warmup)
            seeds.push_back({r.outcome, r.first_step_below});
        label_seeds(c, seeds, options.lang);
        cells.push_back(c);
      }
  return cells;
}

const DepthMapCell* find_cell(const std::vector<DepthMapCell>& cells, NormPlacement placement, int depth, int warmup) {
  for (const DepthMapCell& c : cells)
    if (c.placement == placement && c.depth == depth && c.warmup == warmup) return &c;
  return nullptr;
}

// ---- write ---------------------------------------------------------------------------------------

std::string depthmap_csv(const std::vector<DepthMapRun>& runs) {
  const bool stream = std::any_of(runs.begin(), runs.end(), [](const DepthMapRun& r) { return r.stream.has_value(); });
  std::vector<std::string> header = {"placement", "depth", "warmup", "seed", "outcome", "first_step_below",
                                     "final_loss", "min_loss", "seconds"};
  if (stream) header.insert(header.end(), {"stream_rms_last", "stream_rms_ratio", "stream_max_abs", "sink_max"});
  io::CsvWriter csv(header);
  for (const DepthMapRun& r : runs) {
    std::vector<std::string> row = {to_string(r.placement), std::to_string(r.depth), std::to_string(r.warmup),
                                    std::to_string(r.seed), probe::to_string(r.outcome),
                                    r.first_step_below ? std::to_string(*r.first_step_below) : "",
                                    io::csv_number(r.final_loss), io::csv_number(r.min_loss),
                                    io::csv_number(r.seconds, "%.1f")};
    if (stream) {
      if (r.stream && r.stream->rms_last.size() >= 2) {
        const std::vector<double>& rms = r.stream->rms_last;
        row.push_back(io::csv_number(rms.back()));
        row.push_back(io::csv_number(rms.back() / rms[1]));
        row.push_back(io::csv_number(r.stream->max_abs_last));
        row.push_back(r.stream->sink_max_last ? io::csv_number(*r.stream->sink_max_last) : "");
      } else {
        row.insert(row.end(), 4, "");
      }
    }
    csv.row(row);
  }
  return csv.text();
}

std::optional<report::PlotFigure> depthmap_stream_figure(const DepthMapOptions& options,
                                                     const std::vector<DepthMapRun>& runs) {
  if (options.depths.empty() || options.seeds.empty()) return std::nullopt;
  const int depth = *std::max_element(options.depths.begin(), options.depths.end());
  report::PlotFigure figure;
  figure.cols = static_cast<int>(options.warmups.size());
  figure.width = 900 * figure.cols;
  figure.height = 640;
  bool any = false;
  for (int warmup : options.warmups) {
    std::vector<report::StreamCurve> curves;
    for (NormPlacement p : options.placements)
      for (const DepthMapRun& r : runs)
        if (r.placement == p && r.depth == depth && r.warmup == warmup && r.seed == options.seeds.front() && r.stream) {
          RunConfig c = options.base;
          c.model.norm_placement = p;
          curves.push_back({report::design_label(c.model) + ": " + probe::to_string(r.outcome), *r.stream});
        }
    any = any || !curves.empty();
    figure.panels.push_back(report::stream_panel(
        curves, std::to_string(depth) + " blocks, " +
                    (warmup == 0 ? std::string("no warm-up") : "warm-up " + std::to_string(warmup)) + ", seed " +
                    std::to_string(options.seeds.front())));
  }
  if (!any) return std::nullopt;
  figure.title = std::string("Residual stream RMS by block") + (options.quick ? " (quick map)" : "");
  return figure;
}

std::vector<std::string> depthmap_table_header(const DepthMapOptions& options) {
  const report::Lang L = options.lang;
  std::vector<std::string> header = {report::tr(L, "placement")};
  for (int d : options.depths) header.push_back(report::tr(L, "{1} blocks", {std::to_string(d)}));
  return header;
}

std::vector<std::vector<std::string>> depthmap_table(const DepthMapOptions& options,
                                                      const std::vector<DepthMapCell>& cells, int warmup) {
  std::vector<std::vector<std::string>> rows;
  for (NormPlacement p : options.placements) {
    std::vector<std::string> row = {report::placement_label(p, options.lang)};
    for (int d : options.depths) {
      const DepthMapCell* c = find_cell(cells, p, d, warmup);
      row.push_back(c ? c->text : report::tr(options.lang, "no runs"));
    }
    rows.push_back(row);
  }
  return rows;
}

namespace {

const char* kNeverStartedColor = "#BDBDBD";
const char* kLearningColor = "#E69F00";
const char* kLearnedNotSolvedColor = "#D9F0D3";  // learned, but the loss never went below 0.01
const char* kCollapsedColor = "#CC79A7";
const char* kBlewUpColor = "#D55E00";
const char* kDivergedColor = "#A50026";
const char* kNoRunColor = "#FFFFFF";

// Steps to learn on a viridis-like scale: dark purple (fast) through teal to green (slow), fraction in [0, 1].
std::string steps_color(double fraction) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  const double stops[3][3] = {{0x44, 0x01, 0x54}, {0x21, 0x91, 0x8C}, {0xB5, 0xDE, 0x2B}};
  const int k = fraction < 0.5 ? 0 : 1;
  const double t = fraction < 0.5 ? fraction * 2 : fraction * 2 - 1;
  char buf[16];
  int rgb[3];
  for (int i = 0; i < 3; ++i) rgb[i] = static_cast<int>(std::lround(stops[k][i] + (stops[k + 1][i] - stops[k][i]) * t));
  std::snprintf(buf, sizeof buf, "#%02X%02X%02X", rgb[0], rgb[1], rgb[2]);
  return buf;
}

}  // namespace

std::string cell_color(const DepthMapCell& cell, int steps) {
  if (!cell.shown) return kNoRunColor;
  switch (*cell.shown) {
    case probe::Outcome::Learned:
      return cell.median_steps ? steps_color(*cell.median_steps / std::max(1, steps)) : kLearnedNotSolvedColor;
    case probe::Outcome::Learning: return kLearningColor;
    case probe::Outcome::Collapsed: return kCollapsedColor;
    case probe::Outcome::BlewUp: return kBlewUpColor;
    case probe::Outcome::Diverged: return kDivergedColor;
    case probe::Outcome::NeverStarted: return kNeverStartedColor;
  }
  return kNoRunColor;
}

report::PlotFigure depthmap_figure(const DepthMapOptions& options, const std::vector<DepthMapCell>& cells,
                               const std::string& title) {
  report::PlotFigure fig;
  fig.title = title;
  const int rows = static_cast<int>(options.placements.size()), cols = static_cast<int>(options.depths.size());
  const int panel_width = 170 + 95 * cols;
  fig.rows = 1;
  fig.cols = static_cast<int>(options.warmups.size()) + 1;  // the last panel holds the legend
  fig.width = std::max(900, panel_width * static_cast<int>(options.warmups.size()) + 320);
  fig.height = 190 + 42 * rows;
  const int steps = options.base.steps;
  const report::Lang L = options.lang;
  for (int warmup : options.warmups) {
    report::PlotPanel p;
    p.title = warmup == 0 ? report::tr(L, "no warm-up") : report::tr(L, "warm-up {1} steps", {std::to_string(warmup)});
    p.xlabel = report::tr(L, "blocks");
    p.ylabel = "";
    p.legend = "off";
    p.x_range = std::make_pair(-0.5, cols - 0.5);
    p.y_range = std::make_pair(rows - 0.5, -0.5);  // the first placement on top
    std::vector<report::GridTic> xtics, ytics;
    for (int c = 0; c < cols; ++c) xtics.push_back({std::to_string(options.depths[c]), static_cast<double>(c)});
    for (int r = 0; r < rows; ++r)
      ytics.push_back({report::placement_label(options.placements[r], L), static_cast<double>(r)});
    std::ostringstream g;
    g << report::grid_axes(xtics, ytics);
    int id = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const DepthMapCell* cell = find_cell(cells, options.placements[r], options.depths[c], warmup);
        const std::string color = cell ? cell_color(*cell, steps) : kNoRunColor;
        ++id;
        g << report::grid_cell(id, c - 0.48, r - 0.46, c + 0.48, r + 0.46, color);
        // white text on the dark end of the scale and on the diverged colour
        const bool dark = cell && cell->shown &&
                          ((*cell->shown == probe::Outcome::Learned && cell->median_steps &&
                            *cell->median_steps < 0.45 * steps) ||
                           *cell->shown == probe::Outcome::Diverged);
        g << report::grid_label(id, report::gp_text(cell ? cell->short_text : "-"), c, r, 9,
                                dark ? "#ffffff" : "#000000");
      }
    p.raw = g.str();
    fig.panels.push_back(p);
  }
  report::PlotPanel key = report::grid_key_panel();
  for (double f : {0.1, 0.25, 0.5, 0.75, 1.0})
    key.key_entries.push_back(
        {report::tr(L, "learned: < 0.01 by step {1}", {std::to_string(static_cast<int>(std::lround(f * steps)))}),
         steps_color(f)});
  key.key_entries.push_back({report::tr(L, "learned, not < 0.01 by the end"), kLearnedNotSolvedColor});
  key.key_entries.push_back({report::tr(L, "never-started"), kNeverStartedColor});
  key.key_entries.push_back({report::tr(L, "learning (not < 0.1 ln V)"), kLearningColor});
  key.key_entries.push_back({report::tr(L, "collapsed"), kCollapsedColor});
  key.key_entries.push_back({report::tr(L, "blew-up (ends > ln V + 0.5)"), kBlewUpColor});
  key.key_entries.push_back({report::tr(L, "diverged"), kDivergedColor});
  fig.panels.push_back(key);
  return fig;
}

// ---- public anchors -----------------------------------------------------------------------------

std::string depthmap_tasks_differ(report::Lang lang) {
  return report::tr(lang,
                "The tasks differ: the papers train encoder-decoder translation models (NL-NL = N "
                "encoder and N decoder layers, judged by BLEU) on WMT, IWSLT or OPUS with their own "
                "optimizers and schedules; this map trains decoder-only stacks on the synthetic copy "
                "task. Compare the direction (which placements keep training as blocks are added, and "
                "what warm-up changes), not the depths at which things happen.");
}

std::vector<std::string> depthmap_anchor_header(report::Lang lang) {
  return {report::trc(lang, "anchor table", "source"), report::tr(lang, "their task and setting"), report::tr(lang, "their result"),
          report::tr(lang, "closest cell here"), report::trc(lang, "anchor table", "here")};
}

const std::vector<LiteratureAnchor>& literature_anchors() {
  static const std::vector<LiteratureAnchor> anchors = [] {
    const std::string where = "docs/data/anchors.json (compiled in)";
    std::vector<LiteratureAnchor> out;
    try {
      const nlohmann::json j = nlohmann::json::parse(kLiteratureAnchorsJson);
      for (const nlohmann::json& a : j.at("anchors"))
        out.push_back({a.at("source").get<std::string>(), a.at("task").get<std::string>(),
                       a.at("result").get<std::string>(), parse_norm_placement(a.at("placement").get<std::string>()),
                       a.at("depth").get<int>(), a.at("warmup").get<bool>()});
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": " + e.what());
    }
    return out;
  }();
  return anchors;
}

std::vector<std::vector<std::string>> depthmap_anchor_rows(const DepthMapOptions& options,
                                                           const std::vector<DepthMapCell>& cells) {
  const report::Lang L = options.lang;
  std::vector<std::vector<std::string>> rows;
  for (const LiteratureAnchor& a : literature_anchors()) {
    std::string where = report::tr(L, "not in this map"), here = "-";
    if (std::find(options.placements.begin(), options.placements.end(), a.placement) != options.placements.end() &&
        !options.depths.empty() && !options.warmups.empty()) {
      int depth = options.depths.front();
      for (int d : options.depths)
        if (std::abs(d - a.depth) < std::abs(depth - a.depth)) depth = d;
      const int warmup = a.warmup ? *std::max_element(options.warmups.begin(), options.warmups.end())
                                  : *std::min_element(options.warmups.begin(), options.warmups.end());
      const std::string placement = report::placement_label(a.placement, L), blocks = std::to_string(depth);
      where = warmup == 0 ? report::tr(L, "{1}, {2} blocks, no warm-up", {placement, blocks})
                          : report::tr(L, "{1}, {2} blocks, warm-up {3}", {placement, blocks, std::to_string(warmup)});
      const DepthMapCell* c = find_cell(cells, a.placement, depth, warmup);
      if (!c)
        here = report::tr(L, "no runs");
      else if (c->shown == probe::Outcome::Learned && c->median_steps)
        here = report::tr(L, "{1} steps to < 0.01", {c->text});
      else
        here = c->text;
    }
    rows.push_back({report::tr(L, a.source), report::tr(L, a.task), report::tr(L, a.result), where, here});
  }
  return rows;
}

// ---- write and the whole map ------------------------------------------------------------------------

std::string markdown_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::string s = "|";
  for (const auto& h : header) s += " " + h + " |";
  s += "\n|";
  for (size_t i = 0; i < header.size(); ++i) s += "---|";
  s += "\n";
  for (const auto& row : rows) {
    s += "|";
    for (const auto& cell : row) s += " " + cell + " |";
    s += "\n";
  }
  return s;
}

namespace {

std::string settings_text(const DepthMapOptions& o) {
  const RunConfig& c = o.base;
  return report::tr(o.lang, "width {1}, {2} heads, {3}, copy task V={4} n={5}, batch {6}, Adam {7}, {8} steps, seed(s) {9}",
                {std::to_string(c.model.width), std::to_string(c.model.heads), to_string(c.model.norm),
                 std::to_string(c.model.vocab), std::to_string(c.copy_len), std::to_string(c.batch), fmt(c.lr, "%g"),
                 std::to_string(c.steps), join_values(o.seeds)});
}

}  // namespace

void write_depthmap(const DepthMapOptions& options, DepthMapResult& result) {
  const fs::path out(options.out);
  result.csv = (out / "depthmap.csv").string();
  result.markdown = (out / "depthmap.md").string();
  io::write_file_atomic(result.csv, depthmap_csv(result.runs));
  const std::string settings = settings_text(options);
  const std::string title =
      options.quick ? report::tr(options.lang, "Depth map (quick): steps to loss < 0.01, or the run's label\n{1}", {settings})
                    : report::tr(options.lang, "Depth map: steps to loss < 0.01, or the run's label\n{1}", {settings});
  result.figure = report::render_figure(depthmap_figure(options, result.cells, title), (out / "depthmap").string());
  const std::optional<report::PlotFigure> stream = depthmap_stream_figure(options, result.runs);
  if (stream) result.stream_figure = report::render_figure(*stream, (out / "depthmap_stream").string());

  std::ostringstream md;
  md << "# Depth map" << (options.quick ? " (quick)" : "") << "\n\n";
  md << "Copy task, " << settings_text(options) << ". A cell is the first step with loss < "
     << fmt(probe::kSolvedLoss, "%g") << " of a run labelled `learned`, or the run's label; with several seeds, how "
     << "many learned and the median step. Every run: `depthmap.csv`; curves: `runs/loss.png`.\n\n";
  md << reproduce_text::outcome_labels_text() << "\n\n";
  for (int warmup : options.warmups) {
    md << "## " << (warmup == 0 ? std::string("No warm-up") : "Warm-up " + std::to_string(warmup) + " steps") << "\n\n";
    md << markdown_table(depthmap_table_header(options), depthmap_table(options, result.cells, warmup)) << "\n";
  }
  md << "![depth map](depthmap.png)\n\n";
  if (stream)
    md << "## The residual stream\n\nThe stream's RMS (mean over tokens of ||h_t|| / sqrt(C)) after each block of the "
       << "deepest runs, at step 0 (dashed) and at the end (solid); the stream columns of `depthmap.csv` hold, per run, "
       << "the last block's RMS at the end (`stream_rms_last`), its ratio to the first block's, the largest |h| and "
       << "the largest attention-sink share.\n\n![stream RMS by block](depthmap_stream.png)\n\n";
  md << "## Public anchors: where Post-LN stops training\n\n" << depthmap_tasks_differ() << "\n\n";
  md << markdown_table(depthmap_anchor_header(), depthmap_anchor_rows(options, result.cells));
  io::write_file_atomic(result.markdown, md.str());
}

DepthMapResult run_depthmap(const DepthMapOptions& options, const Log& log, const SweepProgressFn& progress) {
  const SweepOptions sweep = plan_depthmap(options);  // Error before anything is written
  claim_output_dir(options.out, "depthmap", depthmap_settings(options), true);
  DepthMapResult result;
  result.sweep = run_sweep(sweep, log, progress);
  result.runs = depthmap_runs(result.sweep);
  result.cells = summarize_depthmap(options, result.runs);
  write_depthmap(options, result);
  if (log)
    log(result.figure.drawn ? "wrote " + result.csv + ", " + result.markdown + " and depthmap.{png,svg}"
                            : "wrote " + result.csv + " and " + result.markdown + "; " + result.figure.message);
  return result;
}

}  // namespace blocklab::experiments
