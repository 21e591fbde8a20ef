#include "io/npy.h"

#include <cstring>
#include <filesystem>

#include "io/read_file.h"
#include "io/safetensors.h"
#include "util/error.h"

namespace blocklab::io {

namespace {

// The value of 'key': in the header dictionary, as written (up to the next ',' or '}' outside parentheses).
std::string header_value(const std::string& header, const std::string& key, const std::string& path) {
  const std::string quoted[2] = {"'" + key + "'", "\"" + key + "\""};
  size_t at = std::string::npos;
  for (const auto& q : quoted)
    if ((at = header.find(q)) != std::string::npos) {
      at += q.size();
      break;
    }
  if (at == std::string::npos) throw Error(path + ": not a .npy file: its header has no '" + key + "'");
  at = header.find(':', at);
  if (at == std::string::npos) throw Error(path + ": not a .npy file: malformed header");
  ++at;
  int depth = 0;
  size_t end = at;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  std::string v = header.substr(at, end - at);
  v.erase(0, v.find_first_not_of(" \t"));
  v.erase(v.find_last_not_of(" \t") + 1);
  return v;
}

}  // namespace

IntArray read_npy_ints(const std::string& path) {
  const std::string file = read_file(path);
  const auto* p = reinterpret_cast<const unsigned char*>(file.data());
  if (file.size() < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0)
    throw Error(path + ": not a .npy file (no \\x93NUMPY magic)");
  const int major = p[6];
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = p[8] | (p[9] << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) throw Error(path + ": truncated .npy header");
    header_len = static_cast<size_t>(p[8]) | (static_cast<size_t>(p[9]) << 8) | (static_cast<size_t>(p[10]) << 16) |
                 (static_cast<size_t>(p[11]) << 24);
    start = 12;
  } else {
    throw Error(path + ": .npy format version " + std::to_string(major) + " is not supported");
  }
  if (start + header_len > file.size()) throw Error(path + ": truncated .npy header");
  const std::string header(reinterpret_cast<const char*>(p + start), header_len);
  const std::string descr = header_value(header, "descr", path);
  const std::string fortran = header_value(header, "fortran_order", path);
  const std::string shape_text = header_value(header, "shape", path);
  int width = 0;
  if (descr == "'<i4'" || descr == "\"<i4\"") width = 4;
  else if (descr == "'<i8'" || descr == "\"<i8\"") width = 8;
  else throw Error(path + ": dtype " + descr + " is not supported (token ids must be int32 or int64, little-endian)");
  if (fortran != "False") throw Error(path + ": Fortran-order arrays are not supported (save a C-order array)");
  if (shape_text.size() < 2 || shape_text.front() != '(' || shape_text.back() != ')')
    throw Error(path + ": malformed shape " + shape_text);
  IntArray a;
  int64_t count = 1;
  std::string inner = shape_text.substr(1, shape_text.size() - 2);
  size_t i = 0;
  while (i < inner.size()) {
    size_t j = inner.find(',', i);
    if (j == std::string::npos) j = inner.size();
    std::string item = inner.substr(i, j - i);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) {
      size_t used = 0;
      long long d = -1;
      try {
        d = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != item.size() || d < 0 || d > (int64_t{1} << 40)) throw Error(path + ": malformed shape " + shape_text);
      a.shape.push_back(d);
      count *= d;
      if (count > (int64_t{1} << 40)) throw Error(path + ": shape " + shape_text + " is too large");
    }
    i = j + 1;
  }
  const size_t data = start + header_len;
  if (file.size() - data != static_cast<size_t>(count) * width)
    throw Error(path + ": holds " + std::to_string(file.size() - data) + " data bytes, its shape " + shape_text +
                " needs " + std::to_string(count * width));
  a.values.resize(count);
  for (int64_t k = 0; k < count; ++k) {
    if (width == 4) {
      int32_t v;
      std::memcpy(&v, p + data + 4 * k, 4);
      a.values[k] = v;
    } else {
      std::memcpy(&a.values[k], p + data + 8 * k, 8);
    }
  }
  return a;
}

IntArray read_token_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Error(path + ": no such file");
  if (path.ends_with(".npy")) return read_npy_ints(path);
  if (!path.ends_with(".safetensors"))
    throw Error(path + ": a token file must be .npy (int32 or int64) or .safetensors");
  SafetensorsReader reader(path);
  const TensorEntry* chosen = reader.find("tokens");
  if (chosen == nullptr) {
    for (const TensorEntry& t : reader.tensors())
      if (t.dtype == DType::I64 || t.dtype == DType::I32) {
        if (chosen != nullptr) throw Error(path + ": several integer tensors; name the token ids 'tokens'");
        chosen = &t;
      }
  }
  if (chosen == nullptr) throw Error(path + ": holds no integer tensor of token ids");
  if (chosen->dtype != DType::I64 && chosen->dtype != DType::I32)
    throw Error(path + ": tensor '" + chosen->name + "' is not int32 or int64");
  IntArray a;
  a.shape = chosen->shape;
  a.values.resize(chosen->numel());
  reader.read(*chosen, std::span<int64_t>(a.values));
  return a;
}

}  // namespace blocklab::io
