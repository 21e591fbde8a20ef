#pragma once
// Time accounting per kernel, for `blocklab bench --profile`. Kernels open a BLOCKLAB_PROFILE scope; with
// no profiler installed (the normal case) that costs one load and one branch. Each scope records wall time
// and the calling thread's CPU time: on a machine busy with other work, a one-thread profile's CPU times
// leave out the time the thread waited for a core.
#include <chrono>
#include <string>
#include <vector>

namespace blocklab {

// CPU seconds the calling thread has run.
double thread_cpu_seconds();
// CPU seconds the whole process (all threads) has run.
double process_cpu_seconds();

class Profiler {
 public:
  struct Entry {
    std::string name;
    double seconds = 0, cpu_seconds = 0;  // wall; CPU time of the calling thread
  };
  void add(const char* name, double seconds, double cpu_seconds);
  void clear() {
    entries_.clear();
    gemms_.clear();
  }
  // Kernels in first-seen order.
  const std::vector<Entry>& entries() const { return entries_; }

  // GEMM calls by shape, timed inside the kernels above (so not part of a separate total): the same shape's
  // calls summed.
  struct Gemm {
    std::string shape;  // "MxNxK AB" with A/B = N (as stored) or T (transposed)
    double seconds = 0, cpu_seconds = 0, flops = 0;
    long calls = 0;
  };
  void add_gemm(bool trans_a, bool trans_b, int M, int N, int K, double seconds, double cpu_seconds);
  const std::vector<Gemm>& gemms() const { return gemms_; }

  // The profiler kernels report to (nullptr: none). Install only around single-threaded driver code:
  // kernels are called from one thread at a time.
  static Profiler* active();
  static void install(Profiler* profiler);

 private:
  std::vector<Entry> entries_;
  std::vector<Gemm> gemms_;
};

class ScopedTimer {
 public:
  explicit ScopedTimer(const char* name) : profiler_(Profiler::active()), name_(name) {
    if (profiler_ != nullptr) {
      start_ = std::chrono::steady_clock::now();
      cpu_start_ = thread_cpu_seconds();
    }
  }
  ~ScopedTimer() {
    if (profiler_ != nullptr)
      profiler_->add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
                     thread_cpu_seconds() - cpu_start_);
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Profiler* profiler_;
  const char* name_;
  std::chrono::steady_clock::time_point start_;
  double cpu_start_ = 0;
};

// Times one GEMM call into profiler's by-shape table (Profiler::add_gemm); nothing when profiler is null
// (callers pass null inside a parallel region, whose calls the enclosing kernel's timer already covers).
class ScopedGemmTimer {
 public:
  ScopedGemmTimer(Profiler* profiler, bool trans_a, bool trans_b, int M, int N, int K)
      : profiler_(profiler), trans_a_(trans_a), trans_b_(trans_b), M_(M), N_(N), K_(K) {
    if (profiler_ != nullptr) {
      start_ = std::chrono::steady_clock::now();
      cpu_start_ = thread_cpu_seconds();
    }
  }
  ~ScopedGemmTimer() {
    if (profiler_ != nullptr)
      profiler_->add_gemm(trans_a_, trans_b_, M_, N_, K_,
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
                          thread_cpu_seconds() - cpu_start_);
  }
  ScopedGemmTimer(const ScopedGemmTimer&) = delete;
  ScopedGemmTimer& operator=(const ScopedGemmTimer&) = delete;

 private:
  Profiler* profiler_;
  bool trans_a_, trans_b_;
  int M_, N_, K_;
  std::chrono::steady_clock::time_point start_;
  double cpu_start_ = 0;
};

}  // namespace blocklab

#define BLOCKLAB_PROFILE_CONCAT2(a, b) a##b
#define BLOCKLAB_PROFILE_CONCAT(a, b) BLOCKLAB_PROFILE_CONCAT2(a, b)
#define BLOCKLAB_PROFILE(name) ::blocklab::ScopedTimer BLOCKLAB_PROFILE_CONCAT(blocklab_profile_, __LINE__)(name)
