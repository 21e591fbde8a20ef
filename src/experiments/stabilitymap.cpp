#include "experiments/stabilitymap.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <memory>
#include <set>
#include <tuple>
#include <sstream>

#include "experiments/manifest.h"
#include "experiments/reproduce_text.h"
#include "experiments/warmup_explanations.h"
#include "io/atomic_file.h"
#include "io/csv.h"
#include "io/json_text.h"
#include "io/read_file.h"
#include "report/grid_plot.h"
#include "report/labels.h"
#include "util/error.h"

namespace blocklab::experiments {

namespace fs = std::filesystem;

// ---- optimizer entries and lists ---------------------------------------------------------------------

namespace {

constexpr const char* kV0Suffix = "+v0";

bool has_adam_moment(OptimizerKind k) {
  return k == OptimizerKind::Adam || k == OptimizerKind::AdamW || k == OptimizerKind::RAdam;
}

std::string entry_spellings() {
  return "an optimizer (" + optimizer_names() + "), with +v0 for GI-Adam's v0 = g0^2 on adam, adamw or radam";
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::string lr_text(double lr) { return fmt(lr, "%g"); }

}  // namespace

std::string to_string(const OptimizerEntry& e) {
  return to_string(e.kind) + (e.v0 == AdamV0::Grad ? kV0Suffix : "");
}

OptimizerEntry parse_optimizer_entry(const std::string& text) {
  std::string name = trim(text);
  OptimizerEntry e;
  const std::string suffix = kV0Suffix;
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    e.v0 = AdamV0::Grad;
    name.resize(name.size() - suffix.size());
  }
  try {
    e.kind = parse_optimizer_kind(name);
  } catch (const Error&) {
    throw Error("unknown optimizer entry '" + trim(text) + "' (expected " + entry_spellings() + ")");
  }
  if (e.v0 == AdamV0::Grad && !has_adam_moment(e.kind))
    throw Error("'" + trim(text) + "': +v0 (adam_v0 = grad) needs Adam's second moment: adam, adamw or radam");
  return e;
}

std::vector<OptimizerEntry> parse_optimizer_entries(const std::string& text, const std::string& what) {
  if (trim(text).empty()) throw Error(what + ": the list is empty");
  std::vector<OptimizerEntry> entries;
  for (const std::string& item : split(text, ',')) {
    if (trim(item).empty()) throw Error(what + ": empty item in '" + text + "'");
    OptimizerEntry e;
    try {
      e = parse_optimizer_entry(item);
    } catch (const Error& err) {
      throw Error(what + ": " + err.what());
    }
    if (std::find(entries.begin(), entries.end(), e) != entries.end())
      throw Error(what + ": '" + to_string(e) + "' appears twice");
    entries.push_back(e);
  }
  return entries;
}

std::vector<double> parse_lr_list(const std::string& text, const std::string& what) {
  if (trim(text).empty()) throw Error(what + ": the list is empty");
  std::vector<double> lrs;
  for (const std::string& raw : split(text, ',')) {
    const std::string item = trim(raw);
    if (item.empty()) throw Error(what + ": empty item in '" + text + "'");
    double v = 0;
    size_t used = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) throw Error(what + ": '" + item + "' is not a number");
    if (!std::isfinite(v) || v <= 0) throw Error(what + ": " + item + " is not a positive learning rate");
    v = std::stod(lr_text(v));  // as the run directories name it
    for (double w : lrs)
      if (lr_text(w) == lr_text(v)) throw Error(what + ": " + lr_text(v) + " appears twice");
    lrs.push_back(v);
  }
  return lrs;
}

// ---- presets -------------------------------------------------------------------------------------

