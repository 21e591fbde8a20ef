#pragma once
// Reader and writer for the huggingface safetensors format:
//
//   [u64 little-endian N][N bytes of UTF-8 JSON header][data buffer]
//
// The header is a JSON object mapping tensor name -> {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]} plus an optional "__metadata__" object of string -> string.
// Offsets are relative to the start of the data buffer. The tensors must tile the buffer exactly
// (first begins at 0, no gaps, no overlaps, no trailing bytes).
//
// Every file is untrusted: anything malformed is reported by throwing blocklab::Error with a
// message "<file>: <reason>". No input can crash the parser or make it read out of bounds.
// (The one thing a memory map cannot defend against is another process truncating the file while
// it is mapped; that raises SIGBUS on access, as with every mmap-based reader.)
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/dtype.h"
#include "io/read_file.h"

namespace blocklab::io {

// The checksums blocklab's writer stores in "__metadata__" (a string -> string map, so the file stays valid
// for every other reader): under this key, a JSON object mapping every tensor name to the XXH3-64 of its
// data bytes as 16 hex digits (io/checksum.h). Files from other tools have none and still load.
inline constexpr const char* kChecksumsKey = "checksums.xxh3_64";

// Largest header length accepted (same limit as the reference Rust implementation).
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // [] is a scalar (numel 1)
  uint64_t begin = 0, end = 0;  // byte range relative to the data buffer
  // Product of shape (1 for rank 0). Throws Error on negative dims or int64 overflow (never for
  // entries produced by the parser, which validates both).
  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

// Result of validating a complete safetensors image (header + data) held in memory.
struct SafetensorsHeader {
  uint64_t data_offset = 0;                    // 8 + N: where the data buffer starts in the file
  std::vector<TensorEntry> tensors;            // sorted by begin offset (ties: by end, then name)
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
};

// Pure in-memory validation of a whole file image (the 8-byte length, the header and the data
// buffer; the buffer's bytes themselves are not inspected, only its size). `name_for_errors`
// prefixes every error message. Throws Error on any malformed input.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& name_for_errors);

class SafetensorsReader {
 public:
  // Memory-maps the file read-only and validates it; throws Error("<path>: <reason>").
  explicit SafetensorsReader(const std::string& path);
  // Same validation on an in-memory image (owned by the reader); `name_for_errors` plays the role
  // of the path in messages and in path().
  static SafetensorsReader from_bytes(std::vector<std::byte> file, std::string name_for_errors);

  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  uint64_t data_offset() const { return header_.data_offset; }

  // True when the metadata holds tensor checksums (kChecksumsKey), whether or not they match.
  bool has_checksums() const { return header_.metadata.count(kChecksumsKey) > 0; }
  // Checks every tensor's bytes against its checksum, in file order. Returns false, checking nothing, when
  // the file holds no checksums (written by another tool). Throws Error naming the first tensor whose bytes
  // differ from what was written ("<path>: tensor 'x': data damaged: checksum ... but the bytes give ..."),
  // and for a malformed checksum table, a tensor without a checksum, or a checksum of an absent tensor.
  bool verify_checksums() const;
  // The whole file's checksum (io/checksum.h), header and data.
  uint64_t file_checksum() const;
  uint64_t file_size() const { return size_; }

  const TensorEntry* find(std::string_view name) const;  // nullptr when absent
  const TensorEntry& at(std::string_view name) const;    // throws Error naming file and tensor

  // Raw little-endian bytes of a tensor (may be unaligned). Throws Error if the entry's range does
  // not lie inside this file's data buffer.
  std::span<const std::byte> bytes(const TensorEntry&) const;

  // Float dtypes (F64/F32/F16/BF16) converted to float/double; out.size() must equal numel.
  // Error for non-float dtypes or a size mismatch.
  void read(const TensorEntry&, std::span<float> out) const;
  void read(const TensorEntry&, std::span<double> out) const;
  std::vector<float> read_f32(std::string_view name) const;
  std::vector<double> read_f64(std::string_view name) const;
  // Integer dtypes I64/I32/I16/I8/U8 (and BOOL as 0/1) widened to int64; Error for float dtypes.
  void read(const TensorEntry&, std::span<int64_t> out) const;
  std::vector<int64_t> read_i64(std::string_view name) const;

 private:
  SafetensorsReader() = default;
  void init();  // parses header_ from base_/size_ and builds the index
  void check_entry(const TensorEntry&, std::size_t out_size) const;

  std::string path_;
  const std::byte* base_ = nullptr;  // whole file image
  std::size_t size_ = 0;
  MappedFile file_;  // the mapped file (nothing for from_bytes)
  std::vector<std::byte> owned_;  // from_bytes storage
  SafetensorsHeader header_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in header_.tensors
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;  // numel * dtype_size bytes, little-endian
};

TensorToWrite tensor_view(std::string name, std::vector<int64_t> shape, std::span<const float> data);    // F32
TensorToWrite tensor_view(std::string name, std::vector<int64_t> shape, std::span<const double> data);   // F64
TensorToWrite tensor_view(std::string name, std::vector<int64_t> shape, std::span<const int64_t> data);  // I64
// Raw 16-bit payloads (use with float_to_bf16 / float_to_f16 of io/dtype.h); dtype must be BF16, F16 or I16.
TensorToWrite tensor_view(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const uint16_t> data);

// Size and checksum of a whole file as written.
struct FileChecksum {
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // io/checksum.h over every byte of the file
};

// Writes atomically (io/atomic_file.h: "<path>.tmp.<pid>", write, fsync, rename over path, fsync the directory).
// Tensors are laid out in the given order; the header is padded with spaces to a multiple of 8
// bytes (so the data buffer starts 8-byte aligned). Every tensor's checksum goes into the metadata under
// kChecksumsKey (replacing one given there). Returns the size and checksum of the file. Validates names (non-empty, unique, not
// "__metadata__"), shapes (non-negative dims) and data sizes (== numel * dtype_size). Throws Error
// on any invalid input or I/O failure; the temp file is removed and an existing file at `path` is
// left untouched.
FileChecksum write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The same file image in memory (the writer's exact bytes). Same validation as write_safetensors.
std::vector<std::byte> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata = {});

}  // namespace blocklab::io
