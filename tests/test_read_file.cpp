// Tests for src/io/read_file: the bytes exactly as stored (NULs, no newline translation, files larger than
// one read), and one error line naming the path and the reason.
#include "io/read_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "util/error.h"

namespace fs = std::filesystem;
using blocklab::Error;
using blocklab::io::read_file;

namespace {

struct Dir {
  fs::path path = fs::temp_directory_path() / ("blocklab_read_file_" + std::to_string(::getpid()));
  Dir() { fs::create_directories(path); }
  ~Dir() { fs::remove_all(path); }
};

std::string error_of(const fs::path& p) {
  try {
    read_file(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ReadFile, ReturnsTheStoredBytes) {
  Dir dir;
  std::string bytes;
  for (int i = 0; i < 200000; ++i) bytes.push_back(static_cast<char>((i * 7919) % 256));  // > one 64 KiB read
  bytes += "\r\n\0end";
  bytes.push_back('\0');
  {
    std::ofstream out(dir.path / "data.bin", std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_EQ(read_file(dir.path / "data.bin"), bytes);
  std::ofstream(dir.path / "empty.txt").close();
  EXPECT_EQ(read_file(dir.path / "empty.txt"), "");
}

TEST(ReadFile, NamesThePathAndTheReason) {
  Dir dir;
  const std::string missing = error_of(dir.path / "missing.json");
  EXPECT_EQ(missing, (dir.path / "missing.json").string() + ": cannot read: No such file or directory");
  const std::string directory = error_of(dir.path);
  EXPECT_EQ(directory, dir.path.string() + ": cannot read: Is a directory");
}
