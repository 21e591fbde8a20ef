#pragma once
// Subcommands of the blocklab CLI. Each register_* function adds its subcommand to the root app and
// returns the action to run when that subcommand is chosen. Actions return the process exit status
// and report bad input by throwing blocklab::Error (exit 2).
#include <CLI/CLI.hpp>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "train/run_config.h"

namespace blocklab::cli {

// An integer option's lower bound, with a readable message ("Value 0 not in range 1 to 2147483647");
// CLI11's PositiveNumber/NonNegativeNumber print their upper bound as the largest double, 309 digits.
inline CLI::Range at_least(int lowest) { return CLI::Range(lowest, std::numeric_limits<int>::max()); }


using Action = std::function<int()>;
struct Command {
  CLI::App* app;
  Action action;
};

// Why the environment's BLOCKLAB_GEMM cannot be honoured here, in one line ("BLOCKLAB_GEMM=onednn: this CPU
// has no AVX512-BF16 or AMX-BF16 ..."), or "" when it is unset or can (gemm_env.cpp).
std::string gemm_env_problem();

void register_train(CLI::App& root, std::vector<Command>& commands);
void register_bench(CLI::App& root, std::vector<Command>& commands);
void register_gradnorm(CLI::App& root, std::vector<Command>& commands);
void register_sweep(CLI::App& root, std::vector<Command>& commands);
void register_residual(CLI::App& root, std::vector<Command>& commands);
void register_standardize(CLI::App& root, std::vector<Command>& commands);
void register_reproduce(CLI::App& root, std::vector<Command>& commands);
void register_inspect(CLI::App& root, std::vector<Command>& commands);
void register_probe(CLI::App& root, std::vector<Command>& commands);
void register_export(CLI::App& root, std::vector<Command>& commands);
void register_depthmap(CLI::App& root, std::vector<Command>& commands);
void register_stabilitymap(CLI::App& root, std::vector<Command>& commands);
void register_sample(CLI::App& root, std::vector<Command>& commands);
void register_curvature(CLI::App& root, std::vector<Command>& commands);

// Adds --config FILE and one --flag per config key (string-valued, parsed by the key table).
struct ConfigFlags {
  std::string config_file;
  std::map<std::string, std::string> values;  // key -> text, for the flags given
  std::map<std::string, bool> negated;        // boolean key -> --no-KEY given
};
void add_config_flags(CLI::App* app, ConfigFlags& flags);
// defaults <- TOML file <- flags given on the command line.
RunConfig build_config(const CLI::App* app, const ConfigFlags& flags, RunConfig base = {});

std::string flag_name(const std::string& key);  // norm_placement -> --norm-placement
std::string negated_flag_name(const std::string& key);  // tensorboard -> --no-tensorboard (boolean keys)

}  // namespace blocklab::cli
