#include "experiment_flags.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include "report/labels.h"
#include "progress.h"
#include "util/error.h"

namespace blocklab::cli {

std::string output_dir(const CLI::App* app, const RunConfig& config, const std::string& fallback) {
  return app->count("--out") > 0 ? config.out : fallback;
}

std::vector<uint64_t> seed_list(const CLI::App* app, const std::string& seeds_text, const RunConfig& config,
                                const std::string& fallback) {
  if (app->count("--seeds") > 0) {
    if (app->count("--seed") > 0) throw Error("give either --seed or --seeds, not both");
    return experiments::parse_seed_list(seeds_text);
  }
  if (app->count("--seed") > 0) return {config.seed};
  return experiments::parse_seed_list(fallback);
}

std::vector<NormPlacement> placement_list(const CLI::App* app, const std::string& text, const RunConfig& config) {
  if (app->count("--placements") > 0) {
    if (app->count("--norm-placement") > 0) throw Error("give either --norm-placement or --placements, not both");
    if (text.empty()) throw Error("--placements: the list is empty");
    if (text == "all") return report::all_placements();
    std::string names;
    for (NormPlacement q : report::all_placements()) names += (names.empty() ? "" : ", ") + to_string(q);
    const std::string valid = " (expected a comma-separated list of " + names + "; or all alone)";
    std::vector<NormPlacement> list;
    for (const std::string& item : experiments::split(text, ',')) {
      if (item == "all") throw Error("--placements: 'all' cannot be combined with other names" + valid);
      NormPlacement p = NormPlacement::Pre;
      try {
        p = parse_norm_placement(item);
      } catch (const Error&) {
        throw Error("--placements: unknown norm placement '" + item + "'" + valid);
      }
      for (NormPlacement q : list)
        if (q == p) throw Error("--placements: '" + item + "' appears twice");
      list.push_back(p);
    }
    return list;
  }
  if (app->count("--norm-placement") > 0) return {config.model.norm_placement};
  return {NormPlacement::Post, NormPlacement::Pre};
}

ConsoleReporter::ConsoleReporter(double every_seconds)
    : tty_(::isatty(STDERR_FILENO) != 0), every_(every_seconds), last_(std::chrono::steady_clock::now()) {}

ConsoleReporter::~ConsoleReporter() { finish(); }

void ConsoleReporter::finish() {
  if (live_) std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  live_ = false;
}

experiments::Log ConsoleReporter::log() {
  return [this](const std::string& line) { print_log(line); };
}

experiments::SweepProgressFn ConsoleReporter::progress() {
  return [this](const experiments::SweepProgress& p) { print_progress(p); };
}

void ConsoleReporter::print_log(const std::string& line) {
  finish();
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void ConsoleReporter::print_progress(const experiments::SweepProgress& p) {
  const auto now = std::chrono::steady_clock::now();
  if (!tty_ && std::chrono::duration<double>(now - last_).count() < every_) return;
  last_ = now;
  char head[256];
  std::snprintf(head, sizeof head, "runs %d/%d done, %d running | steps %ld/%ld (%.0f%%) | elapsed %s eta %s",
                p.runs_finished, p.runs_total, p.runs_active, p.steps_done, p.steps_total,
                p.steps_total > 0 ? 100.0 * p.steps_done / p.steps_total : 100.0,
                Progress::format_duration(p.elapsed).c_str(), Progress::format_duration(p.eta).c_str());
  std::string line = head;
  for (const auto& a : p.active) {
    char run[256];
    std::snprintf(run, sizeof run, " | %s %d/%d loss %.4f", a.name.c_str(), a.step, a.steps, a.loss);
    line += run;
  }
  if (tty_) {
    struct winsize ws {};
    const size_t columns = ::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20 ? ws.ws_col : 120;
    if (line.size() >= columns) line = line.substr(0, columns - 4) + "...";
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    live_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace blocklab::cli
