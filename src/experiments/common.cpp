#include "experiments/common.h"

#include <cmath>
#include <cstdio>

#include "util/error.h"
#include "util/parse_list.h"

namespace blocklab::experiments {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> items;
  size_t start = 0;
  for (;;) {
    const size_t end = text.find(sep, start);
    items.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return items;
}


std::vector<uint64_t> parse_seed_list(const std::string& text, const std::string& what) {
  return parse_list<uint64_t>(text, what, 0);
}

std::vector<int> parse_int_list(const std::string& text, const std::string& what) {
  return parse_list<int>(text, what, 1);
}

std::string fmt(double value, const char* format) {
  if (std::isnan(value)) return "n/a";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::vector<RunConfig> configs_per_placement_and_seed(const RunConfig& base,
                                                      const std::vector<NormPlacement>& placements,
                                                      const std::vector<uint64_t>& seeds) {
  std::vector<RunConfig> configs;
  for (NormPlacement placement : placements)
    for (uint64_t seed : seeds) {
      RunConfig c = base;
      c.model.norm_placement = placement;
      c.seed = seed;
      resolve(c);
      configs.push_back(c);
    }
  return configs;
}

}  // namespace blocklab::experiments
