#include "util/profiler.h"

#include <atomic>

namespace blocklab {

namespace {
std::atomic<Profiler*> g_active{nullptr};
}

void Profiler::add(const char* name, double seconds) {
  for (auto& [n, s] : entries_)
    if (n == name) {
      s += seconds;
      return;
    }
  entries_.emplace_back(name, seconds);
}

Profiler* Profiler::active() { return g_active.load(std::memory_order_relaxed); }
void Profiler::install(Profiler* profiler) { g_active.store(profiler, std::memory_order_relaxed); }

}  // namespace blocklab
