#include "experiments/sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "experiments/manifest.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/csv.h"
#include "io/metrics.h"
#include "io/read_file.h"
#include "report/labels.h"
#include "sched/process_pool.h"
#include "train/memory.h"
#include "train/run.h"
#include "util/error.h"
#include "util/memory.h"
#include "util/threads.h"

namespace blocklab::experiments {

namespace fs = std::filesystem;

namespace {


std::string safe_component(std::string s) {
  for (char& c : s)
    if (c == '/' || c == '\\' || c == ' ' || c == ',' || c == '+' || static_cast<unsigned char>(c) < 32) c = '_';
  return s;
}

// The last complete row of a metrics.csv being written: (step, loss); step 0 when none yet.
std::pair<int, double> last_metrics_row(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {0, 0.0};  // not started yet
  const std::string text = io::read_file(path);
  const size_t end = text.rfind('\n');  // the end of the last complete line
  if (end == std::string::npos) return {0, 0.0};
  std::vector<io::CsvRecord> records;
  try {
    records = io::parse_csv(std::string_view(text).substr(0, end + 1), path.string());
  } catch (const Error&) {
    return {0, 0.0};
  }
  if (records.size() < 2 || records.back().fields.size() < 2) return {0, 0.0};  // none but the header
  const std::vector<std::string>& row = records.back().fields;
  char* after = nullptr;
  const long step = std::strtol(row[0].c_str(), &after, 10);
  if (after == row[0].c_str()) return {0, 0.0};
  return {static_cast<int>(step), std::strtod(row[1].c_str(), nullptr)};
}

std::string pretty_value(const std::string& key, const std::string& value, report::Lang lang) {
  if (key == "norm_placement") {
    try {
      return report::placement_label(parse_norm_placement(value), lang);
    } catch (const Error&) {
      return value;
    }
  }
  if (key == "warmup") return value == "0" ? report::tr(lang, "no warm-up") : report::tr(lang, "warm-up {1}", {value});
  if (key == "layers") return report::tr(lang, "{1} blocks", {value});
  if (key == "norm") return value == "rmsnorm" ? "RMSNorm" : value == "layernorm" ? "LayerNorm" : value;
  return key + " " + value;
}

}  // namespace

GridAxis parse_grid_axis(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("--grid: expected KEY=VALUE[,VALUE...], got '" + spec + "'");
  GridAxis axis;
  axis.key = spec.substr(0, eq);
  std::replace(axis.key.begin(), axis.key.end(), '-', '_');
  const ConfigKey* key = find_config_key(axis.key);
  if (key == nullptr) throw Error("--grid: unknown config key '" + axis.key + "' (blocklab train --help lists them)");
  if (axis.key == "seed") throw Error("--grid: use --seeds for the seeds, not a grid over 'seed'");
  if (!key->changes_results)
    throw Error("--grid: '" + axis.key + "' says how runs are executed, not what they compute; it cannot be a grid axis");
  const std::string values = spec.substr(eq + 1);
  std::set<std::string> seen;
  for (const std::string& v : split(values, ',')) {
    if (v.empty()) throw Error("--grid " + axis.key + ": empty value in '" + values + "'");
    if (!seen.insert(v).second) throw Error("--grid " + axis.key + ": value '" + v + "' appears twice");
    RunConfig probe;
    set_config_value(probe, axis.key, v);  // Error for a value the key rejects
    axis.values.push_back(v);
  }
  return axis;
}

RunConfig sweep_base_config() {
  RunConfig c;
  c.weights = false;
  return c;
}

std::vector<SweepRun> plan_sweep(const SweepOptions& options) {
  if (options.seeds.empty()) throw Error("seeds: the list is empty");
  if (options.jobs < 0) throw Error("jobs must be >= 1 (or 0 for one per core), got " + std::to_string(options.jobs));
  if (options.out.empty()) throw Error("no output directory given");
  std::set<std::string> keys, seeds;
  for (const GridAxis& axis : options.grid) {
    if (!keys.insert(axis.key).second) throw Error("--grid: key '" + axis.key + "' appears twice");
    if (axis.values.empty()) throw Error("--grid " + axis.key + ": no values");
  }
  for (uint64_t s : options.seeds)
    if (!seeds.insert(std::to_string(s)).second) throw Error("seeds: " + std::to_string(s) + " appears twice");

  size_t cells = 1;
  for (const GridAxis& axis : options.grid) cells *= axis.values.size();
  std::vector<SweepRun> runs;
  for (size_t cell = 0; cell < cells; ++cell) {
    // mixed-radix digits of the cell index, the first axis slowest
    std::vector<std::string> values(options.grid.size());
    size_t rest = cell;
    for (size_t a = options.grid.size(); a-- > 0;) {
      values[a] = options.grid[a].values[rest % options.grid[a].values.size()];
      rest /= options.grid[a].values.size();
    }
    for (uint64_t seed : options.seeds) {
      SweepRun run;
      run.cell = cell;
      run.cell_values = values;
      run.seed = seed;
      std::string name;
      RunConfig config = options.base;
      for (size_t a = 0; a < options.grid.size(); ++a) {
        set_config_value(config, options.grid[a].key, values[a]);
        name += options.grid[a].key + "=" + safe_component(values[a]) + "+";
      }
      run.name = name + "seed=" + std::to_string(seed);
      config.seed = seed;
      config.out = (fs::path(options.out) / run.name).string();
      try {
        resolve(config);
      } catch (const Error& e) {
        throw Error("run " + run.name + ": " + e.what());
      }
      run.config = config;
      runs.push_back(std::move(run));
    }
  }
  return runs;
}

nlohmann::json sweep_settings(const SweepOptions& options) {
  RunConfig base = options.base;
  try {
    resolve(base);
  } catch (const Error&) {
    // A base that is complete only with a grid key (task = text needs data, which the grid may give): the base
    // with each axis at its first value (the grid's keys are dropped from it below).
    base = options.base;
    for (const GridAxis& axis : options.grid)
      if (!axis.values.empty()) set_config_value(base, axis.key, axis.values.front());
    resolve(base);
  }
  nlohmann::json b = results_json(base);
  b.erase("seed");
  nlohmann::json grid = nlohmann::json::array();
  for (const GridAxis& axis : options.grid) {
    b.erase(axis.key);
    grid.push_back({{"key", axis.key}, {"values", axis.values}});
  }
  return {{"base", b}, {"grid", grid}, {"seeds", options.seeds}, {"probe_every", options.base.probe_every}};
}

bool run_finished(const std::string& run_dir) {
  const fs::path summary = fs::path(run_dir) / "summary.json";
  if (!fs::exists(summary)) return false;
  try {
    const auto j = nlohmann::json::parse(io::read_file(summary));
    return j.value("status", std::string("completed")) != "interrupted";
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

SweepRunResult read_run(const SweepRun& run) {
  SweepRunResult r;
  r.run = run;
  const fs::path dir(run.config.out);
  const io::MetricsTable table = io::read_metrics((dir / "metrics.csv").string());
  const int step_col = table.column("step"), loss_col = table.column("loss"), val_col = table.column("val_loss");
  if (step_col < 0 || loss_col < 0) throw Error((dir / "metrics.csv").string() + ": no step/loss columns");
  for (const auto& row : table.rows) {
    r.steps.push_back(static_cast<int>(row[step_col]));
    r.losses.push_back(row[loss_col]);
    if (val_col >= 0 && std::isfinite(row[val_col])) {  // evaluated steps only (the others are empty)
      r.val_steps.push_back(r.steps.back());
      r.val_losses.push_back(row[val_col]);
      r.final_val_loss = row[val_col];
      if (!r.min_val_loss || row[val_col] < *r.min_val_loss) r.min_val_loss = row[val_col], r.min_val_loss_step = r.steps.back();
    }
  }
  if (r.steps.empty()) throw Error((dir / "metrics.csv").string() + ": no steps");
  try {
    const auto j = nlohmann::json::parse(io::read_file(dir / "summary.json"));
    r.seconds = j.value("seconds", 0.0);
    if (j.contains("unigram_entropy")) r.unigram_entropy = j["unigram_entropy"].get<double>();
  } catch (const nlohmann::json::exception&) {  // no time recorded: the summary is optional here
  } catch (const Error&) {
  }
  // A text run has learned when its loss is below the text's unigram entropy; a run from before summary.json
  // recorded it (or without a summary) gets no "learned" label, rather than the copy task's threshold.
  const double ln_vocab = std::log(static_cast<double>(run.config.model.vocab));
  std::optional<double> learned_below;
  if (run.config.is_text()) learned_below = r.unigram_entropy.value_or(-std::numeric_limits<double>::infinity());
  r.curve = probe::summarize_curve(r.steps, r.losses, ln_vocab, learned_below);
  return r;
}

std::string cell_title(const std::vector<GridAxis>& grid, const std::vector<std::string>& values, report::Lang lang) {
  std::string title;
  for (size_t a = 0; a < grid.size(); ++a) title += (a ? ", " : "") + pretty_value(grid[a].key, values[a], lang);
  return title.empty() ? report::tr(lang, "all runs") : title;
}

report::PlotFigure sweep_figure(const std::vector<GridAxis>& grid, const std::vector<SweepRunResult>& runs, double ln_vocab,
                            bool log_loss, const std::string& title, report::Lang lang) {
  report::PlotFigure fig;
  fig.title = title;
  size_t cells = 1;
  for (const GridAxis& axis : grid) cells *= axis.values.size();
  if (grid.size() == 2) {
    fig.rows = static_cast<int>(grid[0].values.size());
    fig.cols = static_cast<int>(grid[1].values.size());
  } else {
    fig.cols = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(cells))));
    fig.rows = static_cast<int>((cells + fig.cols - 1) / fig.cols);
  }
  fig.width = std::max(760, 760 * fig.cols);  // room for the legend right of each panel
  fig.height = std::max(520, 460 * fig.rows + 60);

