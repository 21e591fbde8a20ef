#include "util/process.h"

#include <fcntl.h>
#include <signal.h>
#if defined(__linux__)
#include <sys/prctl.h>  // PR_SET_PDEATHSIG
#endif
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "util/error.h"

namespace blocklab {

namespace {

int decode_status(int raw) {
  if (WIFEXITED(raw)) return WEXITSTATUS(raw);
  if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
  return -1;
}

}  // namespace

std::string find_executable(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = dir.empty() ? std::string(".") : dir;  // an empty PATH entry means "."
    candidate.append("/").append(name);
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return candidate;
  }
  return "";
}

pid_t spawn_process(const ProcessSpec& spec) {
  if (spec.argv.empty()) throw Error("spawn_process: empty argv");
  std::string program = find_executable(spec.argv[0]);
  if (program.empty()) program = spec.argv[0];  // exec fails in the child: exit status 127
  // Everything the child touches is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed (the parent may have OpenMP/BLAS threads).
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("cannot start ") + spec.argv[0] + ": " + std::strerror(errno));
  if (pid == 0) {
    if (spec.die_with_parent) {
#if defined(__linux__)
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
      if (::getppid() != parent) ::_exit(127);  // the parent is already gone
    }
    if (spec.own_process_group) ::setpgid(0, 0);
    if (!spec.output_path.empty()) {  // before chdir: a relative output path is the parent's
      const int fd = ::open(spec.output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) ::_exit(127);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) ::_exit(127);
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

std::optional<int> poll_process(pid_t pid) {
  int raw = 0;
  pid_t r;
  do r = ::waitpid(pid, &raw, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return std::nullopt;
  if (r < 0) throw Error("waitpid failed: " + std::string(std::strerror(errno)));
  return decode_status(raw);
}

int wait_process(pid_t pid) {
  int raw = 0;
  pid_t r;
  do r = ::waitpid(pid, &raw, 0);
  while (r < 0 && errno == EINTR);
  if (r < 0) throw Error("waitpid failed: " + std::string(std::strerror(errno)));
  return decode_status(raw);
}

}  // namespace blocklab
