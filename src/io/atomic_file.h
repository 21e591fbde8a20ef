#pragma once
// Files that are either completely written or not there at all: write to a temporary file in the same
// directory, fsync it, rename it over the target, fsync the directory.
#include <string>

namespace blocklab::io {

void write_file_atomic(const std::string& path, const std::string& contents);
// fsync a directory so that a rename inside it is durable. Throws Error on failure.
void sync_directory(const std::string& dir);

}  // namespace blocklab::io
