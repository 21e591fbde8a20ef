#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace blocklab::io {

namespace {

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, std::span<const std::byte> data, const std::string& path) {
  const std::byte* p = data.data();
  std::size_t n = data.size();
  while (n > 0) {
    const std::size_t chunk = std::min<std::size_t>(n, std::size_t{1} << 30);
    const ssize_t w = ::write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(path + ": write failed: " + errno_text());
    }
    if (w == 0) throw Error(path + ": write failed: no progress");
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

void sync_directory(const std::string& dir) {
  const std::string name = dir.empty() ? "." : dir;
  const int fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(name + ": cannot open directory: " + errno_text());
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP) throw Error(name + ": fsync failed: " + std::strerror(err));
}

void write_file_atomic(const std::string& path, std::span<const std::span<const std::byte>> pieces) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // O_NOFOLLOW: a link planted at the temporary name is not followed. Something that is not ours at
  // that name makes the open fail and is left alone.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw Error(path + ": cannot create temporary file " + tmp + ": " + errno_text());
  try {
    for (const std::span<const std::byte>& piece : pieces) write_all(fd, piece, path);
    if (::fsync(fd) != 0) throw Error(path + ": fsync failed: " + errno_text());
    const int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw Error(path + ": close failed: " + errno_text());
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(path + ": cannot rename " + tmp + " over it: " + errno_text());
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  sync_directory(std::filesystem::path(path).parent_path().string());
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  const std::span<const std::byte> whole = std::as_bytes(std::span(contents));
  write_file_atomic(path, std::span<const std::span<const std::byte>>(&whole, 1));
}

}  // namespace blocklab::io
