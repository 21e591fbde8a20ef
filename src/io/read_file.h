#pragma once
// Reading a whole file, into memory or mapped, with one error message for every reader in the project.
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace blocklab::io {

// The file's bytes, exactly as stored. Throws Error "<path>: cannot read: <reason>" when it cannot be
// opened or read (missing, a directory, no permission, an I/O error).
std::string read_file(const std::filesystem::path& path);

// A read-only memory map of a whole regular file (nothing is mapped for an empty one); the bytes stay valid
// while the object lives. Movable, not copyable. (A file truncated by another process while mapped raises
// SIGBUS on access, as with every mmap-based reader.)
class MappedFile {
 public:
  MappedFile() = default;
  // Throws Error "<what>: cannot read: <reason>" (missing, no permission, a directory or other non-regular
  // file, a failed mmap). `what` names the file in messages; its path by default.
  explicit MappedFile(const std::filesystem::path& path, const std::string& what = "");
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(map_), size_}; }
  std::size_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace blocklab::io
