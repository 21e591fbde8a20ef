// `blocklab sweep run OUT --mpi`: the planned runs as an MPI task farm (sched/task_farm.h).
#include "experiments/sweep.h"
#include "sched/task_farm.h"
#include "util/error.h"
#include "util/mpi.h"
#include "util/threads.h"

namespace blocklab::experiments {

namespace {

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
  const int rank = world.rank();
  if (rank == 0 && log)
    log("sweep of " + std::to_string(plan.runs.size()) + " runs in " + plan.out + " over " + std::to_string(world.size()) +
        " rank(s), " + std::to_string(threads) + " thread(s) each");
  const sched::FarmTasks tasks{plan.runs.size(), [&](size_t i) { return run_done(plan, i); },
                               [&](size_t i, int r) { return run_one(plan, i, threads, r, log); }};
  const std::vector<sched::FarmFailure> failed = sched::run_task_farm(world, tasks);
  if (rank != 0) return 0;
  const SweepResult merged = merge_sweep(plan, true, "", log);
  for (const sched::FarmFailure& f : failed)
    if (log)
      log("FAILED " + std::to_string(f.task) + " " + plan.runs[f.task].name + " (rank " + std::to_string(f.rank) + ": " +
          f.why + ")");
  for (const auto& u : merged.unfinished)
    if (log) log("not done: " + u);
  return merged.unfinished.empty() && failed.empty() ? 0 : 1;
}

}  // namespace blocklab::experiments
