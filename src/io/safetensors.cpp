#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <utility>

#include "io/atomic_file.h"
#include "io/checksum.h"
#include "util/error.h"
#include "util/shape.h"

namespace blocklab::io {

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Small helpers


// Quotes a (possibly hostile) name for an error message: escapes control characters and cuts very
// long names so that a message stays one readable line.
std::string quote(std::string_view s) {
  constexpr std::size_t kMax = 120;
  bool cut = false;
  if (s.size() > kMax) {
    std::size_t n = kMax;
    // Do not cut inside a UTF-8 sequence (continuation bytes are 10xxxxxx).
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    s = s.substr(0, n);
    cut = true;
  }
  std::string out = "'";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else if (c == '\'' || c == '\\') {
      out += '\\';
      out += ch;
    } else {
      out += ch;
    }
  }
  out += cut ? "...'" : "'";
  return out;
}

std::string range_text(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + ")";
}

// Strict UTF-8 validation (no overlongs, no surrogates, nothing above U+10FFFF). Returns the offset
// of the first bad byte, or npos when valid.
std::size_t find_invalid_utf8(const unsigned char* p, std::size_t n) {
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c == 0xE0) {
      len = 3, lo = 0xA0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
      len = 3;
    } else if (c == 0xED) {
      len = 3, hi = 0x9F;
    } else if (c == 0xF0) {
      len = 4, lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3) {
      len = 4;
    } else if (c == 0xF4) {
      len = 4, hi = 0x8F;
    } else {
      return i;
    }
    if (n - i < len) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::string::npos;
}

// Checked arithmetic.
bool mul_overflow(uint64_t a, uint64_t b, uint64_t& out) { return __builtin_mul_overflow(a, b, &out); }
bool add_overflow(uint64_t a, uint64_t b, uint64_t& out) { return __builtin_add_overflow(a, b, &out); }

// Element count of a shape; false on a negative dim or if it does not fit in int64.
bool checked_numel(const std::vector<int64_t>& shape, uint64_t& out) {
  uint64_t n = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d == 0) zero = true;
  }
  if (zero) {
    out = 0;
    return true;
  }
  for (int64_t d : shape)
    if (mul_overflow(n, static_cast<uint64_t>(d), n)) return false;
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  out = n;
  return true;
}

template <class U>
void store_le(std::byte* p, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}

// ---------------------------------------------------------------------------------------------
// Header JSON

// Reads a JSON integer into uint64. Returns 0 ok, 1 not an integer, 2 negative.
int json_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return 0;
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < 0) return 2;
    out = static_cast<uint64_t>(x);
    return 0;
  }
  return 1;
}

json parse_header_json(const char* first, const char* last, const std::string& where) {
  // nlohmann::json keeps one of several duplicate keys silently; track keys per open object.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  bool duplicate_top = false;
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string() && duplicate.empty()) {
          const auto& k = parsed.get_ref<const std::string&>();
          if (!open_objects.back().insert(k).second) {
            duplicate = k;
            duplicate_top = open_objects.size() == 1;
          }
        }
        break;
      default:
        break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(first, last, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    throw Error(where + ": header is not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) {
    if (duplicate_top && duplicate != "__metadata__") throw Error(where + ": duplicate tensor name " + quote(duplicate));
    throw Error(where + ": duplicate key " + quote(duplicate) + " in header");
  }
  return j;
}

