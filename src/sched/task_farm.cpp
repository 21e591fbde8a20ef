#include "sched/task_farm.h"

#include <cstdint>
#include <mutex>
#include <thread>

namespace blocklab::sched {

namespace {

constexpr int kRequest = 101, kAssign = 102;

// Rank 0's bookkeeping: the next task not done (one counter under a mutex) and the failures.
struct Farm {
  const FarmTasks* tasks = nullptr;
  std::mutex mutex;
  size_t next = 0;
  std::vector<FarmFailure> failed;

  int64_t take() {
    std::lock_guard<std::mutex> lock(mutex);
    while (next < tasks->count) {
      const size_t i = next++;
      if (!tasks->done(i)) return static_cast<int64_t>(i);
    }
    return -1;
  }
  void note_failure(size_t task, int rank, const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex);
    failed.push_back({task, rank, why});
  }
};

// Rank 0: answers every worker rank's requests until each has been told there is no more.
void dispatch(Farm& farm, int ranks) {
  int stopped = 0;
  while (stopped < ranks - 1) {
    const int source = mpi::wait_any_source(kRequest);
    int64_t message[2];
    mpi::recv(source, kRequest, message, sizeof message);
    if (message[0] >= 0 && message[1] != 0)
      farm.note_failure(static_cast<size_t>(message[0]), source, "see that rank's output");
    const int64_t task = farm.take();
    mpi::send(source, kAssign, &task, sizeof task);
    if (task < 0) ++stopped;
  }
}

}  // namespace

std::vector<FarmFailure> run_task_farm(mpi::World& world, const FarmTasks& tasks) {
  const int rank = world.rank(), size = world.size();
  if (rank == 0) {
    Farm farm;
    farm.tasks = &tasks;
    std::thread dispatcher;
    if (size > 1 && world.threaded()) dispatcher = std::thread([&] { dispatch(farm, size); });
    if (size == 1 || world.threaded()) {
      for (int64_t i; (i = farm.take()) >= 0;) {
        const std::string why = tasks.run(static_cast<size_t>(i), rank);
        if (!why.empty()) farm.note_failure(static_cast<size_t>(i), rank, why);
      }
    }
    if (dispatcher.joinable())
      dispatcher.join();
    else if (size > 1)
      dispatch(farm, size);  // no second thread: rank 0 only hands out tasks
    mpi::barrier();
    return farm.failed;
  }
  int64_t message[2] = {-1, 0};
  for (;;) {
    mpi::send(0, kRequest, message, sizeof message);
    int64_t task = -1;
    mpi::recv(0, kAssign, &task, sizeof task);
    if (task < 0) break;
    message[0] = task;
    message[1] = tasks.run(static_cast<size_t>(task), rank).empty() ? 0 : 1;
  }
  mpi::barrier();
  return {};
}

}  // namespace blocklab::sched
