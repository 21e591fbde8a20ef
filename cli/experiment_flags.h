#pragma once
// Flags and console output shared by the experiment subcommands (gradnorm, sweep, residual,
// standardize, reproduce).
#include <CLI/CLI.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "experiments/common.h"
#include "experiments/sweep.h"
#include "train/run_config.h"

namespace blocklab::cli {

// --out when given on the command line, else `fallback` (the config key's default names a train run).
std::string output_dir(const CLI::App* app, const RunConfig& config, const std::string& fallback);
// --seeds LIST when given; else --seed when given (one seed); else `fallback`.
std::vector<uint64_t> seed_list(const CLI::App* app, const std::string& seeds_text, const RunConfig& config,
                                const std::string& fallback);
// --placements LIST ("post,pre", or "all" for every placement in report::all_placements() order) when given;
// else --norm-placement when given; else post,pre.
std::vector<NormPlacement> placement_list(const CLI::App* app, const std::string& text, const RunConfig& config);

// Prints experiment log lines on stdout, and sweep progress on stderr: a live line on a terminal
// (runs, steps, elapsed, ETA, the running runs' step and loss), else one line every `every_seconds`.
class ConsoleReporter {
 public:
  explicit ConsoleReporter(double every_seconds = 30);
  ~ConsoleReporter();
  experiments::Log log();
  experiments::SweepProgressFn progress();
  void finish();  // ends a live line

 private:
  void print_log(const std::string& line);
  void print_progress(const experiments::SweepProgress& p);
  bool tty_;
  bool live_ = false;
  double every_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace blocklab::cli
