#pragma once
// Child processes: gnuplot for figures, and `blocklab train` workers for parallel sweeps. A separate
// process per run keeps every run's threads, memory and numbers its own.
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace blocklab {

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is the program: a path, or a name looked up in PATH
  std::string cwd;                // working directory of the child ("" = the parent's)
  std::string output_path;        // stdout and stderr go to this file, truncated ("" = inherited);
                                  // relative to the parent's working directory
  bool die_with_parent = true;    // the child gets SIGTERM when the parent exits
  bool own_process_group = false; // the child leads a new process group (a terminal's Ctrl-C does not reach it)
};

// Starts the child and returns its pid. Throws Error when fork fails; when the program cannot be
// executed, the child exits with status 127.
pid_t spawn_process(const ProcessSpec& spec);
// The exit status once the child has finished (128 + signal number when killed), else nullopt.
std::optional<int> poll_process(pid_t pid);
// Waits for the child and returns its exit status as above.
int wait_process(pid_t pid);

// The full path of an executable found in PATH (or name itself when it contains a '/' and is
// executable); "" when there is none.
std::string find_executable(const std::string& name);

}  // namespace blocklab