StabilityMapOptions stabilitymap_preset(bool quick) {
  StabilityMapOptions o;
  o.quick = quick;
  o.placements = {NormPlacement::Post, NormPlacement::Pre};
  RunConfig& c = o.base;  // the source's model: 24 blocks x width 128, 4 heads, V 64, n 32, Xavier
  c.batch = 16;
  c.steps = 600;
  c.weights = false;  // hundreds of runs: no model.safetensors each
  o.optimizers = {{OptimizerKind::Adam, AdamV0::Zero}, {OptimizerKind::RAdam, AdamV0::Zero},
                  {OptimizerKind::Adam, AdamV0::Grad}};
  o.warmups = {0, 100, 400};
  o.lrs = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2};
  o.seeds = {0, 1, 2};
  if (quick) {
    // Small enough to sit inside reproduce --quick: 6 blocks x width 64 on 8+8-token sequences, batch 8, 400 steps,
    // Adam with and without GI-Adam's v0, warm-up 0 and 100, lr 1e-3 to 1e-2, three seeds: 72 runs. With --jobs 2
    // on 2 cores two seeds (48 runs) took 53 s, three took 1 min 56 s and 2 min 18 s while two other builds shared
    // the cores. At this size Post-LN with Adam never starts at 3e-3 without warm-up and
    // learns with 100 warm-up steps or with v0 = g0^2 (docs/reproducing.md).
    c.model.layers = 6;
    c.model.width = 64;
    c.copy_len = 8;
    c.batch = 8;
    c.steps = 400;
    o.optimizers = {{OptimizerKind::Adam, AdamV0::Zero}, {OptimizerKind::Adam, AdamV0::Grad}};
    o.warmups = {0, 100};
    o.lrs = {1e-3, 3e-3, 1e-2};
  }
  return o;
}

nlohmann::json stabilitymap_settings(const StabilityMapOptions& o) {
  RunConfig base = o.base;
  resolve(base);
  nlohmann::json b = results_json(base);
  for (const char* key : {"seed", "norm_placement", "warmup", "lr", "optimizer", "adam_v0"}) b.erase(key);
  std::vector<std::string> placements, optimizers, lrs;
  for (NormPlacement p : o.placements) placements.push_back(to_string(p));
  for (const OptimizerEntry& e : o.optimizers) optimizers.push_back(to_string(e));
  for (double lr : o.lrs) lrs.push_back(lr_text(lr));
  return {{"base", b},         {"placements", placements}, {"optimizers", optimizers},
          {"warmups", o.warmups}, {"lrs", lrs},             {"seeds", o.seeds}};
}

// ---- plan ----------------------------------------------------------------------------------------

namespace {

const std::vector<std::string> kCsvColumns = {"placement", "optimizer", "warmup", "lr", "seed", "outcome",
                                              "first_step_below", "final_loss", "min_loss", "seconds"};

// A run's place in the map, as text: the same for a row read back and for the run it records.
std::string run_key(NormPlacement placement, const std::string& optimizer, int warmup, double lr, uint64_t seed) {
  return to_string(placement) + "|" + optimizer + "|" + std::to_string(warmup) + "|" + lr_text(lr) + "|" +
         std::to_string(seed);
}
std::string run_key(const StabilityRun& r) { return run_key(r.placement, r.optimizer, r.warmup, r.lr, r.seed); }

template <typename T>
T integer_field(const std::string& text, const std::string& where, const char* column) {
  T v{};
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size())
    throw Error(where + ": " + column + " '" + text + "' is not a whole number");
  return v;
}

double number_field(const std::string& text, const std::string& where, const char* column) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size())
    throw Error(where + ": " + column + " '" + text + "' is not a number");
  return v;
}

}  // namespace

std::vector<StabilityRun> parse_stabilitymap_csv(const std::string& text, const std::string& where) {
  const std::vector<io::CsvRecord> records = io::parse_csv(text, where);
  if (records.empty() || records.front().fields != kCsvColumns)
    throw Error(where + ": not a stabilitymap.csv (its first line must be " + io::csv_line(kCsvColumns) + ")");
  std::vector<StabilityRun> runs;
  for (size_t i = 1; i < records.size(); ++i) {
    const std::vector<std::string>& f = records[i].fields;
    const std::string at = where + ":" + std::to_string(records[i].line);
    if (f.size() != kCsvColumns.size())
      throw Error(at + ": " + std::to_string(f.size()) + " fields, not " + std::to_string(kCsvColumns.size()));
    StabilityRun r;
    try {
      r.placement = parse_norm_placement(f[0]);
      r.optimizer = to_string(parse_optimizer_entry(f[1]));
    } catch (const Error& e) {
      throw Error(at + ": " + e.what());
    }
    r.warmup = integer_field<int>(f[2], at, "warmup");
    r.lr = number_field(f[3], at, "lr");
    if (!(r.lr > 0) || !std::isfinite(r.lr)) throw Error(at + ": lr '" + f[3] + "' is not a positive learning rate");
    r.seed = integer_field<uint64_t>(f[4], at, "seed");
    const std::optional<probe::Outcome> outcome = probe::parse_outcome(f[5]);
    if (!outcome) throw Error(at + ": outcome '" + f[5] + "' is not an outcome label");
    r.outcome = *outcome;
    if (!f[6].empty()) r.first_step_below = integer_field<int>(f[6], at, "first_step_below");
    r.final_loss = number_field(f[7], at, "final_loss");
    r.min_loss = number_field(f[8], at, "min_loss");
    r.seconds = number_field(f[9], at, "seconds");
    runs.push_back(std::move(r));
  }
  return runs;
}

