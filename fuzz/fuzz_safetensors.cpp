// libFuzzer target for the safetensors parser (src/io/safetensors.cpp).
//
// Every input is parsed from memory. The parser must either accept it or throw blocklab::Error;
// anything else (a crash, a sanitizer report, another exception type) is a bug. Accepted inputs
// are also read through every accessor and re-serialized; the re-serialized image must parse to
// the same tensors and metadata (a writer/reader consistency oracle), and its checksums must verify; the
// checksums of the input itself are checked too (they may be absent, match, or fail with Error).
//
// Built and run by fuzz/run-smoke.sh. Compiled with -DBLOCKLAB_FUZZ_SEEDGEN instead, this file is
// a small program that writes a seed corpus of valid files into the directory given as argv[1].
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "util/error.h"

using namespace blocklab::io;

#ifndef BLOCKLAB_FUZZ_SEEDGEN

namespace {

[[noreturn]] void oracle_failure(const char* what) {
  std::fprintf(stderr, "safetensors fuzz oracle failed: %s\n", what);
  std::abort();  // libFuzzer reports the input as a crash
}

void exercise(const SafetensorsReader& r) {
  try {
    (void)r.verify_checksums();
  } catch (const blocklab::Error&) {
    // damaged or malformed checksums: reported, as for any other bad input
  }
  bool writable = true;
  for (const TensorEntry& t : r.tensors()) {
    if (t.name.empty()) writable = false;  // the writer refuses empty names
    if (r.find(t.name) != &t) oracle_failure("find");
    const auto b = r.bytes(t);
    if (b.size() != t.end - t.begin) oracle_failure("bytes size");
    if (static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype) != b.size()) oracle_failure("numel");
    if (dtype_is_float(t.dtype)) {
      const auto f = r.read_f32(t.name);
      const auto d = r.read_f64(t.name);
      if (f.size() != d.size()) oracle_failure("float sizes");
    } else {
      (void)r.read_i64(t.name);
    }
  }
  if (!writable) return;

  std::vector<TensorToWrite> out;
  for (const TensorEntry& t : r.tensors()) out.push_back({t.name, t.dtype, t.shape, r.bytes(t)});
  const std::vector<std::byte> image = serialize_safetensors(out, r.metadata());
  const SafetensorsReader again = SafetensorsReader::from_bytes(image, "reserialized");
  if (again.tensors().size() != r.tensors().size()) oracle_failure("tensor count");
  auto given = r.metadata(), kept = again.metadata();
  given.erase(kChecksumsKey);  // the writer replaces the checksums with those of the bytes it writes
  kept.erase(kChecksumsKey);
  if (given != kept) oracle_failure("metadata");
  if (!again.verify_checksums()) oracle_failure("written file has no checksums");
  for (const TensorEntry& t : r.tensors()) {
    const TensorEntry* u = again.find(t.name);
    if (u == nullptr || u->dtype != t.dtype || u->shape != t.shape) oracle_failure("entry");
    const auto a = r.bytes(t), b = again.bytes(*u);
    if (a.size() != b.size() || (!a.empty() && std::memcmp(a.data(), b.data(), a.size()) != 0))
      oracle_failure("data");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> file(size);
  if (size) std::memcpy(file.data(), data, size);
  try {
    const SafetensorsReader r = SafetensorsReader::from_bytes(std::move(file), "fuzz-input");
    exercise(r);
  } catch (const blocklab::Error&) {
    // Rejected input: expected.
  }
  return 0;
}

#else  // seed generator

#include <span>

namespace {

void put(const std::string& dir, const std::string& name, const std::vector<std::byte>& bytes) {
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

std::vector<std::byte> raw(const std::string& header, std::size_t data_len) {
  std::vector<std::byte> out(8 + header.size() + data_len);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
  std::memcpy(out.data() + 8, header.data(), header.size());
  for (std::size_t i = 0; i < data_len; ++i) out[8 + header.size() + i] = static_cast<std::byte>(i * 37 + 3);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <seed-dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::vector<float> f = {1.0f, -2.5f, 0.0f, 3.0e38f};
  const std::vector<double> d = {0.5, -1e-300};
  const std::vector<int64_t> i = {-1, 0, 1};
  const std::vector<uint16_t> h = {float_to_bf16(1.5f), float_to_bf16(-0.0f)};
  const std::vector<uint16_t> hf = {float_to_f16(65504.0f), float_to_f16(1e-7f)};
  const std::vector<uint8_t> u8 = {0, 1, 255};
  const float scalar = 7.0f;

  put(dir, "f32.safetensors", serialize_safetensors({tensor_view("w", {2, 2}, std::span<const float>(f))}));
  put(dir, "mixed.safetensors",
      serialize_safetensors({tensor_view("a", {4}, std::span<const float>(f)),
                             tensor_view("b", {2, 1}, std::span<const double>(d)),
                             tensor_view("c", {3}, std::span<const int64_t>(i)),
                             tensor_view("bf", DType::BF16, {2}, std::span<const uint16_t>(h)),
                             tensor_view("hf", DType::F16, {2}, std::span<const uint16_t>(hf)),
                             {"u8", DType::U8, {3}, std::as_bytes(std::span<const uint8_t>(u8))},
                             {"i8", DType::I8, {3}, std::as_bytes(std::span<const uint8_t>(u8))},
                             {"bool", DType::BOOL, {1, 3}, std::as_bytes(std::span<const uint8_t>(u8))}},
                            {{"format", "pt"}, {"step", "100"}}));
  put(dir, "zero_and_scalar.safetensors",
      serialize_safetensors({tensor_view("empty", {0, 4}, std::span<const float>()),
                             tensor_view("s", {}, std::span<const float>(&scalar, 1)),
                             tensor_view("empty2", {3, 0}, std::span<const int64_t>())}));
  put(dir, "empty.safetensors", raw("{}", 0));
  put(dir, "metadata_only.safetensors", raw(R"({"__metadata__":{"k":"v"}})", 0));
  put(dir, "padded.safetensors",
      raw(R"({"x":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})" + std::string(13, ' '), 8));
  put(dir, "reordered.safetensors",
      raw(R"({"y":{"data_offsets":[2,6],"shape":[1],"dtype":"F32"},"x":{"shape":[1],"dtype":"I16","data_offsets":[0,2]}})",
          6));
  put(dir, "unicode.safetensors",
      raw("{\"\xc3\xa9t\xc3\xa9\\u00e9\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2));
  return 0;
}

#endif