  double lo = 1e300, hi = 0;
  int max_step = 1;
  for (const auto& r : runs)
    for (size_t i = 0; i < r.losses.size(); ++i) {
      const double v = r.losses[i];
      if (std::isfinite(v) && v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
      max_step = std::max(max_step, r.steps[i]);
    }
  if (hi <= 0) lo = 1e-3, hi = 5;
  std::vector<report::PlotPanel> panels(cells);
  std::vector<std::vector<std::string>> cell_values(cells);
  for (const auto& r : runs) cell_values[r.run.cell] = r.run.cell_values;
  for (size_t c = 0; c < cells; ++c) {
    report::PlotPanel& p = panels[c];
    if (cell_values[c].empty()) {  // no finished run in this cell: derive its values from the index
      std::vector<std::string> values(grid.size());
      size_t rest = c;
      for (size_t a = grid.size(); a-- > 0;) {
        values[a] = grid[a].values[rest % grid[a].values.size()];
        rest /= grid[a].values.size();
      }
      cell_values[c] = values;
    }
    p.title = cell_title(grid, cell_values[c], lang);
    p.xlabel = report::tr(lang, "step");
    p.ylabel = log_loss ? report::tr(lang, "loss (log scale)") : report::tr(lang, "loss");
    p.log_y = log_loss;
    p.x_range = std::make_pair(0.0, static_cast<double>(max_step));
    // The legend sits right of the plot area, so it covers no curve and no tick (inside, it hid the curves
    // near ln V and the top tick; below, it ran into the x label); a log axis reaches at least 10 so that
    // the decade above ln V is labelled.
    p.y_range = log_loss ? std::make_pair(std::max(lo * 0.7, 1e-6), std::max(10.0, std::max(hi, ln_vocab) * 1.3))
                         : std::make_pair(0.0, std::max(hi, ln_vocab) * 1.1);
    p.legend = "outside right top vertical";
    char lnv[64];
    std::snprintf(lnv, sizeof lnv, "ln V = %.3f", ln_vocab);
    p.hlines.push_back({ln_vocab, lnv, "#000000", 2, 2.0});
  }
  // Text runs: their text's unigram entropy (the "learned" threshold), once per panel.
  std::vector<bool> entropy_drawn(cells, false);
  for (const auto& r : runs) {
    if (!r.unigram_entropy || entropy_drawn[r.run.cell]) continue;
    char label[96];
    std::snprintf(label, sizeof label, "%s = %.3f", report::tr(lang, "unigram entropy").c_str(), *r.unigram_entropy);
    panels[r.run.cell].hlines.push_back({*r.unigram_entropy, label, "#7f7f7f", 3, 1.5});
    entropy_drawn[r.run.cell] = true;
  }
  std::vector<int> seed_index(cells, 0);
  for (const auto& r : runs) {
    report::PlotSeries s;
    for (size_t i = 0; i < r.steps.size(); ++i) {
      s.x.push_back(r.steps[i]);
      s.y.push_back(r.losses[i]);
    }
    s.title = report::tr(lang, "seed {1} ({2})", {std::to_string(r.run.seed), probe::to_string(r.curve.outcome)});
    s.color = report::palette(seed_index[r.run.cell]++);
    s.line_width = 1.2;
    const std::string color = s.color;
    panels[r.run.cell].series.push_back(std::move(s));
    if (!r.val_steps.empty()) {  // the validation loss: points on a dashed line, in the training curve's colour
      report::PlotSeries v;
      v.x.assign(r.val_steps.begin(), r.val_steps.end());
      v.y = r.val_losses;
      v.title = report::tr(lang, "seed {1} validation", {std::to_string(r.run.seed)});
      v.color = color;
      v.line_width = 1.5;
      v.dash = 2;
      v.points = true;
      panels[r.run.cell].series.push_back(std::move(v));
    }
  }
  fig.panels = std::move(panels);
  return fig;
}

void require_sweep_memory(const std::vector<SweepRun>& runs, const std::vector<size_t>& pending, int jobs) {
  const auto available = available_memory();
  if (!available || pending.empty()) return;
  const SweepRun* largest = nullptr;
  double most = -1;
  for (const size_t i : pending)
    if (const double b = training_memory(runs[i].config, available->bytes).total(); b > most) most = b, largest = &runs[i];
  const int at_once = static_cast<int>(std::min<size_t>(pending.size(), static_cast<size_t>(std::max(1, jobs))));
  require_training_memory(largest->config, "sweep (largest run " + largest->name + ")", at_once);
}

namespace {

// "finished NAME: learned, final loss ..., min ... at step ... (... s)" for the log.
void log_finished_run(const SweepRun& run, const Log& log) {
  try {
    const SweepRunResult r = read_run(run);
    log("finished " + run.name + ": " + probe::to_string(r.curve.outcome) + ", final loss " +
        fmt(r.curve.final_loss, "%.4f") + ", min " + fmt(r.curve.min_loss, "%.4f") + " at step " +
        std::to_string(r.curve.min_loss_step) + " (" + fmt(r.seconds, "%.1f") + " s)");
  } catch (const Error& e) {
    log("finished " + run.name + " but cannot read it: " + e.what());
  }
}

// The sweep's progress: steps of finished runs count in full; the rate counts only steps trained here.
void update_progress(SweepProgress& state, const std::vector<SweepRun>& runs, const std::vector<bool>& done,
                     const std::vector<bool>& reused, const std::vector<int>& start_steps,
                     const std::vector<size_t>& running, std::chrono::steady_clock::time_point start) {
  state.runs_active = static_cast<int>(running.size());
  state.steps_done = 0;
  state.steps_done_here = 0;
  state.active.clear();
  for (size_t i = 0; i < runs.size(); ++i)
    if (done[i]) {
      state.steps_done += runs[i].config.steps;
      if (!reused[i]) state.steps_done_here += runs[i].config.steps - start_steps[i];
    }
  for (size_t index : running) {
    const SweepRun& run = runs[index];
    const auto [step, loss] = last_metrics_row(fs::path(run.config.out) / "metrics.csv");
    state.steps_done += step;
    state.steps_done_here += std::max(0, step - start_steps[index]);
    state.active.push_back({run.name, step, run.config.steps, loss});
  }
  state.elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  state.eta = state.steps_done_here > 0 && state.elapsed > 0
                  ? (state.steps_total - state.steps_done) * state.elapsed / state.steps_done_here
                  : -1;
}

}  // namespace

SweepResult run_sweep(const SweepOptions& options, const Log& log, const SweepProgressFn& progress) {
  const std::vector<std::string> worker = sched::worker_command(options.worker);  // every run the same program
  const int cores = hardware_threads();
  const int jobs = options.jobs > 0 ? options.jobs : cores;
  const int threads = jobs > 1 ? std::max(1, cores / jobs) : options.base.threads;
  const SweepPlan plan = write_sweep_plan(options);  // Error before anything is written
  const std::vector<SweepRun>& runs = plan.runs;

  std::vector<size_t> pending;
  std::vector<bool> done(runs.size(), false), reused(runs.size(), false);
  std::vector<int> start_steps(runs.size(), 0);
  SweepProgress state;
  int elsewhere = 0;
  state.runs_total = static_cast<int>(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    state.steps_total += runs[i].config.steps;
    if (options.done_elsewhere && options.done_elsewhere(runs[i])) {
      done[i] = reused[i] = true;
      ++state.runs_reused;
      ++state.runs_finished;
      ++elsewhere;
    } else if (run_done(plan, i)) {
      done[i] = reused[i] = true;
      ++state.runs_reused;
      ++state.runs_finished;
    } else {
      pending.push_back(i);
    }
  }
  require_sweep_memory(runs, pending, jobs);  // before any worker starts
  if (log)
    log("sweep of " + std::to_string(runs.size()) + " runs in " + options.out + ": " +
        std::to_string(state.runs_reused - elsewhere) + " already finished, " +
        (elsewhere > 0 ? std::to_string(elsewhere) + " finished elsewhere, " : std::string()) + std::to_string(pending.size()) + " to run, " + std::to_string(std::min<size_t>(jobs, std::max<size_t>(pending.size(), 1))) +
        " at a time with " + (threads > 0 ? std::to_string(threads) : "all") + " thread(s) each");

  SweepResult result;
  const auto start = std::chrono::steady_clock::now();
  sched::PoolEvents events;
  events.start = [&](size_t index) {  // the worker: blocklab sweep run OUT --index I
    const fs::path dir(runs[index].config.out);
    fs::create_directories(dir);
    const auto checkpoints = io::list_checkpoints(dir);
    start_steps[index] = checkpoints.empty() ? 0 : static_cast<int>(checkpoints.back().step);
    std::vector<std::string> argv = worker;
    argv.insert(argv.end(), {"sweep", "run", options.out, "--index", std::to_string(index), "--threads",
                             std::to_string(threads)});
    return sched::PoolTask{argv, (dir / "train.log").string()};
  };
  events.stopping = [&](size_t running) {
    if (log) log("stopping: asking " + std::to_string(running) + " running worker(s) to checkpoint and exit");
  };
  events.finished = [&](size_t index, int status, bool stopping) {
    const SweepRun& run = runs[index];
    if (run_done(plan, index)) {
      done[index] = true;
      ++state.runs_finished;
      if (log) log_finished_run(run, log);
    } else if (!stopping) {
      result.failed.push_back(run.name + " (exit " + std::to_string(status) + ", see " +
                              (fs::path(run.config.out) / "train.log").string() + ")");
      if (log) log("FAILED " + result.failed.back());
    }
  };
  events.tick = [&](const std::vector<size_t>& running) {
    update_progress(state, runs, done, reused, start_steps, running, start);
    if (progress) progress(state);
  };
  const int stopped_by = sched::run_process_pool(pending, jobs, options.poll_seconds, events);

  // summary.csv and the figure over the finished runs (merge reads them back from disk)
  SweepResult merged = merge_sweep(plan, options.log_loss, options.title, log, options.lang);
  result.runs = std::move(merged.runs);
  result.figure = std::move(merged.figure);
  result.unfinished = std::move(merged.unfinished);
  for (auto& r : result.runs)
    for (size_t i = 0; i < runs.size(); ++i)
      if (runs[i].name == r.run.name) r.reused = reused[i];

  if (stopped_by != 0) {
    int unfinished = 0;
    for (bool d : done) unfinished += d ? 0 : 1;
    throw SweepInterrupted(stopped_by, unfinished, std::move(result));
  }
  if (!result.failed.empty()) {
    std::string list;
    for (const auto& f : result.failed) list += (list.empty() ? "" : "; ") + f;
    throw Error(std::to_string(result.failed.size()) + " of " + std::to_string(runs.size()) + " runs failed: " + list);
  }
  return result;
}

}  // namespace blocklab::experiments