TensorEntry parse_entry(const std::string& name, const json& v, const std::string& where) {
  const std::string ctx = where + ": tensor " + quote(name) + ": ";
  if (!v.is_object()) throw Error(ctx + "entry is not an object");
  TensorEntry t;
  t.name = name;

  auto field = [&](const char* key) -> const json& {
    auto it = v.find(key);
    if (it == v.end()) throw Error(ctx + "missing field \"" + key + "\"");
    return *it;
  };

  const json& dt = field("dtype");
  if (!dt.is_string()) throw Error(ctx + "field \"dtype\" is not a string");
  const auto& dts = dt.get_ref<const std::string&>();
  if (!parse_dtype(dts, t.dtype)) throw Error(ctx + "unknown dtype " + quote(dts));

  const json& sh = field("shape");
  if (!sh.is_array()) throw Error(ctx + "field \"shape\" is not an array");
  t.shape.reserve(sh.size());
  for (std::size_t i = 0; i < sh.size(); ++i) {
    uint64_t d = 0;
    const int r = json_u64(sh[i], d);
    if (r == 1) throw Error(ctx + "shape dimension " + std::to_string(i) + " is not an integer");
    if (r == 2) throw Error(ctx + "shape dimension " + std::to_string(i) + " is negative");
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(ctx + "shape dimension " + std::to_string(i) + " is too large (" + std::to_string(d) + ")");
    t.shape.push_back(static_cast<int64_t>(d));
  }

  const json& off = field("data_offsets");
  if (!off.is_array() || off.size() != 2) throw Error(ctx + "field \"data_offsets\" is not an array of 2 integers");
  for (int i = 0; i < 2; ++i) {
    uint64_t x = 0;
    const int r = json_u64(off[i], x);
    if (r == 1) throw Error(ctx + "field \"data_offsets\" is not an array of 2 integers");
    if (r == 2) throw Error(ctx + "data_offsets[" + std::to_string(i) + "] is negative");
    (i == 0 ? t.begin : t.end) = x;
  }

  uint64_t numel = 0, nbytes = 0;
  if (!checked_numel(t.shape, numel) || mul_overflow(numel, dtype_size(t.dtype), nbytes))
    throw Error(ctx + "shape " + format_shape(t.shape) + " x dtype size " + std::to_string(dtype_size(t.dtype)) +
                " overflows uint64");
  if (t.end < t.begin)
    throw Error(ctx + "data_offsets end (" + std::to_string(t.end) + ") is before begin (" + std::to_string(t.begin) +
                ")");
  if (t.end - t.begin != nbytes)
    throw Error(ctx + "byte length " + std::to_string(t.end - t.begin) + " (data_offsets " +
                range_text(t.begin, t.end) + ") does not match dtype size " + std::to_string(dtype_size(t.dtype)) +
                " x numel " + std::to_string(numel) + " = " + std::to_string(nbytes));
  return t;
}

// ---------------------------------------------------------------------------------------------
// Writer

struct PreparedHeader {
  std::string header;  // JSON padded with spaces to a multiple of 8
  uint64_t data_bytes = 0;
};

PreparedHeader prepare_header(const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata, const std::string& where) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["__metadata__"] = nlohmann::ordered_json::object();  // filled below, once the checksums are known
  nlohmann::ordered_json checksums = nlohmann::ordered_json::object();
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string ctx = where + ": tensor " + quote(t.name) + ": ";
    if (t.name.empty()) throw Error(where + ": tensor name is empty");
    if (t.name == "__metadata__") throw Error(ctx + "name is reserved");
    if (!names.insert(t.name).second) throw Error(where + ": duplicate tensor name " + quote(t.name));
    if (static_cast<unsigned>(t.dtype) > static_cast<unsigned>(DType::BOOL)) throw Error(ctx + "invalid dtype");
    for (int64_t d : t.shape)
      if (d < 0) throw Error(ctx + "negative shape dimension in " + format_shape(t.shape));
    uint64_t numel = 0, nbytes = 0;
    if (!checked_numel(t.shape, numel) || mul_overflow(numel, dtype_size(t.dtype), nbytes))
      throw Error(ctx + "shape " + format_shape(t.shape) + " overflows");
    if (t.data.size() != nbytes)
      throw Error(ctx + "data has " + std::to_string(t.data.size()) + " bytes but shape " + format_shape(t.shape) +
                  " of " + dtype_name(t.dtype) + " needs " + std::to_string(nbytes));
    uint64_t end = 0;
    if (add_overflow(offset, nbytes, end)) throw Error(where + ": total data size overflows");
    j[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    checksums[t.name] = checksum_hex(checksum(t.data));
    offset = end;
  }
  nlohmann::ordered_json& m = j["__metadata__"];
  for (const auto& [k, v] : metadata)
    if (k != kChecksumsKey) m[k] = v;
  try {
    m[kChecksumsKey] = checksums.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error(where + ": cannot encode header (names and metadata must be valid UTF-8): " + e.what());
  }
  PreparedHeader p;
  try {
    p.header = j.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error(where + ": cannot encode header (names and metadata must be valid UTF-8): " + e.what());
  }
  while (p.header.size() % 8 != 0) p.header += ' ';
  if (p.header.size() > kMaxHeaderBytes)
    throw Error(where + ": header too large (" + std::to_string(p.header.size()) + " bytes)");
  p.data_bytes = offset;
  return p;
}

}  // namespace

