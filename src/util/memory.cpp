#include "util/memory.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace blocklab {

namespace {

// A non-negative integer file such as memory.max ("max" = no limit: nullopt).
std::optional<double> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  if (end == word.c_str() || *end != '\0' || !(v >= 0)) return std::nullopt;
  return v;
}

std::optional<double> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream words(line.substr(13));
    double kib = 0;
    if (words >> kib) return kib * 1024;
  }
  return std::nullopt;
}

// The room left under the tightest cgroup limit on the way from this process's group to the root.
std::optional<double> cgroup_room() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, v2_path, v1_path;
  while (std::getline(in, line)) {
    if (line.starts_with("0::")) v2_path = line.substr(3);
    const auto colon = line.find(':');
    const auto second = line.find(':', colon + 1);
    if (colon != std::string::npos && second != std::string::npos) {
      const std::string controllers = line.substr(colon + 1, second - colon - 1);
      if (controllers.find("memory") != std::string::npos) v1_path = line.substr(second + 1);
    }
  }
  std::optional<double> best;
  auto consider = [&](const std::string& limit_file, const std::string& usage_file) {
    const auto limit = read_number(limit_file), usage = read_number(usage_file);
    if (!limit || !usage || *limit > 1e18) return;  // no limit (v1 writes a huge number for "none")
    const double room = std::max(0.0, *limit - *usage);
    if (!best || room < *best) best = room;
  };
  if (!v2_path.empty() && v2_path.front() == '/') {
    for (std::string p = v2_path;;) {  // "/a/b", "/a", "/"
      const std::string dir = "/sys/fs/cgroup" + (p == "/" ? std::string() : p);
      consider(dir + "/memory.max", dir + "/memory.current");
      if (p == "/") break;
      const auto slash = p.rfind('/');
      p = slash == 0 ? "/" : p.substr(0, slash);
    }
  }
  if (!v1_path.empty()) {
    const std::string dir = "/sys/fs/cgroup/memory" + (v1_path == "/" ? std::string() : v1_path);
    consider(dir + "/memory.limit_in_bytes", dir + "/memory.usage_in_bytes");
    consider("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  return best;
}

}  // namespace

std::optional<AvailableMemory> available_memory() {
  if (const char* env = std::getenv("BLOCKLAB_MEMORY_AVAILABLE"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(v >= 0) || !std::isfinite(v))
      throw Error(std::string("BLOCKLAB_MEMORY_AVAILABLE: expected a number of bytes, got '") + env + "'");
    return AvailableMemory{v, "BLOCKLAB_MEMORY_AVAILABLE"};
  }
  std::optional<AvailableMemory> out;
  if (const auto m = mem_available()) out = AvailableMemory{*m, "MemAvailable"};
  if (const auto c = cgroup_room(); c && (!out || *c < out->bytes))
    out = AvailableMemory{*c, "cgroup limit minus usage"};
  return out;
}

std::string format_bytes(double b) {
  char buf[64];
  if (!std::isfinite(b)) return "an unbounded amount";
  if (b >= 1024.0 * 1024 * 1024 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.3g PiB", b / (1024.0 * 1024 * 1024 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2f TiB", b / (1024.0 * 1024 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  } else {
    std::snprintf(buf, sizeof buf, "%.0f bytes", b);
  }
  return buf;
}

void require_memory(const std::string& what, double needed, const std::string& parts, const std::string& hint,
                    bool at_least) {
  const auto available = available_memory();
  if (!available || needed <= available->bytes) return;
  throw Error(what + " needs " + (at_least ? "at least " : "") + format_bytes(needed) + (parts.empty() ? "" : " (" + parts + ")") + " but " +
              format_bytes(available->bytes) + " is available (" + available->source + ")" + hint);
}

}  // namespace blocklab
