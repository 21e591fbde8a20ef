#include "hf/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "io/read_file.h"
#include "util/error.h"
#include "util/shape.h"

namespace blocklab::hf {

namespace fs = std::filesystem;

int64_t WeightRef::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t WeightRef::cols() const {
  int64_t n = 1;  // rank 0 and 1: one value per row
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

namespace {

// A shard name from an index must be a plain file name in the model directory.
void check_shard_name(const std::string& name, const fs::path& index) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find('\0') != std::string::npos)
    throw Error(index.string() + ": shard file name \"" + name + "\" is not a plain file name");
}

}  // namespace

WeightStore::WeightStore(WeightStore&&) noexcept = default;
WeightStore& WeightStore::operator=(WeightStore&&) noexcept = default;
WeightStore::~WeightStore() = default;

WeightStore WeightStore::open(const fs::path& path) {
  WeightStore s;
  s.source_ = path;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    s.file_names_.push_back(path.filename().string());
    s.readers_.push_back(std::make_unique<io::SafetensorsReader>(path.string()));
    for (const io::TensorEntry& t : s.readers_[0]->tensors()) s.index_.emplace(t.name, 0);
    return s;
  }
  if (!fs::is_directory(path, ec)) throw Error(path.string() + ": no such model directory or file");

  const fs::path index_path = path / "model.safetensors.index.json";
  const fs::path single = path / "model.safetensors";
  if (fs::exists(index_path, ec)) {
    s.sharded_ = true;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(io::read_file(index_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(index_path.string() + ": not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index_path.string() + ": missing \"weight_map\" object");
    std::map<std::string, std::vector<std::string>> by_shard;  // shard -> tensors listed for it
    for (const auto& [tensor, shard] : j["weight_map"].items()) {
      if (!shard.is_string())
        throw Error(index_path.string() + ": weight_map entry for \"" + tensor + "\" is not a file name");
      const std::string name = shard.get<std::string>();
      check_shard_name(name, index_path);
      by_shard[name].push_back(tensor);
    }
    if (by_shard.empty()) throw Error(index_path.string() + ": weight_map is empty");
    for (const auto& [shard, tensors] : by_shard) {
      const fs::path file = path / shard;
      if (!fs::exists(file, ec))
        throw Error(file.string() + ": missing shard (listed in model.safetensors.index.json for " +
                    std::to_string(tensors.size()) + " tensors, e.g. \"" + tensors.front() + "\")");
      const std::size_t r = s.readers_.size();
      s.readers_.push_back(std::make_unique<io::SafetensorsReader>(file.string()));
      s.file_names_.push_back(shard);
      for (const std::string& t : tensors) {
        if (s.readers_[r]->find(t) == nullptr)
          throw Error(file.string() + ": tensor \"" + t + "\" is listed for this shard in model.safetensors.index.json"
                      " but the file does not contain it");
        s.index_.emplace(t, r);
      }
    }
    return s;
  }
  if (fs::exists(single, ec)) {
    s.file_names_.push_back("model.safetensors");
    s.readers_.push_back(std::make_unique<io::SafetensorsReader>(single.string()));
    for (const io::TensorEntry& t : s.readers_[0]->tensors()) s.index_.emplace(t.name, 0);
    return s;
  }
  if (fs::exists(path / "pytorch_model.bin", ec) || fs::exists(path / "pytorch_model.bin.index.json", ec))
    throw Error(path.string() + ": only PyTorch weights found (pytorch_model.bin); blocklab reads safetensors (model.safetensors)");
  throw Error(path.string() + ": no weights: expected model.safetensors or model.safetensors.index.json");
}

bool WeightStore::contains(std::string_view name) const { return index_.find(name) != index_.end(); }

WeightRef WeightStore::get(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    const std::string where = sharded_ ? (source_ / "model.safetensors.index.json").string()
                                       : (readers_.empty() ? source_.string() : readers_[0]->path());
    throw Error(where + ": missing tensor \"" + std::string(name) + "\"");
  }
  const io::SafetensorsReader& r = *readers_[it->second];
  const io::TensorEntry& e = r.at(name);
  WeightRef w;
  w.name = e.name;
  w.file = r.path();
  w.dtype = e.dtype;
  w.shape = e.shape;
  w.bytes = r.bytes(e);
  if (!io::dtype_is_float(w.dtype))
    throw Error(w.file + ": tensor \"" + w.name + "\" has dtype " + io::dtype_name(w.dtype) +
                ", expected a floating-point type (F32, F16, BF16)");
  return w;
}

WeightRef WeightStore::get(std::string_view name, const std::vector<int64_t>& expected, const std::string& why) const {
  WeightRef w = get(name);
  if (w.shape != expected)
    throw Error(w.file + ": tensor \"" + w.name + "\" has shape " + format_shape(w.shape) + ", expected " +
                format_shape(expected) + (why.empty() ? "" : " (" + why + ")"));
  return w;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, r] : index_) out.push_back(name);
  return out;
}

uint64_t WeightStore::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, r] : index_) n += readers_[r]->at(name).nbytes();
  return n;
}

namespace {
// The whole pages inside [p, p + n) (madvise needs page-aligned addresses; partial pages at the
// edges are shared with neighbouring tensors and left alone).
bool page_interior(const std::byte* p, std::size_t n, void*& begin, std::size_t& len) {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (a + page - 1) / page * page;
  const uintptr_t last = (a + n) / page * page;
  if (last <= first) return false;
  begin = reinterpret_cast<void*>(first);
  len = last - first;
  return true;
}
}  // namespace

void WeightStore::prefetch(const WeightRef& w) {
  void* b;
  std::size_t n;
  if (page_interior(w.bytes.data(), w.bytes.size(), b, n)) ::madvise(b, n, MADV_WILLNEED);
}

void WeightStore::release(const WeightRef& w) {
  // Only ever called on tensors of a WeightStore, whose readers all map files read-only
  // (MAP_PRIVATE, never written): dropped pages are read back from the file on the next access.
  void* b;
  std::size_t n;
  if (page_interior(w.bytes.data(), w.bytes.size(), b, n)) ::madvise(b, n, MADV_DONTNEED);
}

void convert_rows(float* out, const WeightRef& w, int64_t row0, int64_t count) {
  const int64_t cols = w.cols();
  if (row0 < 0 || count < 0 || row0 + count > w.rows())
    throw Error("convert_rows: rows [" + std::to_string(row0) + ", " + std::to_string(row0 + count) +
                ") outside tensor \"" + w.name + "\" with " + std::to_string(w.rows()) + " rows");
  if (!io::dtype_is_float(w.dtype))
    throw Error(w.file + ": tensor \"" + w.name + "\" has dtype " + io::dtype_name(w.dtype) +
                ", expected a floating-point type");
  const int64_t first = row0 * cols;
  io::convert_to_float(w.dtype, w.bytes.data() + first * static_cast<int64_t>(io::dtype_size(w.dtype)), out,
                       static_cast<std::size_t>(count * cols));
}

std::vector<float> to_float(const WeightRef& w) {
  std::vector<float> out(static_cast<std::size_t>(w.numel()));
  if (!out.empty()) convert_rows(out.data(), w, 0, w.rows());
  return out;
}

}  // namespace blocklab::hf
