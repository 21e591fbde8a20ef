#include "util/profiler.h"

#include <time.h>

#include <atomic>

namespace blocklab {

namespace {
std::atomic<Profiler*> g_active{nullptr};
}

namespace {
double cpu_seconds(clockid_t clock) {
  timespec t{};
  ::clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
}  // namespace

double thread_cpu_seconds() { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }
double process_cpu_seconds() { return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID); }

void Profiler::add(const char* name, double seconds, double cpu_seconds) {
  for (auto& e : entries_)
    if (e.name == name) {
      e.seconds += seconds;
      e.cpu_seconds += cpu_seconds;
      return;
    }
  entries_.push_back({name, seconds, cpu_seconds});
}

void Profiler::add_gemm(bool trans_a, bool trans_b, int M, int N, int K, double seconds, double cpu_seconds) {
  const std::string shape = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " " +
                            (trans_a ? "T" : "N") + (trans_b ? "T" : "N");
  const double flops = 2.0 * M * N * K;
  for (auto& g : gemms_)
    if (g.shape == shape) {
      g.seconds += seconds;
      g.cpu_seconds += cpu_seconds;
      g.flops += flops;
      ++g.calls;
      return;
    }
  gemms_.push_back({shape, seconds, cpu_seconds, flops, 1});
}

Profiler* Profiler::active() { return g_active.load(std::memory_order_relaxed); }
void Profiler::install(Profiler* profiler) { g_active.store(profiler, std::memory_order_relaxed); }

}  // namespace blocklab
