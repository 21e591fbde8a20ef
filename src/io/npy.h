#pragma once
// A reader for NumPy's .npy files of integers (format versions 1, 2 and 3): little-endian int32 or int64
// ('<i4', '<i8'), C order, any rank. Enough for the token ids another tool hands to blocklab.
#include <cstdint>
#include <string>
#include <vector>

namespace blocklab::io {

struct IntArray {
  std::vector<int64_t> shape;
  std::vector<int64_t> values;  // row-major
};

// Throws Error naming the file for anything else: another dtype, Fortran order, a malformed header, a
// data size that does not match the shape.
IntArray read_npy_ints(const std::string& path);

// A token file: .npy (as above) or safetensors (its only integer tensor, or the one named "tokens").
IntArray read_token_file(const std::string& path);

}  // namespace blocklab::io
