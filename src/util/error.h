#pragma once
// blocklab's single exception type. Anything that comes from outside the program (flags, config
// files, weight files, an output directory) is validated and reported by throwing Error with a
// one-line message that names the problem; the CLI turns it into exit status 2.
#include <stdexcept>
#include <string>

namespace blocklab {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Internal invariant checks on public entry points (shapes, sizes). These are programming errors,
// not user errors, but we still throw (with file:line) instead of aborting.
[[noreturn]] void fail_check(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace blocklab

#define BLOCKLAB_CHECK(cond, msg)                                              \
  do {                                                                         \
    if (!(cond)) ::blocklab::fail_check(#cond, __FILE__, __LINE__, (msg));     \
  } while (0)
