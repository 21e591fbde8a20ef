#pragma once
// The weights of a Hugging Face model directory, memory-mapped and kept in their stored dtype:
//
//   DIR/model.safetensors.index.json  {"weight_map": {tensor name: shard file}}  + the shard files, or
//   DIR/model.safetensors                                                        (one file)
//
// Nothing is converted up front. A weight is read where it is used: rows of a matrix are converted
// to float in blocks (convert_rows), so a model whose BF16 weights take 8 GB needs only its mapped
// pages plus a small float scratch. release() drops a tensor's pages from this process (they stay in
// the page cache), which bounds the resident set to about one block's weights at a time.
//
// Every shard is validated when opened (a missing or truncated shard, a tensor listed in the index but
// absent from its shard, a malformed header: all Errors naming the file).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/dtype.h"
#include "io/safetensors.h"

namespace blocklab::hf {

// A tensor inside a mapped file: where its bytes are and how to read them.
struct WeightRef {
  std::string name;
  std::string file;  // file name (for messages)
  io::DType dtype = io::DType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // little-endian, possibly unaligned

  int64_t numel() const;
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const;  // product of the trailing dims (1 for rank 0 and 1)
};

class WeightStore {
 public:
  // `dir` is a model directory, or one .safetensors file. Throws Error.
  static WeightStore open(const std::filesystem::path& dir);

  WeightStore(WeightStore&&) noexcept;
  WeightStore& operator=(WeightStore&&) noexcept;
  ~WeightStore();

  bool contains(std::string_view name) const;
  // Throws Error naming the tensor (and the shard or file it was expected in) when absent.
  WeightRef get(std::string_view name) const;
  // As get(), and checks the shape: Error "tensor X has shape [..], expected [..] (why)".
  WeightRef get(std::string_view name, const std::vector<int64_t>& expected, const std::string& why) const;

  std::vector<std::string> names() const;  // every tensor, sorted
  const std::vector<std::string>& files() const { return file_names_; }
  bool sharded() const { return sharded_; }
  uint64_t total_bytes() const;            // sum of all tensors' data
  const std::filesystem::path& source() const { return source_; }

  // Page hints for the mapped bytes of a tensor (no-ops on failure; contents never change).
  static void prefetch(const WeightRef&);  // start reading it in (MADV_WILLNEED)
  static void release(const WeightRef&);   // drop its pages from this process (MADV_DONTNEED)

 private:
  WeightStore() = default;
  std::filesystem::path source_;
  bool sharded_ = false;
  std::vector<std::string> file_names_;
  std::vector<std::unique_ptr<io::SafetensorsReader>> readers_;
  std::map<std::string, std::size_t, std::less<>> index_;  // tensor -> reader
};

// Converts rows [row0, row0 + count) of a weight viewed as a matrix (rows(), cols()) to float,
// writing count * cols() values to `out`. Float dtypes only (F32, F16, BF16, F64).
void convert_rows(float* out, const WeightRef& w, int64_t row0, int64_t count);
// The whole tensor as float.
std::vector<float> to_float(const WeightRef& w);

}  // namespace blocklab::hf
