#pragma once
// Worker processes for many independent tasks on one machine: at most `jobs` run at once, each a child process
// whose output goes to a log file; the pool polls them, starts the next as one ends, and on SIGINT or SIGTERM
// asks the running ones to stop (SIGINT: blocklab's workers then write a checkpoint) and waits for them.
// `blocklab sweep` (and everything built on it: depthmap, reproduce) runs its training runs this way.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace blocklab::sched {

struct PoolTask {
  std::vector<std::string> argv;  // the worker's command line
  std::string log_path;           // its stdout and stderr (truncated)
};

struct PoolEvents {
  std::function<PoolTask(size_t task)> start;  // the command of a task, just before it starts
  // A worker ended with this exit status (128 + signal when killed); `stopping`: after a stop signal.
  std::function<void(size_t task, int status, bool stopping)> finished;
  std::function<void(const std::vector<size_t>& running)> tick;  // after every poll
  std::function<void(size_t running)> stopping;                  // once, when a stop signal arrived
};

// Runs `tasks` in order, `jobs` (>= 1) at a time, polling every poll_seconds. Returns the signal that stopped the
// pool (SIGINT or SIGTERM), or 0 when every task ran.
int run_process_pool(const std::vector<size_t>& tasks, int jobs, double poll_seconds, const PoolEvents& events);

// The command prefix that runs `worker` (empty: this very program, by /proc/self/exe, which names the running
// image even if its file has since been replaced by a rebuild). BLOCKLAB_WORKER_LAUNCHER puts a command in
// front (words split at spaces: "numactl --cpunodebind=0", "valgrind", or "qemu-aarch64" for a program run under
// a user-mode emulator, which follows no exec); the worker is then named by its file, since the launcher, not
// this program, is what the kernel executes.
std::vector<std::string> worker_command(const std::string& worker = "");

}  // namespace blocklab::sched
