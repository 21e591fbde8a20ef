#include "sched/process_pool.h"

#include <csignal>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include "util/process.h"
#include "util/signals.h"

namespace blocklab::sched {

int run_process_pool(const std::vector<size_t>& tasks, int jobs, double poll_seconds, const PoolEvents& events) {
  struct Running {
    size_t task;
    pid_t pid;
  };
  std::vector<Running> running;
  StopSignals signals;
  bool stopping = false;
  size_t next = 0;
  for (;;) {
    if (signals.pending() != 0 && !stopping) {
      stopping = true;
      if (events.stopping) events.stopping(running.size());
      for (const Running& r : running) ::kill(r.pid, SIGINT);
    }
    while (!stopping && running.size() < static_cast<size_t>(std::max(1, jobs)) && next < tasks.size()) {
      const size_t task = tasks[next++];
      const PoolTask t = events.start(task);
      running.push_back({task, spawn_process(ProcessSpec{t.argv, "", t.log_path, true, true})});
    }
    if (running.empty()) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(poll_seconds));
    for (size_t k = 0; k < running.size();) {
      const std::optional<int> status = poll_process(running[k].pid);
      if (!status) {
        ++k;
        continue;
      }
      const size_t task = running[k].task;
      running.erase(running.begin() + static_cast<long>(k));
      if (events.finished) events.finished(task, *status, stopping);
    }
    if (events.tick) {
      std::vector<size_t> now;
      for (const Running& r : running) now.push_back(r.task);
      events.tick(now);
    }
  }
  return signals.pending();
}

std::vector<std::string> worker_command(const std::string& worker) {
  const std::string program = worker.empty() ? std::string("/proc/self/exe") : worker;
  std::vector<std::string> command;
  if (const char* v = std::getenv("BLOCKLAB_WORKER_LAUNCHER"); v != nullptr) {
    std::istringstream words(v);
    for (std::string w; words >> w;) command.push_back(w);
  }
  command.push_back(command.empty() || !worker.empty() ? program : std::filesystem::read_symlink(program).string());
  return command;
}

}  // namespace blocklab::sched
