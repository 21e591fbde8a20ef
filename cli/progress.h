#pragma once
// Progress for long work: a live line (rewritten in place) on a terminal, periodic lines otherwise.
#include <chrono>
#include <string>

namespace blocklab::cli {

class Progress {
 public:
  // total: number of units; every: print a line every this many units when not on a terminal
  // (0: about 20 lines in all).
  Progress(std::string label, long total, long every = 0);
  // Reports that `done` units are finished; detail is appended (e.g. the current loss).
  void update(long done, const std::string& detail);
  // Ends a live line so that following output starts on a fresh line.
  void finish();

  static std::string format_duration(double seconds);

 private:
  std::string label_;
  long total_, every_;
  bool tty_;
  bool live_line_open_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace blocklab::cli
