// The browser page's entry points into the core (embind): the same library calls as the CLI and the Python
// package make, for the experiments the page runs. Every function takes and returns JSON text, and never throws
// into JavaScript: a bad input comes back as {"error": "the message the CLI would print"}.
//
//   build_info()          jobs::build_info(): {"version", "isa", "isa_levels": [...], "cpu_features", "kernels",
//                         "optional_parts": [{name, present, serves, without}]}
//   config_keys()         [{"name", "type": int|float|bool|str, "help", "default"}]: every config key
//   resolve_config(C)     the resolved config of C (an object of config keys), as config.json holds it
//   gradnorm(Q)           experiment A. Q = {"config": C, "placements": ["post", "pre"], "seeds": [0],
//                         "batches": 1} -> {"gradnorm": [{placement, seed, block, parameter, grad_norm}],
//                         "seconds"}: the rows of gradnorm.csv (block null outside the blocks)
//   residual(Q)           problem 10. Q = {"config": C, "placements": [...], "seeds": [...], "walk": {"dim",
//                         "trials", "depths", "seed"}} -> {"walk": {"depth": [0..L], "mean_length",
//                         "sqrt_depth_plus_1", "mean_relative_change"}, "init": [{placement, seed, layer,
//                         mean_vector_norm, mean_token_norm}], "seconds"}
//   standardize(Q)        problem 9. Q = {"table": {"corner", "row_names", "column_names", "values"}} (the
//                         source's table when absent), "rows": [names for the per-column view]} ->
//                         {"table", "rows": table standardized per row, "columns": per column, "row_stats":
//                         [{mean, sd}], "column_stats": [{mean, sd}] over the rows of the per-column view}
//   train_start(C)        a training run of C in memory (experiment B): {"session": id, "config": resolved C}
//   train_steps(id, n)    up to n more steps: {"metrics": [{step, loss, lr, grad_norm, skipped, seconds}],
//                         "steps_done", "done"}
//   train_summary(id)     the loss curve's summary as the CLI labels it: {"outcome", "final_loss", "min_loss",
//                         "min_loss_step", "first_step_below", "smoothed_final_loss", "steps", "ms_per_step"}
//   train_free(id)        forgets the session
#include <emscripten/bind.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/common.h"
#include "experiments/gradnorm.h"
#include "experiments/residual.h"
#include "experiments/standardize.h"
#include "jobs/build_info.h"
#include "probe/outcome.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "util/error.h"