std::set<std::string> FinishedRuns::keys() const {
  std::set<std::string> keys;
  for (const StabilityRun& r : runs) keys.insert(run_key(r));
  return keys;
}

FinishedRuns read_finished_runs(const StabilityMapOptions& options) {
  FinishedRuns finished;
  if (options.finished.empty()) return finished;
  const fs::path dir(options.finished);
  const fs::path manifest = dir / kManifestName, csv = dir / "stabilitymap.csv";
  const std::string what = "--finished " + options.finished;
  if (!fs::is_regular_file(manifest) || !fs::is_regular_file(csv))
    throw Error(what + ": holds no stability map (needs " + kManifestName + " and stabilitymap.csv)");
  const nlohmann::json held = io::parse_json_object(io::read_file(manifest), manifest.string());
  if (held.value("experiment", std::string()) != "stabilitymap")
    throw Error(what + ": holds a " + held.value("experiment", std::string("?")) + ", not a stability map");
  // Only the per-run settings must agree: the lists may differ, and rows outside this map's are left out.
  const nlohmann::json base = stabilitymap_settings(options).at("base");
  const std::string diff =
      first_difference(held.value("settings", nlohmann::json::object()).value("base", nlohmann::json::object()), base);
  if (!diff.empty())
    throw Error(what + ": its runs used other settings (setting '" + diff + "' differs), so they are not this map's");

  std::set<std::string> in_map, seen;
  for (NormPlacement p : options.placements)
    for (const OptimizerEntry& e : options.optimizers)
      for (int w : options.warmups)
        for (double lr : options.lrs)
          for (uint64_t seed : options.seeds) in_map.insert(run_key(p, to_string(e), w, lr, seed));
  for (StabilityRun& r : parse_stabilitymap_csv(io::read_file(csv), csv.string())) {
    const std::string key = run_key(r);
    if (!seen.insert(key).second)
      throw Error(csv.string() + ": the run " + to_string(r.placement) + ", " + r.optimizer + ", warm-up " +
                  std::to_string(r.warmup) + ", lr " + lr_text(r.lr) + ", seed " + std::to_string(r.seed) +
                  " appears twice");
    if (!in_map.count(key)) {
      ++finished.outside;
      continue;
    }
    r.reused = true;
    finished.runs.push_back(std::move(r));
  }
  return finished;
}

std::vector<SweepOptions> plan_stabilitymap(const StabilityMapOptions& options) {
  return plan_stabilitymap(options, read_finished_runs(options));
}

