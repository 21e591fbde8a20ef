#include "util/error.h"

namespace blocklab {

void fail_check(const char* expr, const char* file, int line, const std::string& msg) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": check failed (" + expr + "): " + msg);
}

}  // namespace blocklab
