#pragma once
// Files that are either completely written or not there at all: write to a temporary file
// "<path>.tmp.<pid>" in the same directory, fsync it, rename it over the target, fsync the directory.
// On any failure the temporary file is removed and an existing file at the target is left untouched;
// Error names the target and what failed ("cannot create temporary file", "write failed", "cannot rename").
#include <cstddef>
#include <span>
#include <string>

namespace blocklab::io {

void write_file_atomic(const std::string& path, const std::string& contents);
// The same for contents given in pieces, written in order (e.g. a header and tensor data that stay
// where they are instead of being copied into one buffer).
void write_file_atomic(const std::string& path, std::span<const std::span<const std::byte>> pieces);
// fsync a directory so that a rename inside it is durable. Throws Error on failure, except on file
// systems that cannot fsync a directory (EINVAL, ENOTSUP), where there is nothing more to do.
void sync_directory(const std::string& dir);

}  // namespace blocklab::io
