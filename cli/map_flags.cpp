#include "map_flags.h"

#include <algorithm>
#include <cstdio>

#include "util/error.h"

namespace blocklab::cli {

void add_jobs_flag(CLI::App* app, int& jobs) {
  app->add_option("--jobs", jobs, "runs at a time; each gets max(1, cores/jobs) threads [cores]")
      ->check(at_least(0))
      ->type_name("N");
}

void reject_axis_flags(const CLI::App* app, std::initializer_list<const char*> axes, const std::string& use) {
  for (const char* axis : axes)
    if (app->count(axis) > 0) throw Error(std::string(axis) + " is an axis of the map: use " + use);
}

std::vector<int> warmup_list(const std::string& text) {
  std::vector<int> warmups;
  for (uint64_t w : experiments::parse_seed_list(text, "--warmups")) {
    if (w > 1000000000) throw Error("--warmups: " + std::to_string(w) + " is too large");
    warmups.push_back(static_cast<int>(w));
  }
  return warmups;
}

int run_map(const std::function<void(const experiments::Log&, const experiments::SweepProgressFn&)>& run) {
  ConsoleReporter console;
  try {
    run(console.log(), console.progress());
  } catch (const experiments::SweepInterrupted& e) {
    console.finish();
    std::fprintf(stderr, "blocklab: %s\n", e.what());
    return 128 + e.signal();
  }
  console.finish();
  return 0;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (widths.size() <= i) widths.push_back(0);
      widths[i] = std::max(widths[i], row[i].size());
    }
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i)
      std::printf("%s%-*s", i ? "  " : "", static_cast<int>(widths[i]), row[i].c_str());
    std::printf("\n");
  }
}

}  // namespace blocklab::cli