std::vector<SweepOptions> plan_stabilitymap(const StabilityMapOptions& options, const FinishedRuns& finished_runs) {
  if (options.out.empty()) throw Error("no output directory given");
  if (options.placements.empty()) throw Error("placements: the list is empty");
  std::set<NormPlacement> seen;
  for (NormPlacement p : options.placements)
    if (!seen.insert(p).second) throw Error("placements: '" + to_string(p) + "' appears twice");
  if (options.optimizers.empty()) throw Error("optimizers: the list is empty");
  for (size_t i = 0; i < options.optimizers.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (options.optimizers[i] == options.optimizers[j])
        throw Error("optimizers: '" + to_string(options.optimizers[i]) + "' appears twice");
  if (options.warmups.empty()) throw Error("warmups: the list is empty");
  std::set<int> warmups;
  for (int w : options.warmups) {
    if (w < 0) throw Error("warmups: " + std::to_string(w) + " must be >= 0");
    if (!warmups.insert(w).second) throw Error("warmups: " + std::to_string(w) + " appears twice");
  }
  if (options.lrs.empty()) throw Error("lrs: the list is empty");
  std::set<std::string> lrs;
  for (double lr : options.lrs) {
    if (!std::isfinite(lr) || lr <= 0) throw Error("lrs: " + lr_text(lr) + " is not a positive learning rate");
    if (!lrs.insert(lr_text(lr)).second) throw Error("lrs: " + lr_text(lr) + " appears twice");
  }
  if (options.seeds.empty()) throw Error("seeds: the list is empty");

  std::string placements, warmup_list, lr_list;
  for (NormPlacement p : options.placements) placements += (placements.empty() ? "" : ",") + to_string(p);
  for (int w : options.warmups) warmup_list += (warmup_list.empty() ? "" : ",") + std::to_string(w);
  for (double lr : options.lrs) lr_list += (lr_list.empty() ? "" : ",") + lr_text(lr);
  const auto finished = std::make_shared<const std::set<std::string>>(finished_runs.keys());  // finished elsewhere
  std::vector<SweepOptions> sweeps;
  for (const OptimizerEntry& e : options.optimizers) {
    SweepOptions s;
    s.base = options.base;
    s.base.optimizer.kind = e.kind;
    s.base.optimizer.adam_v0 = e.v0;
    s.grid = {parse_grid_axis("norm_placement=" + placements), parse_grid_axis("warmup=" + warmup_list),
              parse_grid_axis("lr=" + lr_list)};
    s.seeds = options.seeds;
    s.jobs = options.jobs;
    s.out = (fs::path(options.out) / "runs" / to_string(e)).string();
    s.worker = options.worker;
    s.poll_seconds = options.poll_seconds;
    s.lang = options.lang;
    if (!finished->empty()) {
      const std::string optimizer = to_string(e);
      s.done_elsewhere = [finished, optimizer](const SweepRun& run) {
        return finished->count(run_key(run.config.model.norm_placement, optimizer, run.config.warmup, run.config.lr,
                                       run.seed)) > 0;
      };
    }
    s.title = std::string("Stability map") + (options.quick ? " (quick)" : "") + ", " + to_string(e) +
              ": copy-task loss, " + std::to_string(options.base.model.layers) + " blocks x width " +
              std::to_string(options.base.model.width) + ", batch " + std::to_string(options.base.batch);
    try {
      plan_sweep(s);  // every run resolved and validated
    } catch (const Error& err) {
      throw Error(to_string(e) + ": " + err.what());
    }
    sweeps.push_back(std::move(s));
  }
  return sweeps;
}

// ---- run and summarize ------------------------------------------------------------------------------

std::vector<StabilityRun> stabilitymap_runs(const std::string& optimizer, const SweepResult& sweep) {
  std::vector<StabilityRun> runs;
  for (const SweepRunResult& r : sweep.runs) {
    StabilityRun s;
    s.placement = r.run.config.model.norm_placement;
    s.optimizer = optimizer;
    s.warmup = r.run.config.warmup;
    s.lr = r.run.config.lr;
    s.seed = r.run.seed;
    s.outcome = r.curve.outcome;
    s.first_step_below = r.curve.first_step_below;
    s.final_loss = r.curve.final_loss;
    s.min_loss = r.curve.min_loss;
    s.seconds = r.seconds;
    s.reused = r.reused;
    runs.push_back(s);
  }
  return runs;
}

std::vector<StabilityCell> summarize_stabilitymap(const StabilityMapOptions& options,
                                                  const std::vector<StabilityRun>& runs) {
  std::vector<StabilityCell> cells;
  for (NormPlacement placement : options.placements)
    for (const OptimizerEntry& e : options.optimizers) {
      const std::string optimizer = to_string(e);
      for (int warmup : options.warmups)
        for (double lr : options.lrs) {
          StabilityCell c;
          std::vector<SeedOutcome> seeds;
          for (const StabilityRun& r : runs)
            if (r.placement == placement && r.optimizer == optimizer && r.warmup == warmup &&
                lr_text(r.lr) == lr_text(lr))
              seeds.push_back({r.outcome, r.first_step_below});
          label_seeds(c, seeds, options.lang);
          c.placement = placement;
          c.optimizer = optimizer;
          c.warmup = warmup;
          c.lr = lr;
          cells.push_back(c);
        }
    }
  return cells;
}

const StabilityCell* find_cell(const std::vector<StabilityCell>& cells, NormPlacement placement,
                               const std::string& optimizer, int warmup, double lr) {
  for (const StabilityCell& c : cells)
    if (c.placement == placement && c.optimizer == optimizer && c.warmup == warmup && lr_text(c.lr) == lr_text(lr))
      return &c;
  return nullptr;
}

// ---- write ---------------------------------------------------------------------------------------

std::string stabilitymap_csv(const std::vector<StabilityRun>& runs) {
  io::CsvWriter csv({"placement", "optimizer", "warmup", "lr", "seed", "outcome", "first_step_below", "final_loss",
                     "min_loss", "seconds"});
  for (const StabilityRun& r : runs)
    csv.row({to_string(r.placement), r.optimizer, std::to_string(r.warmup), lr_text(r.lr), std::to_string(r.seed),
             probe::to_string(r.outcome), r.first_step_below ? std::to_string(*r.first_step_below) : "",
             io::csv_number(r.final_loss), io::csv_number(r.min_loss), io::csv_number(r.seconds, "%.1f")});
  return csv.text();
}

namespace {

// The lr rows of a panel, smallest first, with each row's lower and upper edge in log10(lr).
struct LrRows {
  std::vector<double> lrs, center, low, high;
};

LrRows lr_rows(const StabilityMapOptions& options) {
  LrRows r;
  r.lrs = options.lrs;
  std::sort(r.lrs.begin(), r.lrs.end());
  for (double lr : r.lrs) r.center.push_back(std::log10(lr));
  const size_t n = r.center.size();
  for (size_t i = 0; i < n; ++i) {
    const double below = i > 0 ? r.center[i] - r.center[i - 1] : (n > 1 ? r.center[1] - r.center[0] : 1.0);
    const double above = i + 1 < n ? r.center[i + 1] - r.center[i] : below;
    r.low.push_back(r.center[i] - (i > 0 ? below : std::min(below, above)) / 2);
    r.high.push_back(r.center[i] + above / 2);
  }
  return r;
}

std::string short_outcome(probe::Outcome o) {
  return o == probe::Outcome::NeverStarted ? "never" : probe::to_string(o);
}

const char* kBoundaryColor = "#000000";

}  // namespace

std::vector<BoundarySegment> majority_boundary(const StabilityMapOptions& options, const std::vector<StabilityCell>& cells,
                                               NormPlacement placement, const std::string& optimizer) {
  const LrRows rows = lr_rows(options);
  std::vector<BoundarySegment> segments;
  const int cols = static_cast<int>(options.warmups.size());
  const auto cell = [&](int col, size_t row) {
    return find_cell(cells, placement, optimizer, options.warmups[col], rows.lrs[row]);
  };
  const auto differ = [](const StabilityCell* a, const StabilityCell* b) {
    return a && b && a->runs > 0 && b->runs > 0 && a->learned_side() != b->learned_side();
  };
  for (int col = 0; col < cols; ++col)
    for (size_t row = 0; row < rows.lrs.size(); ++row) {
      if (col + 1 < cols && differ(cell(col, row), cell(col + 1, row)))
        segments.push_back({col + 0.5, rows.low[row], col + 0.5, rows.high[row]});
      if (row + 1 < rows.lrs.size() && differ(cell(col, row), cell(col, row + 1)))
        segments.push_back({col - 0.5, rows.high[row], col + 0.5, rows.high[row]});
    }
  return segments;
}

std::string fraction_color(const SeedCell& cell) {
  if (cell.runs == 0) return "#FFFFFF";
  const double f = static_cast<double>(cell.learned) / cell.runs;
  const double from[3] = {0xF2, 0xF2, 0xF2}, to[3] = {0x00, 0x6D, 0x2C};  // light grey -> dark green
  char buf[16];
  int rgb[3];
  for (int i = 0; i < 3; ++i) rgb[i] = static_cast<int>(std::lround(from[i] + (to[i] - from[i]) * f));
  std::snprintf(buf, sizeof buf, "#%02X%02X%02X", rgb[0], rgb[1], rgb[2]);
  return buf;
}

report::PlotPanel stabilitymap_panel(const StabilityMapOptions& options, const std::vector<StabilityCell>& cells,
                                     NormPlacement placement, const std::string& optimizer) {
  const report::Lang L = options.lang;
  const LrRows rows = lr_rows(options);
  const int cols = static_cast<int>(options.warmups.size());
  report::PlotPanel p;
  p.title = report::placement_label(placement, L) + ", " + optimizer;
  p.xlabel = report::tr(L, "warm-up steps");
  p.ylabel = report::tr(L, "learning rate");
  p.legend = "off";
  p.x_range = std::make_pair(-0.5, cols - 0.5);
  p.y_range = std::make_pair(rows.low.empty() ? 0.0 : rows.low.front(), rows.high.empty() ? 1.0 : rows.high.back());
  std::vector<report::GridTic> xtics, ytics;
  for (int c = 0; c < cols; ++c) xtics.push_back({std::to_string(options.warmups[c]), static_cast<double>(c)});
  for (size_t r = 0; r < rows.lrs.size(); ++r) ytics.push_back({lr_text(rows.lrs[r]), rows.center[r]});
  std::ostringstream g;
  g << report::grid_axes(xtics, ytics);
  int id = 0;
  for (int c = 0; c < cols; ++c)
    for (size_t r = 0; r < rows.lrs.size(); ++r) {
      const StabilityCell* cell = find_cell(cells, placement, optimizer, options.warmups[c], rows.lrs[r]);
      ++id;
      g << report::grid_cell(id, c - 0.5, rows.low[r], c + 0.5, rows.high[r],
                             cell ? fraction_color(*cell) : "#FFFFFF");
      std::string first = "-", second;
      if (cell && cell->runs > 0) {
        first = std::to_string(cell->learned) + "/" + std::to_string(cell->runs);
        if (cell->median_steps)
          second = fmt(*cell->median_steps, "%.0f");
        else if (cell->learned == 0 && cell->shown)
          second = short_outcome(*cell->shown);
      }
      const bool dark = cell && cell->runs > 0 && 2 * cell->learned > cell->runs;
      std::string label = report::gp_text(first);
      if (!second.empty()) label = label.substr(0, label.size() - 1) + "\\n" + second + "\"";
      g << report::grid_label(id, label, c, rows.center[r], 10, dark ? "#ffffff" : "#000000");
    }
  int arrow = 0;
  for (const BoundarySegment& s : majority_boundary(options, cells, placement, optimizer))
    g << "set arrow " << ++arrow << " from " << s.x0 << "," << s.y0 << " to " << s.x1 << "," << s.y1
      << " nohead front lw 3.5 lc rgb " << report::gp_text(kBoundaryColor) << "\n";
  p.raw = g.str();
  return p;
}

namespace {

report::PlotPanel key_panel(const StabilityMapOptions& options) {
  const report::Lang L = options.lang;
  report::PlotPanel key = report::grid_key_panel();
  const int n = static_cast<int>(options.seeds.size());
  for (int k = n; k >= 0; --k) {
    SeedCell c;
    c.runs = n;
    c.learned = k;
    key.key_entries.push_back(
        {report::tr(L, "{1}/{2} seeds learned", {std::to_string(k), std::to_string(n)}), fraction_color(c)});
  }
  key.key_entries.push_back({report::tr(L, "line: at least half learned on one side"), kBoundaryColor});
  key.key_entries.push_back({report::tr(L, "under k/n: median step to < 0.01"), "#FFFFFF"});
  key.key_entries.push_back({report::tr(L, "k/n alone: not < 0.01 by the end"), "#FFFFFF"});
  return key;
}

std::string settings_text(const StabilityMapOptions& o) {
  const RunConfig& c = o.base;
  std::string seeds;
  for (uint64_t s : o.seeds) {
    if (!seeds.empty()) seeds += ',';
    seeds += std::to_string(s);
  }
  return report::tr(o.lang, "{1} blocks x width {2}, {3} heads, copy task V={4} n={5}, batch {6}, {7} steps, seeds {8}",
                    {std::to_string(c.model.layers), std::to_string(c.model.width), std::to_string(c.model.heads),
                     std::to_string(c.model.vocab), std::to_string(c.copy_len), std::to_string(c.batch),
                     std::to_string(c.steps), seeds});
}

std::string title_text(const StabilityMapOptions& o) {
  return o.quick ? report::tr(o.lang, "Stability map (quick): seeds that learned, by warm-up and lr\n{1}", {settings_text(o)})
                 : report::tr(o.lang, "Stability map: seeds that learned, by warm-up and lr\n{1}", {settings_text(o)});
}

}  // namespace

report::PlotFigure stabilitymap_figure(const StabilityMapOptions& options, const std::vector<StabilityCell>& cells,
                                       const std::string& title) {
  report::PlotFigure fig;
  fig.title = title;
  const int opt = static_cast<int>(options.optimizers.size()), rows = static_cast<int>(options.placements.size());
  const int panel_width = 200 + 90 * static_cast<int>(options.warmups.size());
  const int panel_height = 150 + 55 * static_cast<int>(options.lrs.size());
  fig.rows = rows;
  fig.cols = opt + 1;  // the last column holds the key (first row) or nothing
  fig.width = std::max(900, panel_width * opt + 420);
  fig.height = std::max(420, panel_height * rows + 90);
  for (int r = 0; r < rows; ++r) {
    for (const OptimizerEntry& e : options.optimizers)
      fig.panels.push_back(stabilitymap_panel(options, cells, options.placements[r], to_string(e)));
    if (r == 0) {
      fig.panels.push_back(key_panel(options));
    } else {
      report::PlotPanel blank;
      blank.axes = false;
      blank.legend = "off";
      blank.x_range = std::make_pair(0.0, 1.0);
      blank.y_range = std::make_pair(0.0, 1.0);
      fig.panels.push_back(blank);
    }
  }
  return fig;
}

std::vector<std::string> stabilitymap_table_header(const StabilityMapOptions& options) {
  const report::Lang L = options.lang;
  std::vector<std::string> header = {"lr"};
  for (int w : options.warmups)
    header.push_back(w == 0 ? report::tr(L, "no warm-up") : report::tr(L, "warm-up {1} steps", {std::to_string(w)}));
  return header;
}

std::vector<std::vector<std::string>> stabilitymap_table(const StabilityMapOptions& options,
                                                         const std::vector<StabilityCell>& cells,
                                                         NormPlacement placement, const std::string& optimizer) {
  std::vector<double> lrs = options.lrs;
  std::sort(lrs.rbegin(), lrs.rend());
  std::vector<std::vector<std::string>> rows;
  for (double lr : lrs) {
    std::vector<std::string> row = {lr_text(lr)};
    for (int w : options.warmups) {
      const StabilityCell* c = find_cell(cells, placement, optimizer, w, lr);
      row.push_back(c ? c->text : report::tr(options.lang, "no runs"));
    }
    rows.push_back(row);
  }
  return rows;
}

void write_stabilitymap(const StabilityMapOptions& options, StabilityMapResult& result) {
  const fs::path out(options.out);
  result.csv = (out / "stabilitymap.csv").string();
  result.markdown = (out / "stabilitymap.md").string();
  io::write_file_atomic(result.csv, stabilitymap_csv(result.runs));
  const std::string title = title_text(options);
  result.figure = report::render_figure(stabilitymap_figure(options, result.cells, title), (out / "stabilitymap").string());
  result.panel_figures.clear();
  for (NormPlacement p : options.placements)
    for (const OptimizerEntry& e : options.optimizers) {
      report::PlotFigure fig;
      fig.title = title;
      fig.cols = 2;
      fig.width = std::max(900, 620 + 90 * static_cast<int>(options.warmups.size()));
      fig.height = std::max(420, 200 + 55 * static_cast<int>(options.lrs.size()));
      fig.panels = {stabilitymap_panel(options, result.cells, p, to_string(e)), key_panel(options)};
      result.panel_figures.push_back(report::render_figure(
          fig, (out / ("stabilitymap_" + to_string(p) + "_" + to_string(e))).string()));
    }

  std::ostringstream md;
  md << "# Stability map" << (options.quick ? " (quick)" : "") << "\n\n";
  md << "Copy task, " << settings_text(options) << ". A cell is one placement, optimizer, warm-up and learning "
     << "rate over the seeds: how many learned and the median first step with loss < " << fmt(probe::kSolvedLoss, "%g")
     << " (\"2/3 learned, median 180 steps\"), or, when fewer than half learned, the labels of the runs. With one "
     << "seed, the step alone or the label. `+v0`: GI-Adam's second moment started from the first gradient "
     << "(adam_v0 = grad). Every run: `stabilitymap.csv`; curves: `runs/<optimizer>/loss.png`.\n\n";
  md << reproduce_text::outcome_labels_text() << "\n\n";
  size_t k = 0;
  for (NormPlacement p : options.placements)
    for (const OptimizerEntry& e : options.optimizers) {
      const std::string name = to_string(e);
      md << "## " << report::placement_label(p) << ", " << name << "\n\n";
      md << markdown_table(stabilitymap_table_header(options), stabilitymap_table(options, result.cells, p, name)) << "\n";
      if (k < result.panel_figures.size() && result.panel_figures[k].drawn)
        md << "![" << report::placement_label(p) << ", " << name << "](stabilitymap_" << to_string(p) << "_" << name
           << ".png)\n\n";
      ++k;
    }
  md << "## All panels\n\nShade: the fraction of the seeds that learned; the thick line separates cells where at "
     << "least half the seeds learned from cells where fewer did.\n\n![stability map](stabilitymap.png)\n\n";
  // The explanations of warm-up that this map alone can test, decided by its cells as the report decides them.
  const report::Lang L = options.lang;
  md << "## " << report::tr(L, "Explanations of warm-up this map can test") << "\n\n"
     << report::tr(L,
                   "Two of the reproduction report's three explanations of warm-up read the stability map alone. "
                   "Their verdicts, computed from the cells above (a cell trains when at least half of its seeds "
                   "learned), not taken from the papers:")
     << "\n";
  for (const ExplanationCheck& c : check_stabilitymap_explanations(options, result.cells, L)) {
    md << "\n### " << c.explanation << "\n\n"
       << "- " << report::tr(L, "Prediction: {1}", {c.prediction}) << "\n"
       << "- " << report::tr(L, "Measured: {1}", {c.measured}) << "\n"
       << "- " << report::tr(L, "Rule: {1}", {c.rule}) << "\n"
       << "- " << report::tr(L, "**Verdict: {1}.**", {verdict_text(c.verdict, L)}) << "\n";
    if (!c.header.empty() && !c.rows.empty()) md << "\n" << markdown_table(c.header, c.rows);
  }
  io::write_file_atomic(result.markdown, md.str());
}

StabilityMapResult run_stabilitymap(const StabilityMapOptions& options, const Log& log, const SweepProgressFn& progress) {
  const FinishedRuns finished = read_finished_runs(options);
  const std::vector<SweepOptions> sweeps = plan_stabilitymap(options, finished);  // Error before anything is written
  claim_output_dir(options.out, "stabilitymap", stabilitymap_settings(options), true);
  if (log && !options.finished.empty())
    log(std::to_string(finished.runs.size()) + " run(s) finished elsewhere, read from " + options.finished +
        (finished.outside > 0 ? " (" + std::to_string(finished.outside) + " more outside this map's lists, not used)"
                              : std::string()));
  StabilityMapResult result;
  result.runs = finished.runs;
  // A sweep's result holds every run finished in its directory, also those it skipped as finished elsewhere (an
  // OUT that trained them in an earlier piece, when --finished now carries them too): each run is one row, the
  // carried one.
  const std::set<std::string> carried = finished.keys();
  int both = 0;
  const auto add_rows = [&](const std::string& optimizer, const SweepResult& sweep) {
    for (StabilityRun& r : stabilitymap_runs(optimizer, sweep)) {
      if (carried.count(run_key(r)) != 0) {
        ++both;
        continue;
      }
      result.runs.push_back(std::move(r));
    }
  };
  const auto log_both = [&] {
    if (log && both > 0)
      log(std::to_string(both) + " run(s) finished both in " + options.out + " and in " + options.finished +
          ": the rows from " + options.finished + " are kept");
  };
  // Plan order (optimizer, placement, warm-up, lr, seed) whichever way the rows came: the CSV reads the same
  // wherever each run was trained.
  const auto write_in_plan_order = [&] {
    const auto index_of = [](const auto& list, const auto& value) {
      return static_cast<size_t>(std::find(list.begin(), list.end(), value) - list.begin());
    };
    std::vector<std::string> optimizers;
    for (const OptimizerEntry& e : options.optimizers) optimizers.push_back(to_string(e));
    std::vector<std::string> lrs;
    for (double lr : options.lrs) lrs.push_back(lr_text(lr));
    const auto order = [&](const StabilityRun& r) {
      return std::make_tuple(index_of(optimizers, r.optimizer), index_of(options.placements, r.placement),
                             index_of(options.warmups, r.warmup), index_of(lrs, lr_text(r.lr)),
                             index_of(options.seeds, r.seed));
    };
    std::stable_sort(result.runs.begin(), result.runs.end(),
                     [&](const StabilityRun& a, const StabilityRun& b) { return order(a) < order(b); });
    result.cells = summarize_stabilitymap(options, result.runs);
    write_stabilitymap(options, result);
  };
  for (size_t i = 0; i < sweeps.size(); ++i) {
    const std::string name = to_string(options.optimizers[i]);
    if (log)
      log("== stability map, " + name + " (" + std::to_string(i + 1) + " of " + std::to_string(sweeps.size()) +
          "): " + std::to_string(plan_sweep(sweeps[i]).size()) + " runs ==");
    try {
      result.sweeps.push_back(run_sweep(sweeps[i], log, progress));
    } catch (const SweepInterrupted& interrupted) {
      // The map so far: every earlier sweep, this one's finished runs, and the rows finished elsewhere.
      try {
        add_rows(name, interrupted.finished());
        log_both();
        write_in_plan_order();
        if (log) log("wrote the map of the " + std::to_string(result.runs.size()) + " run(s) finished so far: " + result.csv);
      } catch (const std::exception& e) {
        if (log) log("could not write the map of the runs finished so far: " + std::string(e.what()));
      }
      throw;
    }
    add_rows(name, result.sweeps.back());
  }
  log_both();
  write_in_plan_order();
  if (log)
    log(result.figure.drawn ? "wrote " + result.csv + ", " + result.markdown + " and stabilitymap*.{png,svg}"
                            : "wrote " + result.csv + " and " + result.markdown + "; " + result.figure.message);
  return result;
}

}  // namespace blocklab::experiments
