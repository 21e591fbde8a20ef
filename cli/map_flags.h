#pragma once
// What the map commands (depthmap, stabilitymap) share: the flags every map has (the config flags,
// --placements, --warmups, --seeds, --jobs, --quick), their reading into the map's options, running the map
// with console progress, and printing its tables.
#include <CLI/CLI.hpp>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "commands.h"
#include "experiment_flags.h"

namespace blocklab::cli {

struct MapFlags {
  ConfigFlags config;
  std::string placements, warmups, seeds;
  int jobs = 0;
  bool quick = false;
};

// --jobs N (runs at a time).
void add_jobs_flag(CLI::App* app, int& jobs);

// Throws Error when one of `axes` (a single-value config flag whose key the map varies) was given:
// "--warmup is an axis of the map: use `use`".
void reject_axis_flags(const CLI::App* app, std::initializer_list<const char*> axes, const std::string& use);

// "0,100,400" -> warm-up steps (Error for a bad list or a value above 1e9).
std::vector<int> warmup_list(const std::string& text);

// The map's base config and output directory from the config flags and --out (else `default_out`), and
// its placements from --placements or --norm-placement when given.
template <typename MapOptions>
void read_map_config(const CLI::App* app, const MapFlags& flags, MapOptions& options, const std::string& default_out) {
  options.base = build_config(app, flags.config, options.base);
  options.out = output_dir(app, options.base, default_out);
  if (app->count("--placements") > 0 || app->count("--norm-placement") > 0)
    options.placements = placement_list(app, flags.placements, options.base);
}

// The map's warm-ups (--warmups), seeds (--seeds, else --seed, else the preset's) and jobs.
template <typename MapOptions>
void read_map_runs(const CLI::App* app, const MapFlags& flags, MapOptions& options) {
  if (app->count("--warmups") > 0) options.warmups = warmup_list(flags.warmups);
  std::string preset_seeds;
  for (uint64_t s : options.seeds) preset_seeds += (preset_seeds.empty() ? "" : ",") + std::to_string(s);
  options.seeds = seed_list(app, flags.seeds, options.base, preset_seeds);
  options.jobs = flags.jobs;
}

// Runs `run` with console progress. Returns 0, or 128 + the signal when the map was interrupted (it says so
// on stderr).
int run_map(const std::function<void(const experiments::Log&, const experiments::SweepProgressFn&)>& run);

// Rows (the first a header) as space-aligned columns on stdout.
void print_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace blocklab::cli