int64_t TensorEntry::numel() const {
  uint64_t n = 0;
  if (!checked_numel(shape, n)) throw Error("tensor " + quote(name) + ": invalid shape " + format_shape(shape));
  return static_cast<int64_t>(n);
}

// ---------------------------------------------------------------------------------------------
// Parsing

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& where) {
  if (file.size() < 8)
    throw Error(where + ": file too short (" + std::to_string(file.size()) +
                " bytes; a safetensors file needs at least 8)");
  const uint64_t n = load_le<uint64_t>(file.data());
  if (n == 0) throw Error(where + ": header length is 0");
  if (n > kMaxHeaderBytes)
    throw Error(where + ": header too large: length " + std::to_string(n) + " exceeds the limit of " +
                std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > file.size() - 8)
    throw Error(where + ": header length " + std::to_string(n) + " extends beyond the end of the file (" +
                std::to_string(file.size()) + " bytes)");

  const auto* hp = reinterpret_cast<const unsigned char*>(file.data() + 8);
  if (const std::size_t bad = find_invalid_utf8(hp, n); bad != std::string::npos)
    throw Error(where + ": header is not valid UTF-8 (bad byte at header offset " + std::to_string(bad) + ")");

  const json j = parse_header_json(reinterpret_cast<const char*>(hp), reinterpret_cast<const char*>(hp) + n, where);
  if (!j.is_object()) throw Error(where + ": header is not a JSON object");

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw Error(where + ": __metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          throw Error(where + ": __metadata__ value for key " + quote(mk) + " is not a string");
        h.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    h.tensors.push_back(parse_entry(key, value, where));
  }

  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });

  uint64_t cursor = 0;
  const TensorEntry* prev = nullptr;
  for (const TensorEntry& t : h.tensors) {
    if (t.begin > cursor) {
      if (prev == nullptr)
        throw Error(where + ": data buffer does not start at offset 0: first tensor " + quote(t.name) +
                    " begins at " + std::to_string(t.begin));
      throw Error(where + ": gap in data buffer: bytes " + range_text(cursor, t.begin) + " between tensor " +
                  quote(prev->name) + " and tensor " + quote(t.name) + " belong to no tensor");
    }
    if (t.begin < cursor)
      throw Error(where + ": tensor " + quote(t.name) + " " + range_text(t.begin, t.end) + " overlaps tensor " +
                  quote(prev->name) + " " + range_text(prev->begin, prev->end));
    cursor = t.end;
    prev = &t;
  }

  const uint64_t buffer = file.size() - h.data_offset;
  if (cursor > buffer)
    throw Error(where + ": file truncated: data buffer has " + std::to_string(buffer) + " bytes but tensors need " +
                std::to_string(cursor));
  if (cursor < buffer)
    throw Error(where + ": " + std::to_string(buffer - cursor) + " trailing bytes after the last tensor (data ends at " +
                std::to_string(cursor) + ", buffer has " + std::to_string(buffer) + ")");
  return h;
}

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path), file_(path) {
  if (file_.size() < 8)
    throw Error(path + ": file too short (" + std::to_string(file_.size()) +
                " bytes; a safetensors file needs at least 8)");
  base_ = file_.bytes().data();
  size_ = file_.size();
  init();
}

SafetensorsReader SafetensorsReader::from_bytes(std::vector<std::byte> file, std::string name_for_errors) {
  SafetensorsReader r;
  r.path_ = std::move(name_for_errors);
  r.owned_ = std::move(file);
  r.base_ = r.owned_.data();
  r.size_ = r.owned_.size();
  r.init();
  return r;
}

void SafetensorsReader::init() {
  header_ = parse_safetensors_header(std::span<const std::byte>(base_, size_), path_);
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
}

// The mapping or the owned bytes move with the object; base_ keeps pointing at them.
SafetensorsReader::~SafetensorsReader() = default;
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&&) noexcept = default;

