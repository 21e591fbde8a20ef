#pragma once
// An exclusive lock on a directory for the lifetime of the object (flock on DIR/.lock): two processes never
// work on the same run directory at once, whoever started them (a sweep's workers, an MPI farm, a person).
#include <filesystem>

namespace blocklab::sched {

class DirLock {
 public:
  // Throws Error when the lock file cannot be opened or another process holds the lock.
  explicit DirLock(const std::filesystem::path& dir);
  ~DirLock();  // closing releases the lock
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace blocklab::sched
