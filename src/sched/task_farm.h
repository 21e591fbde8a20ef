#pragma once
// Under mpirun: tasks 0..n-1 as a dynamic task farm over the ranks. Rank 0 hands out the next task not done yet
// to whichever rank asks; it answers from a thread of its own while its main thread runs tasks too (when the MPI
// library grants a second thread), else it only hands them out.
//   worker rank -> rank 0   kRequest {finished task or -1, failed 0/1}
//   rank 0 -> worker rank   kAssign  {task to run, or -1: no more}
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "util/mpi.h"

namespace blocklab::sched {

struct FarmTasks {
  size_t count = 0;
  std::function<bool(size_t task)> done;                  // already done: handed out to no one
  std::function<std::string(size_t task, int rank)> run;  // runs it: "" when it ended, else why not
};

struct FarmFailure {
  size_t task;
  int rank;
  std::string why;  // a worker rank's reason stays in that rank's output
};

// Every rank calls it; all return after a barrier. Rank 0 returns every failure, the other ranks none.
std::vector<FarmFailure> run_task_farm(mpi::World& world, const FarmTasks& tasks);

}  // namespace blocklab::sched