bool SafetensorsReader::verify_checksums() const {
  const auto it = header_.metadata.find(kChecksumsKey);
  if (it == header_.metadata.end()) return false;
  const std::string where = path_ + ": __metadata__ " + kChecksumsKey;
  json table;
  try {
    table = json::parse(it->second);
  } catch (const json::exception&) {
    throw Error(where + " is not a JSON object (header damaged?)");
  }
  if (!table.is_object()) throw Error(where + " is not a JSON object (header damaged?)");
  for (const auto& [name, value] : table.items()) {
    uint64_t ignored = 0;
    if (!value.is_string() || !parse_checksum_hex(value.get_ref<const std::string&>(), ignored))
      throw Error(where + ": the checksum of tensor " + quote(name) + " is not 16 hex digits (header damaged?)");
    if (find(name) == nullptr)
      throw Error(where + " names tensor " + quote(name) + ", which the file does not hold (header damaged?)");
  }
  for (const TensorEntry& t : header_.tensors) {
    const auto entry = table.find(t.name);
    if (entry == table.end())
      throw Error(path_ + ": tensor " + quote(t.name) + " has no checksum in " + kChecksumsKey + " (header damaged?)");
    uint64_t stored = 0;
    parse_checksum_hex(entry->get_ref<const std::string&>(), stored);
    const uint64_t actual = checksum(bytes(t));
    if (actual != stored)
      throw Error(path_ + ": tensor " + quote(t.name) + ": data damaged: bytes " +
                  range_text(header_.data_offset + t.begin, header_.data_offset + t.end) + " of the file give checksum " +
                  checksum_hex(actual) + ", written as " + checksum_hex(stored));
  }
  return true;
}

uint64_t SafetensorsReader::file_checksum() const { return checksum({base_, size_}); }

const TensorEntry* SafetensorsReader::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

const TensorEntry& SafetensorsReader::at(std::string_view name) const {
  if (const TensorEntry* t = find(name)) return *t;
  throw Error(path_ + ": no tensor named " + quote(name));
}

std::span<const std::byte> SafetensorsReader::bytes(const TensorEntry& t) const {
  const uint64_t buffer = size_ >= header_.data_offset ? size_ - header_.data_offset : 0;
  if (base_ == nullptr || t.end < t.begin || t.end > buffer)
    throw Error(path_ + ": tensor " + quote(t.name) + ": range " + range_text(t.begin, t.end) +
                " is not inside the data buffer");
  return {base_ + header_.data_offset + t.begin, static_cast<std::size_t>(t.end - t.begin)};
}

void SafetensorsReader::check_entry(const TensorEntry& t, std::size_t out_size) const {
  uint64_t numel = 0, nbytes = 0;
  if (!checked_numel(t.shape, numel) || mul_overflow(numel, dtype_size(t.dtype), nbytes) ||
      nbytes != t.end - t.begin || t.end < t.begin)
    throw Error(path_ + ": tensor " + quote(t.name) + ": entry is inconsistent (shape " + format_shape(t.shape) +
                ", range " + range_text(t.begin, t.end) + ")");
  if (out_size != numel)
    throw Error(path_ + ": tensor " + quote(t.name) + ": output has " + std::to_string(out_size) +
                " elements but the tensor has " + std::to_string(numel));
}

void SafetensorsReader::read(const TensorEntry& t, std::span<float> out) const {
  if (!dtype_is_float(t.dtype))
    throw Error(path_ + ": tensor " + quote(t.name) + ": dtype " + dtype_name(t.dtype) +
                " is not a floating-point type");
  check_entry(t, out.size());
  convert_to_float(t.dtype, bytes(t).data(), out.data(), out.size());
}

void SafetensorsReader::read(const TensorEntry& t, std::span<double> out) const {
  if (!dtype_is_float(t.dtype))
    throw Error(path_ + ": tensor " + quote(t.name) + ": dtype " + dtype_name(t.dtype) +
                " is not a floating-point type");
  check_entry(t, out.size());
  convert_to_double(t.dtype, bytes(t).data(), out.data(), out.size());
}

void SafetensorsReader::read(const TensorEntry& t, std::span<int64_t> out) const {
  if (!dtype_is_integer(t.dtype))
    throw Error(path_ + ": tensor " + quote(t.name) + ": dtype " + dtype_name(t.dtype) + " is not an integer type");
  check_entry(t, out.size());
  const std::byte* p = bytes(t).data();
  const std::size_t n = out.size();
  switch (t.dtype) {
    case DType::I64:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(load_le<uint64_t>(p + 8 * i));
      break;
    case DType::I32:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(load_le<uint32_t>(p + 4 * i));
      break;
    case DType::I16:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<int16_t>(load_le<uint16_t>(p + 2 * i));
      break;
    case DType::I8:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<int8_t>(std::to_integer<uint8_t>(p[i]));
      break;
    case DType::U8:
      for (std::size_t i = 0; i < n; ++i) out[i] = std::to_integer<uint8_t>(p[i]);
      break;
    case DType::BOOL:
      for (std::size_t i = 0; i < n; ++i) out[i] = std::to_integer<uint8_t>(p[i]) != 0 ? 1 : 0;
      break;
    default:
      break;  // unreachable: checked above
  }
}

