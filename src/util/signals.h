#pragma once
// SIGINT/SIGTERM during a long operation (a training run, a sweep): the first signal is only remembered,
// so that the operation can finish its current step, save what it has and stop; a second signal
// restores the default action and re-raises it (stop now).
#include <signal.h>

namespace blocklab {

// Installs the handlers for its lifetime (the previous ones come back on destruction) and forgets any
// signal seen before. One at a time per process.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (SIGINT or SIGTERM) since construction; 0 when none.
  int pending() const;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace blocklab
