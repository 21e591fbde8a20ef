#pragma once
// Reading a whole file into memory, with one error message for every reader in the project.
#include <filesystem>
#include <string>

namespace blocklab::io {

// The file's bytes, exactly as stored. Throws Error "<path>: cannot read: <reason>" when it cannot be
// opened or read (missing, a directory, no permission, an I/O error).
std::string read_file(const std::filesystem::path& path);

}  // namespace blocklab::io
