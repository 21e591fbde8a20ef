#pragma once
// Wall-time accounting per kernel, for `blocklab bench --profile`. Kernels open a BLOCKLAB_PROFILE
// scope; with no profiler installed (the normal case) that costs one load and one branch.
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace blocklab {

class Profiler {
 public:
  void add(const char* name, double seconds);
  void clear() { entries_.clear(); }
  // (name, seconds) in first-seen order.
  const std::vector<std::pair<std::string, double>>& entries() const { return entries_; }

  // The profiler kernels report to (nullptr: none). Install only around single-threaded driver code:
  // kernels are called from one thread at a time.
  static Profiler* active();
  static void install(Profiler* profiler);

 private:
  std::vector<std::pair<std::string, double>> entries_;
};

class ScopedTimer {
 public:
  explicit ScopedTimer(const char* name) : profiler_(Profiler::active()), name_(name) {
    if (profiler_ != nullptr) start_ = std::chrono::steady_clock::now();
  }
  ~ScopedTimer() {
    if (profiler_ != nullptr)
      profiler_->add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Profiler* profiler_;
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace blocklab

#define BLOCKLAB_PROFILE_CONCAT2(a, b) a##b
#define BLOCKLAB_PROFILE_CONCAT(a, b) BLOCKLAB_PROFILE_CONCAT2(a, b)
#define BLOCKLAB_PROFILE(name) ::blocklab::ScopedTimer BLOCKLAB_PROFILE_CONCAT(blocklab_profile_, __LINE__)(name)
