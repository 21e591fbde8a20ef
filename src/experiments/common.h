#pragma once
// Small pieces shared by the experiments: a log callback, list parsing for flags, labels and number
// formatting for tables.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "train/run_config.h"

namespace blocklab::experiments {

// Experiments report what they do (one line per call) through this; the CLI prints it.
using Log = std::function<void(const std::string&)>;

// "0,1,2" -> {0,1,2}. Throws Error naming `what` for an empty list, an empty item or a bad number.
std::vector<uint64_t> parse_seed_list(const std::string& text, const std::string& what = "seeds");
std::vector<int> parse_int_list(const std::string& text, const std::string& what);
// Splits on ',' keeping empty items (callers decide whether they are errors).
std::vector<std::string> split(const std::string& text, char sep);

// One resolved config per (placement, seed), placements outer, from a resolved base.
std::vector<RunConfig> configs_per_placement_and_seed(const RunConfig& base,
                                                      const std::vector<NormPlacement>& placements,
                                                      const std::vector<uint64_t>& seeds);

// printf-style formatting of one number ("%.4f" etc.); "n/a" for NaN, "inf"/"-inf" otherwise non-finite.
std::string fmt(double value, const char* format = "%.4g");

}  // namespace blocklab::experiments
