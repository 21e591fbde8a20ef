#include "sched/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "util/error.h"

namespace blocklab::sched {

DirLock::DirLock(const std::filesystem::path& dir) {
  const std::string path = (dir / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path + ": cannot open the run's lock file");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    throw Error(dir.string() + ": another process is running this run right now");
  }
}

DirLock::~DirLock() { ::close(fd_); }

}  // namespace blocklab::sched
