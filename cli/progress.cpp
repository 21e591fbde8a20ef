#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace blocklab::cli {

Progress::Progress(std::string label, long total, long every)
    : label_(std::move(label)),
      total_(total),
      every_(every > 0 ? every : std::max(1L, total / 20)),
      tty_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - std::chrono::seconds(1)) {}

std::string Progress::format_duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

void Progress::update(long done, const std::string& detail) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = done > 0 ? elapsed * static_cast<double>(total_ - done) / done : -1;
  char head[160];
  std::snprintf(head, sizeof head, "%s %ld/%ld (%3.0f%%)", label_.c_str(), done, total_,
                total_ > 0 ? 100.0 * done / total_ : 100.0);
  const std::string line = std::string(head) + "  " + detail + "  elapsed " + format_duration(elapsed) + "  eta " +
                           format_duration(eta);
  if (tty_) {
    // redraw at most ~10 times a second, and always at the end
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    live_line_open_ = true;
  } else if (done % every_ == 0 || done == total_ || done == 1) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
}

void Progress::finish() {
  if (live_line_open_) std::fprintf(stderr, "\n");
  live_line_open_ = false;
}

}  // namespace blocklab::cli
