#pragma once
// Runs the blocklab executable as a user would and captures its exit status and output.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace blocklab::testing {

struct CliResult {
  int status = -1;
  std::string out, err;
};

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The command that runs the CLI: BLOCKLAB_CLI, with $BLOCKLAB_TEST_CLI_LAUNCHER in front where set.
// tools/test-isa.sh runs test programs under `qemu-x86_64 -cpu Haswell` (an emulated AVX2-only CPU); QEMU
// does not follow exec, so it sets the launcher to the same emulator, and the CLI sees the same CPU.
inline std::string cli_command() {
  const char* launcher = std::getenv("BLOCKLAB_TEST_CLI_LAUNCHER");
  return (launcher == nullptr || *launcher == '\0' ? std::string() : std::string(launcher) + " ") + BLOCKLAB_CLI;
}

// run_cli with environment assignments ("NAME=VALUE ...") in front of the command.
inline CliResult run_cli_env(const std::string& env, const std::string& args);

inline CliResult run_cli(const std::string& args) { return run_cli_env("", args); }

inline CliResult run_cli_env(const std::string& env, const std::string& args) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path();
  const auto out = dir / ("blocklab_cli_out_" + std::to_string(::getpid()) + "_" + std::to_string(counter));
  const auto err = dir / ("blocklab_cli_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string cmd = env + cli_command() + " " + args + " >" + out.string() + " 2>" + err.string();
  const int raw = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

// A fresh, empty temporary directory for one test.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto p = std::filesystem::temp_directory_path() / ("blocklab_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// The number of lines of a program's output (its newlines).
inline int line_count(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// `text` with every "{name}" placeholder replaced by its value.
inline std::string substitute(std::string text, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : values)
    for (size_t p; (p = text.find(key)) != std::string::npos;) text.replace(p, key.size(), value);
  return text;
}

// How blocklab refuses bad input: exit status 2 and exactly one line on stderr that contains `expected`.
inline void expect_refused(const CliResult& r, const std::string& expected, const std::string& context = "") {
  EXPECT_EQ(r.status, 2) << context << "\n" << r.err;
  EXPECT_EQ(line_count(r.err), 1) << context << "\n" << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos) << context << "\n" << r.err;
}

// A refused run leaves no trace of a run in its output directory.
inline void expect_no_run_written(const std::filesystem::path& out) {
  EXPECT_FALSE(std::filesystem::exists(out / "config.json")) << out;
  EXPECT_FALSE(std::filesystem::exists(out / "metrics.csv")) << out;
}

}  // namespace blocklab::testing
