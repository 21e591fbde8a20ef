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

TEST(MappedFile, MapsTheStoredBytesAndMovesTheMapping) {
  Dir dir;
  const std::string bytes = std::string("map\0me", 6) + std::string(100000, 'x');
  {
    std::ofstream out(dir.path / "data.bin", std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  blocklab::io::MappedFile file(dir.path / "data.bin");
  ASSERT_EQ(file.size(), bytes.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.bytes().data()), file.size()), bytes);
  const std::byte* data = file.bytes().data();
  blocklab::io::MappedFile moved(std::move(file));
  EXPECT_EQ(moved.bytes().data(), data);  // the same mapping, now owned by `moved`
  EXPECT_EQ(file.size(), 0u);             // NOLINT(bugprone-use-after-move): the source is left empty
  blocklab::io::MappedFile assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.bytes().data(), data);
  EXPECT_EQ(static_cast<char>(assigned.bytes()[7]), 'x');

  std::ofstream(dir.path / "empty.txt").close();
  EXPECT_EQ(blocklab::io::MappedFile(dir.path / "empty.txt").size(), 0u);
}

TEST(MappedFile, NamesTheFileAndTheReason) {
  Dir dir;
  const auto error_of_map = [](const fs::path& p, const std::string& what) -> std::string {
    try {
      blocklab::io::MappedFile file(p, what);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of_map(dir.path / "missing.txt", ""),
            (dir.path / "missing.txt").string() + ": cannot read: No such file or directory");
  EXPECT_EQ(error_of_map(dir.path, "--data"), "--data: cannot read: Is a directory");
  if (fs::exists("/dev/null")) {
    EXPECT_EQ(error_of_map("/dev/null", ""), "/dev/null: cannot read: not a regular file");
  }
}
