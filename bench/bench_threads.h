#pragma once
// What the bench programs taking a [THREADS] argument share: that argument, and the clock they time calls by.
#include <time.h>

#include <cstdio>
#include <cstdlib>

#include "util/profiler.h"

namespace blocklab::bench {

// THREADS from argv[1] (1 when absent); on anything but a positive integer, prints why and returns 0.
inline int threads_argument(int argc, char** argv, const char* program) {
  if (argc < 2) return 1;
  char* end = nullptr;
  const long threads = std::strtol(argv[1], &end, 10);
  if (end == argv[1] || *end != '\0' || threads < 1 || threads > 4096) {
    std::fprintf(stderr, "%s: THREADS must be a positive integer, not '%s'\n", program, argv[1]);
    return 0;
  }
  return static_cast<int>(threads);
}

// Seconds on the clock a benchmark with `threads` threads times by: the calling thread's CPU time with one
// thread (a busy machine's waits for a core left out), wall time with more.
inline double now_seconds(int threads) {
  if (threads == 1) return thread_cpu_seconds();
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace blocklab::bench
