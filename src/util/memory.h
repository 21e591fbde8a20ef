#pragma once
// How much memory this process may still take, and refusing work that would not fit before it allocates.
//
// The lower of: MemAvailable from /proc/meminfo, and the control group's limit minus its usage (cgroup v2:
// memory.max - memory.current of this process's group and each group above it; v1: memory.limit_in_bytes
// - memory.usage_in_bytes). BLOCKLAB_MEMORY_AVAILABLE=BYTES replaces the measurement (for tests).
#include <cstdint>
#include <optional>
#include <string>

namespace blocklab {

struct AvailableMemory {
  double bytes = 0;
  std::string source;  // "MemAvailable", "cgroup memory.max - memory.current", "BLOCKLAB_MEMORY_AVAILABLE"
};

// nullopt when nothing can be read (no /proc): callers then do not refuse anything.
std::optional<AvailableMemory> available_memory();

// "1.50 GiB", "12.0 MiB", "512 bytes"
std::string format_bytes(double bytes);

// Throws Error, one line: "<what> needs [at least ]<needed> (<parts>) but <available> is available
// (<source>)<hint>", when needed exceeds the memory available. Does nothing when that cannot be read.
void require_memory(const std::string& what, double needed, const std::string& parts, const std::string& hint,
                    bool at_least = false);

}  // namespace blocklab
