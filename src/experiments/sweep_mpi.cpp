// `blocklab sweep run OUT --mpi`: a dynamic task farm over the planned runs.
//   worker rank -> rank 0   kRequest {finished index or -1, failed 0/1}
//   rank 0 -> worker rank   kAssign  {index to run, or -1: no more}
// Rank 0 answers from a thread of its own while its main thread runs runs too (when the MPI library
// grants a second thread); the next index comes from one counter under a mutex.
#include <cstdint>
#include <mutex>
#include <thread>

#include "experiments/sweep.h"
#include "util/error.h"
#include "util/mpi.h"
#include "util/threads.h"

namespace blocklab::experiments {

namespace {
constexpr int kRequest = 101, kAssign = 102;

struct Farm {
  std::mutex mutex;
  size_t next = 0;
  std::vector<std::string> failed;
  const SweepPlan* plan = nullptr;

  // The next index not done yet, or -1.
  int64_t take() {
    std::lock_guard<std::mutex> lock(mutex);
    while (next < plan->runs.size()) {
      const size_t i = next++;
      if (!run_done(*plan, i)) return static_cast<int64_t>(i);
    }
    return -1;
  }
  void note_failure(size_t index, int rank, const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    failed.push_back(std::to_string(index) + " " + plan->runs[index].name + " (rank " + std::to_string(rank) + ": " + why +
                     ")");
  }
};

// Runs one planned run; "" when it ended, else why not.
std::string run_one(const SweepPlan& plan, size_t index, int threads, int rank, const Log& log) {
  try {
    const PlannedRunOutcome outcome = run_planned(plan, index, threads);
    if (log) log("rank " + std::to_string(rank) + ": run " + std::to_string(index) + " " + plan.runs[index].name + ": " +
                 to_string(outcome));
    return "";
  } catch (const Interrupted& e) {
    // a signal: the run wrote its checkpoint; the other ranks cannot finish the farm without this one
    if (log) log("rank " + std::to_string(rank) + ": " + e.what() + "; ending the job (run the same command to continue)");
    mpi::abort_all(128 + e.signal());
  } catch (const Error& e) {
    if (log) log("rank " + std::to_string(rank) + ": run " + std::to_string(index) + " " + plan.runs[index].name +
                 " FAILED: " + e.what());
    return e.what();
  }
}
}  // namespace

int run_sweep_mpi(const SweepPlan& plan, int threads, const Log& log) {
  mpi::World world(/*threaded=*/true);
  if (threads < 0) threads = std::max(1, hardware_threads() / mpi::local_ranks());
  const int rank = world.rank(), size = world.size();
  Farm farm;
  farm.plan = &plan;
  if (rank == 0 && log)
    log("sweep of " + std::to_string(plan.runs.size()) + " runs in " + plan.out + " over " + std::to_string(size) +
        " rank(s), " + std::to_string(threads) + " thread(s) each");

  if (rank == 0) {
    auto dispatch = [&] {
      int stopped = 0;
      while (stopped < size - 1) {
        const int source = mpi::wait_any_source(kRequest);
        int64_t message[2];
        mpi::recv(source, kRequest, message, sizeof message);
        if (message[0] >= 0 && message[1] != 0)
          farm.note_failure(static_cast<size_t>(message[0]), source, "see that rank's output");
        const int64_t index = farm.take();
        mpi::send(source, kAssign, &index, sizeof index);
        if (index < 0) ++stopped;
      }
    };
    std::thread dispatcher;
    if (size > 1 && world.threaded()) dispatcher = std::thread(dispatch);
    if (size == 1 || world.threaded()) {
      for (int64_t i; (i = farm.take()) >= 0;) {
        const std::string why = run_one(plan, static_cast<size_t>(i), threads, rank, log);
        if (!why.empty()) farm.note_failure(static_cast<size_t>(i), rank, why);
      }
    }
    if (dispatcher.joinable())
      dispatcher.join();
    else if (size > 1)
      dispatch();  // no second thread: rank 0 only hands out runs
  } else {
    int64_t message[2] = {-1, 0};
    for (;;) {
      mpi::send(0, kRequest, message, sizeof message);
      int64_t index = -1;
      mpi::recv(0, kAssign, &index, sizeof index);
      if (index < 0) break;
      message[0] = index;
      message[1] = run_one(plan, static_cast<size_t>(index), threads, rank, log).empty() ? 0 : 1;
    }
  }
  mpi::barrier();
  if (rank != 0) return 0;
  const SweepResult merged = merge_sweep(plan, true, "", log);
  for (const auto& f : farm.failed)
    if (log) log("FAILED " + f);
  for (const auto& u : merged.unfinished)
    if (log) log("not done: " + u);
  return merged.unfinished.empty() && farm.failed.empty() ? 0 : 1;
}

}  // namespace blocklab::experiments