namespace blocklab::web {
namespace {

using nlohmann::json;

// Runs f, returning its JSON as text, or {"error": what} for anything it throws.
template <typename F>
std::string guarded(F&& f) {
  try {
    return f().dump();
  } catch (const std::exception& e) {
    return json{{"error", e.what()}}.dump();
  }
}

json parse(const std::string& text) {
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) throw Error("not valid JSON: " + text.substr(0, 200));
  return value;
}

RunConfig config_of(const json& values) {
  RunConfig config;
  if (!values.is_null()) apply_json(config, values);
  resolve(config);
  return config;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<NormPlacement> placements_of(const json& q) {
  std::vector<NormPlacement> out;
  for (const auto& p : q.value("placements", json::array({"post", "pre"})))
    out.push_back(parse_norm_placement(p.get<std::string>()));
  if (out.empty()) throw Error("placements: give at least one");
  return out;
}

std::vector<uint64_t> seeds_of(const json& q) {
  std::vector<uint64_t> out;
  for (const auto& s : q.value("seeds", json::array({0}))) out.push_back(s.get<uint64_t>());
  if (out.empty()) throw Error("seeds: give at least one");
  return out;
}

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

json config_keys_json() {
  const RunConfig defaults;
  json keys = json::array();
  for (const ConfigKey& k : config_keys()) {
    keys.push_back({{"name", k.name}, {"type", key_type_name(k.type)}, {"help", k.help}, {"default", k.get(defaults)}});
  }
  return keys;
}

json gradnorm_json(const json& q) {
  const auto start = std::chrono::steady_clock::now();
  const RunConfig base = config_of(q.value("config", json::object()));
  const int batches = q.value("batches", 1);
  if (batches < 1) throw Error("batches must be at least 1");
  const auto placements = placements_of(q);
  const auto seeds = seeds_of(q);
  json rows = json::array();
  size_t index = 0;
  const auto configs = experiments::configs_per_placement_and_seed(base, placements, seeds);
  for (NormPlacement placement : placements)
    for (uint64_t seed : seeds)
      for (const auto& p : experiments::gradnorms_at_init(configs[index++], batches))
        rows.push_back({{"placement", to_string(placement)},
                        {"seed", seed},
                        {"block", p.block > 0 ? json(p.block) : json(nullptr)},
                        {"parameter", p.name},
                        {"grad_norm", number_or_null(p.norm)}});
  return {{"gradnorm", rows}, {"seconds", seconds_since(start)}};
}

json residual_json(const json& q) {
  const auto start = std::chrono::steady_clock::now();
  const RunConfig base = config_of(q.value("config", json::object()));
  experiments::RandomWalkOptions walk;
  const json w = q.value("walk", json::object());
  walk.dim = w.value("dim", base.model.width);
  walk.trials = w.value("trials", 500);
  walk.depths = w.value("depths", std::vector<int>{base.model.layers});
  walk.seed = w.value("seed", uint64_t{0});
  const experiments::RandomWalkResult result = experiments::simulate_random_walk(walk);
  json depth = json::array(), root = json::array(), change = json::array(), length = json::array();
  for (size_t l = 0; l < result.mean_length.size(); ++l) {
    depth.push_back(l);
    length.push_back(result.mean_length[l]);
    root.push_back(std::sqrt(static_cast<double>(l) + 1));
    change.push_back(number_or_null(result.mean_relative_change[l]));
  }
  json init = json::array();
  const auto placements = placements_of(q);
  const auto seeds = seeds_of(q);
  size_t index = 0;
  const auto configs = experiments::configs_per_placement_and_seed(base, placements, seeds);
  for (NormPlacement placement : placements)
    for (uint64_t seed : seeds) {
      const probe::ResidualNorms norms = experiments::residual_norms_at_init(configs[index++]);
      for (size_t layer = 0; layer < norms.mean_token_norm.size(); ++layer)
        init.push_back({{"placement", to_string(placement)},
                        {"seed", seed},
                        {"layer", layer},
                        {"mean_vector_norm", number_or_null(norms.mean_vector_norm[layer])},
                        {"mean_token_norm", number_or_null(norms.mean_token_norm[layer])}});
    }
  return {{"walk",
           {{"depth", depth}, {"mean_length", length}, {"sqrt_depth_plus_1", root}, {"mean_relative_change", change}}},
          {"init", init},
          {"seconds", seconds_since(start)}};
}

json table_json(const experiments::ScoreTable& t) {
  return {{"corner", t.corner}, {"row_names", t.row_names}, {"column_names", t.column_names}, {"values", t.values}};
}

json standardize_json(const json& q) {
  experiments::ScoreTable table = experiments::source_score_table();
  if (q.contains("table")) {
    const json& t = q.at("table");
    table.corner = t.value("corner", table.corner);
    table.row_names = t.at("row_names").get<std::vector<std::string>>();
    table.column_names = t.at("column_names").get<std::vector<std::string>>();
    table.values.clear();
    for (const json& row : t.at("values")) {
      std::vector<double> values;
      for (const json& v : row) {
        if (!v.is_number()) throw Error("every score must be a number, got " + v.dump());
        values.push_back(v.get<double>());
      }
      table.values.push_back(values);
    }
    if (table.row_names.empty() || table.column_names.size() < 2)
      throw Error("the table needs at least 1 row and 2 columns");
    if (table.values.size() != table.row_names.size())
      throw Error("the table has " + std::to_string(table.row_names.size()) + " names but " +
                  std::to_string(table.values.size()) + " rows");
    for (size_t r = 0; r < table.values.size(); ++r) {
      if (table.values[r].size() != table.column_names.size())
        throw Error("row " + table.row_names[r] + " has " + std::to_string(table.values[r].size()) +
                    " values for " + std::to_string(table.column_names.size()) + " columns");
      for (double v : table.values[r])
        if (!std::isfinite(v)) throw Error("row " + table.row_names[r] + ": every score must be a finite number");
    }
  }
  const auto rows = q.value("rows", std::vector<std::string>{});
  json row_stats = json::array(), column_stats = json::array();
  for (const auto& values : table.values) {
    const auto s = experiments::stats(values);
    row_stats.push_back({{"mean", s.mean}, {"sd", s.sd}});
  }
  const experiments::ScoreTable per_column = experiments::standardize_columns(table, rows);
  for (size_t c = 0; c < table.column_names.size(); ++c) {  // over the rows standardized per column
    std::vector<double> column;
    for (size_t r = 0; r < table.row_names.size(); ++r)
      if (std::find(per_column.row_names.begin(), per_column.row_names.end(), table.row_names[r]) !=
          per_column.row_names.end())
        column.push_back(table.values[r][c]);
    const auto s = experiments::stats(column);
    column_stats.push_back({{"mean", s.mean}, {"sd", s.sd}});
  }
  return {{"table", table_json(table)},
          {"rows", table_json(experiments::standardize_rows(table))},
          {"columns", table_json(per_column)},
          {"row_stats", row_stats},
          {"column_stats", column_stats}};
}

// A training run held in memory between calls: the page asks for a few steps at a time, so that its worker
// can answer "stop" between them.
struct Session {
  explicit Session(const RunConfig& c) : config(c), trainer(c) {}
  RunConfig config;
  Trainer trainer;
  std::vector<int> steps;
  std::vector<double> losses;
  double seconds = 0;
};
std::map<int, std::unique_ptr<Session>> sessions;
int next_session = 1;

Session& session(int id) {
  const auto it = sessions.find(id);
  if (it == sessions.end()) throw Error("no training session " + std::to_string(id));
  return *it->second;
}

json train_start_json(const json& values) {
  const RunConfig config = config_of(values);
  if (config.is_text()) throw Error("the page trains the copy and reverse tasks (the text task needs a file)");
  const int id = next_session++;
  sessions.emplace(id, std::make_unique<Session>(config));
  return {{"session", id}, {"config", to_json(config)}};
}

json train_steps_json(int id, int n) {
  Session& s = session(id);
  json metrics = json::array();
  for (int k = 0; k < n && s.trainer.steps_done() < s.config.steps; ++k) {
    const StepResult r = s.trainer.step();
    s.steps.push_back(r.step);
    s.losses.push_back(r.loss);
    s.seconds += r.seconds;
    metrics.push_back({{"step", r.step},
                       {"loss", number_or_null(r.loss)},
                       {"lr", r.lr},
                       {"grad_norm", number_or_null(r.grad_norm)},
                       {"skipped", r.nonfinite ? 1 : 0},
                       {"seconds", r.seconds}});
  }
  return {{"metrics", metrics},
          {"steps_done", s.trainer.steps_done()},
          {"done", s.trainer.steps_done() >= s.config.steps}};
}

json train_summary_json(int id) {
  Session& s = session(id);
  if (s.steps.empty()) throw Error("session " + std::to_string(id) + " has taken no step yet");
  const probe::CurveSummary c = probe::summarize_curve(s.steps, s.losses, std::log(s.config.model.vocab));
  return {{"outcome", probe::to_string(c.outcome)},
          {"steps", c.steps},
          {"final_loss", number_or_null(c.final_loss)},
          {"min_loss", number_or_null(c.min_loss)},
          {"min_loss_step", c.min_loss_step},
          {"first_step_below", c.first_step_below ? json(*c.first_step_below) : json(nullptr)},
          {"smoothed_final_loss", number_or_null(c.smoothed_final_loss)},
          {"ms_per_step", 1000 * s.seconds / static_cast<double>(s.steps.size())}};
}

}  // namespace

std::string build_info() { return guarded([] { return jobs::build_info(); }); }
std::string config_keys_text() { return guarded([] { return config_keys_json(); }); }
std::string resolve_config(const std::string& c) { return guarded([&] { return to_json(config_of(parse(c))); }); }
std::string gradnorm(const std::string& q) { return guarded([&] { return gradnorm_json(parse(q)); }); }
std::string residual(const std::string& q) { return guarded([&] { return residual_json(parse(q)); }); }
std::string standardize(const std::string& q) { return guarded([&] { return standardize_json(parse(q)); }); }
std::string train_start(const std::string& c) { return guarded([&] { return train_start_json(parse(c)); }); }
std::string train_steps(int id, int n) { return guarded([&] { return train_steps_json(id, n); }); }
std::string train_summary(int id) { return guarded([&] { return train_summary_json(id); }); }
void train_free(int id) { sessions.erase(id); }

}  // namespace blocklab::web

EMSCRIPTEN_BINDINGS(blocklab) {
  using namespace blocklab::web;
  emscripten::function("build_info", &build_info);
  emscripten::function("config_keys", &config_keys_text);
  emscripten::function("resolve_config", &resolve_config);
  emscripten::function("gradnorm", &gradnorm);
  emscripten::function("residual", &residual);
  emscripten::function("standardize", &standardize);
  emscripten::function("train_start", &train_start);
  emscripten::function("train_steps", &train_steps);
  emscripten::function("train_summary", &train_summary);
  emscripten::function("train_free", &train_free);
}