std::vector<float> SafetensorsReader::read_f32(std::string_view name) const {
  const TensorEntry& t = at(name);
  if (!dtype_is_float(t.dtype))
    throw Error(path_ + ": tensor " + quote(t.name) + ": dtype " + dtype_name(t.dtype) +
                " is not a floating-point type");
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  read(t, std::span<float>(out));
  return out;
}

std::vector<double> SafetensorsReader::read_f64(std::string_view name) const {
  const TensorEntry& t = at(name);
  if (!dtype_is_float(t.dtype))
    throw Error(path_ + ": tensor " + quote(t.name) + ": dtype " + dtype_name(t.dtype) +
                " is not a floating-point type");
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  read(t, std::span<double>(out));
  return out;
}

std::vector<int64_t> SafetensorsReader::read_i64(std::string_view name) const {
  const TensorEntry& t = at(name);
  if (!dtype_is_integer(t.dtype))
    throw Error(path_ + ": tensor " + quote(t.name) + ": dtype " + dtype_name(t.dtype) + " is not an integer type");
  std::vector<int64_t> out(static_cast<std::size_t>(t.numel()));
  read(t, std::span<int64_t>(out));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writer

TensorToWrite tensor_view(std::string name, std::vector<int64_t> shape, std::span<const float> data) {
  return {std::move(name), DType::F32, std::move(shape), std::as_bytes(data)};
}
TensorToWrite tensor_view(std::string name, std::vector<int64_t> shape, std::span<const double> data) {
  return {std::move(name), DType::F64, std::move(shape), std::as_bytes(data)};
}
TensorToWrite tensor_view(std::string name, std::vector<int64_t> shape, std::span<const int64_t> data) {
  return {std::move(name), DType::I64, std::move(shape), std::as_bytes(data)};
}
TensorToWrite tensor_view(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const uint16_t> data) {
  if (dtype != DType::BF16 && dtype != DType::F16 && dtype != DType::I16)
    throw Error("tensor_view: tensor " + quote(name) + ": 16-bit data needs dtype BF16, F16 or I16, not " +
                dtype_name(dtype));
  return {std::move(name), dtype, std::move(shape), std::as_bytes(data)};
}

static_assert(std::endian::native == std::endian::little,
              "the writer stores tensor data as given; big-endian hosts would need byte swapping");

std::vector<std::byte> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  const PreparedHeader p = prepare_header(tensors, metadata, "serialize_safetensors");
  if (p.data_bytes > std::numeric_limits<std::size_t>::max() - 8 - p.header.size())
    throw Error("serialize_safetensors: data too large");
  std::vector<std::byte> out(8 + p.header.size() + static_cast<std::size_t>(p.data_bytes));
  store_le<uint64_t>(out.data(), p.header.size());
  std::memcpy(out.data() + 8, p.header.data(), p.header.size());
  std::size_t at = 8 + p.header.size();
  for (const TensorToWrite& t : tensors) {
    if (!t.data.empty()) std::memcpy(out.data() + at, t.data.data(), t.data.size());
    at += t.data.size();
  }
  return out;
}

FileChecksum write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  if (path.empty()) throw Error("write_safetensors: empty path");
  const PreparedHeader p = prepare_header(tensors, metadata, path);

  std::byte length[8];
  store_le<uint64_t>(length, p.header.size());
  std::vector<std::span<const std::byte>> pieces = {length, std::as_bytes(std::span(p.header))};
  for (const TensorToWrite& t : tensors)
    if (!t.data.empty()) pieces.push_back(t.data);
  ChecksumStream whole;
  FileChecksum result;
  for (const auto& piece : pieces) {
    whole.update(piece);
    result.bytes += piece.size();
  }
  result.checksum = whole.digest();
  write_file_atomic(path, pieces);
  return result;
}

}  // namespace blocklab::io
