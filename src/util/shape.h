#pragma once
// A tensor shape as messages and listings print it.
#include <cstdint>
#include <span>
#include <string>

namespace blocklab {

// "[2560, 4096]"; "[]" for a scalar.
std::string format_shape(std::span<const int64_t> shape);

}  // namespace blocklab
