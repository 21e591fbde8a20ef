// Tests for src/io/safetensors: the validating reader (one test per malformed-file case, each
// checking the reason in the error message, on an in-memory image and on a real mmap'd file),
// and round trips through the atomic writer (the fp16/bf16 conversions: test_dtype.cpp).
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "util/bit_cast.h"
#include "util/error.h"

namespace fs = std::filesystem;
using blocklab::Error;
using namespace blocklab::io;

namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("blocklab_sft_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};

void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good());
}

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// A file image: u64 length field (the header's size unless overridden), the header text, then
// `data_len` data bytes (a recognizable pattern).
std::vector<std::byte> make_raw(const std::string& header, std::size_t data_len,
                                std::optional<uint64_t> length_field = std::nullopt) {
  const uint64_t n = length_field.value_or(header.size());
  std::vector<std::byte> out(8 + header.size() + data_len);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
  std::memcpy(out.data() + 8, header.data(), header.size());
  for (std::size_t i = 0; i < data_len; ++i) out[8 + header.size() + i] = static_cast<std::byte>(i * 7 + 1);
  return out;
}

// The valid file every corruption starts from: two tensors tiling a 40-byte buffer plus metadata.
const std::string kEntryA = R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
const std::string kEntryB = R"("b":{"dtype":"I64","shape":[3],"data_offsets":[16,40]})";
const std::string kMeta = R"("__metadata__":{"format":"pt"})";
std::string base_header() { return "{" + kMeta + "," + kEntryA + "," + kEntryB + "}"; }
constexpr std::size_t kBaseData = 40;

// Header text with the first occurrence of `from` replaced by `to` (the test fails if absent).
std::string mutate(std::string header, const std::string& from, const std::string& to) {
  const auto pos = header.find(from);
  EXPECT_NE(pos, std::string::npos) << "mutation target not found: " << from;
  if (pos != std::string::npos) header.replace(pos, from.size(), to);
  return header;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<non-Error exception> ") + e.what();
  }
  return "<no error>";
}

// The file is rejected with a message "<name>: ...reason..." both from memory and from disk.
void expect_reject(const std::vector<std::byte>& file, const std::string& reason) {
  const std::string mem = error_of([&] { SafetensorsReader::from_bytes(file, "mem.safetensors"); });
  EXPECT_EQ(mem.rfind("mem.safetensors: ", 0), 0u) << mem;
  EXPECT_NE(mem.find(reason), std::string::npos) << "expected '" << reason << "' in: " << mem;

  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_file(path, file);
  const std::string disk = error_of([&] { SafetensorsReader r(path); });
  EXPECT_EQ(disk.rfind(path + ": ", 0), 0u) << disk;
  EXPECT_NE(disk.find(reason), std::string::npos) << "expected '" << reason << "' in: " << disk;
}

void expect_reject_header(const std::string& header, std::size_t data_len, const std::string& reason) {
  SCOPED_TRACE(header);
  expect_reject(make_raw(header, data_len), reason);
}

SafetensorsReader accept(const std::string& header, std::size_t data_len) {
  return SafetensorsReader::from_bytes(make_raw(header, data_len), "mem.safetensors");
}

std::vector<uint16_t> bits16(const std::vector<float>& v, uint16_t (*conv)(float)) {
  std::vector<uint16_t> out;
  for (float f : v) out.push_back(conv(f));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Valid files

TEST(SafetensorsParse, ValidBaseline) {
  auto r = accept(base_header(), kBaseData);
  ASSERT_EQ(r.tensors().size(), 2u);
  EXPECT_EQ(r.tensors()[0].name, "a");
  EXPECT_EQ(r.tensors()[0].dtype, DType::F32);
  EXPECT_EQ(r.tensors()[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r.tensors()[0].numel(), 4);
  EXPECT_EQ(r.tensors()[1].name, "b");
  EXPECT_EQ(r.tensors()[1].begin, 16u);
  EXPECT_EQ(r.tensors()[1].end, 40u);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.path(), "mem.safetensors");
  EXPECT_EQ(r.data_offset(), 8 + base_header().size());
}

TEST(SafetensorsParse, AcceptsSpacePaddingAfterJson) {
  auto r = accept(base_header() + "       ", kBaseData);
  EXPECT_EQ(r.tensors().size(), 2u);
  auto r2 = accept(base_header() + std::string(1000, ' '), kBaseData);
  EXPECT_EQ(r2.tensors().size(), 2u);
}

TEST(SafetensorsParse, AcceptsAnyKeyOrder) {
  // Tensors listed in reverse buffer order, fields in unusual order, metadata last.
  const std::string h =
      R"({"b":{"data_offsets":[16,40],"shape":[3],"dtype":"I64"},)"
      R"("a":{"shape":[2,2],"data_offsets":[0,16],"dtype":"F32"},"__metadata__":{"z":"1","a":"2"}})";
  auto r = accept(h, kBaseData);
  ASSERT_EQ(r.tensors().size(), 2u);
  EXPECT_EQ(r.tensors()[0].name, "a");  // sorted by begin offset
  EXPECT_EQ(r.tensors()[1].name, "b");
  EXPECT_EQ(r.metadata().size(), 2u);
}

TEST(SafetensorsParse, TensorsSortedByBeginOffset) {
  const std::string h =
      R"({"z":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"y":{"dtype":"U8","shape":[2],"data_offsets":[1,3]},)"
      R"("x":{"dtype":"U8","shape":[3],"data_offsets":[3,6]}})";
  auto r = accept(h, 6);
  ASSERT_EQ(r.tensors().size(), 3u);
  EXPECT_EQ(r.tensors()[0].name, "z");
  EXPECT_EQ(r.tensors()[1].name, "y");
  EXPECT_EQ(r.tensors()[2].name, "x");
}

TEST(SafetensorsParse, AcceptsEmptyHeaderObject) {
  auto r = accept("{}", 0);
  EXPECT_TRUE(r.tensors().empty());
  EXPECT_TRUE(r.metadata().empty());
  auto r2 = accept(R"({"__metadata__":{}})", 0);
  EXPECT_TRUE(r2.tensors().empty());
}

TEST(SafetensorsParse, ZeroSizeTensors) {
  const std::string h =
      R"({"e0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("e1":{"dtype":"F64","shape":[3,0,5],"data_offsets":[8,8]},"b":{"dtype":"U8","shape":[1],"data_offsets":[8,9]},)"
      R"("e2":{"dtype":"I64","shape":[0],"data_offsets":[9,9]}})";
  auto r = accept(h, 9);
  ASSERT_EQ(r.tensors().size(), 5u);
  EXPECT_EQ(r.at("e1").numel(), 0);
  EXPECT_TRUE(r.read_f32("e1").empty());
  EXPECT_TRUE(r.read_i64("e2").empty());
  EXPECT_EQ(r.bytes(r.at("e0")).size(), 0u);
  EXPECT_EQ(r.read_f32("a").size(), 2u);
}

TEST(SafetensorsParse, RankZeroTensor) {
  const float v = 3.5f;
  auto file = serialize_safetensors({tensor_view("s", {}, std::span<const float>(&v, 1))});
  auto r = SafetensorsReader::from_bytes(file, "mem");
  EXPECT_TRUE(r.at("s").shape.empty());
  EXPECT_EQ(r.at("s").numel(), 1);
  EXPECT_EQ(r.read_f32("s"), std::vector<float>{3.5f});
  // Also as hand-written JSON.
  auto r2 = accept(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})", 8);
  EXPECT_EQ(r2.read_f64("s").size(), 1u);
}

TEST(SafetensorsParse, IgnoresUnknownEntryFields) {
  auto r = accept(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":[1,{"x":null}]}})", 1);
  EXPECT_EQ(r.tensors().size(), 1u);
}

TEST(SafetensorsParse, FindAndAt) {
  auto r = accept(base_header(), kBaseData);
  EXPECT_NE(r.find("a"), nullptr);
  EXPECT_EQ(r.find("nope"), nullptr);
  EXPECT_EQ(&r.at("b"), r.find("b"));
  const std::string msg = error_of([&] { r.at("missing_tensor"); });
  EXPECT_NE(msg.find("mem.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing_tensor"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { r.read_f32("missing_tensor"); }).find("missing_tensor"), std::string::npos);
}

TEST(SafetensorsParse, ReadTypeAndSizeErrors) {
  auto r = accept(base_header(), kBaseData);
  EXPECT_NE(error_of([&] { r.read_i64("a"); }).find("not an integer type"), std::string::npos);
  EXPECT_NE(error_of([&] { r.read_f32("b"); }).find("not a floating-point type"), std::string::npos);
  EXPECT_NE(error_of([&] { r.read_f64("b"); }).find("not a floating-point type"), std::string::npos);
  std::vector<float> small(3);
  EXPECT_NE(error_of([&] { r.read(r.at("a"), std::span<float>(small)); }).find("elements"), std::string::npos);
  std::vector<double> big(5);
  EXPECT_NE(error_of([&] { r.read(r.at("a"), std::span<double>(big)); }).find("elements"), std::string::npos);
  // A fabricated entry pointing outside the buffer is refused, not read.
  TensorEntry fake{"fake", DType::F32, {100}, 0, 400};
  EXPECT_NE(error_of([&] { r.bytes(fake); }).find("not inside the data buffer"), std::string::npos);
  std::vector<float> out(100);
  EXPECT_NE(error_of([&] { r.read(fake, std::span<float>(out)); }), "<no error>");
}

TEST(SafetensorsParse, ReaderIsMovable) {
  TempDir dir;
  const std::vector<float> v = {1, 2, 3};
  write_safetensors(dir.file("m.safetensors"), {tensor_view("v", {3}, std::span<const float>(v))});
  SafetensorsReader a(dir.file("m.safetensors"));
  SafetensorsReader b(std::move(a));
  EXPECT_EQ(b.read_f32("v"), v);
  SafetensorsReader c = SafetensorsReader::from_bytes(make_raw(base_header(), kBaseData), "x");
  c = std::move(b);
  EXPECT_EQ(c.read_f32("v"), v);
  EXPECT_EQ(c.path(), dir.file("m.safetensors"));
}

// ---------------------------------------------------------------------------------------------
// Malformed files: one test per reason

TEST(SafetensorsReject, FileShorterThan8Bytes) {
  for (std::size_t n : {0u, 1u, 7u}) {
    SCOPED_TRACE(n);
    expect_reject(std::vector<std::byte>(n, std::byte{0}), "file too short");
  }
}

TEST(SafetensorsReject, HeaderLengthZero) { expect_reject(make_raw("", 16, 0), "header length is 0"); }

TEST(SafetensorsReject, HeaderLengthAbove100MB) {
  expect_reject(make_raw(base_header(), kBaseData, 100'000'001), "header too large");
  expect_reject(make_raw(base_header(), kBaseData, std::numeric_limits<uint64_t>::max()), "header too large");
}

TEST(SafetensorsReject, HeaderLengthBeyondFile) {
  const std::string h = base_header();
  expect_reject(make_raw(h, 0, h.size() + 1), "beyond the end of the file");
  expect_reject(make_raw(h, kBaseData, h.size() + kBaseData + 1), "beyond the end of the file");
}

TEST(SafetensorsReject, InvalidUtf8) {
  for (const std::string bad : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    expect_reject_header("{\"a" + bad + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                         "not valid UTF-8");
  }
  // Valid multi-byte names are fine.
  auto r = accept("{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
  EXPECT_EQ(r.tensors().size(), 1u);
}

TEST(SafetensorsReject, InvalidJson) {
  expect_reject_header(base_header().substr(0, base_header().size() - 1), kBaseData, "not valid JSON");
  expect_reject_header(base_header() + "}", kBaseData, "not valid JSON");
  expect_reject_header("{\"a\":1,}", 0, "not valid JSON");
  expect_reject_header(std::string("{\"a\0\":1}", 8), 0, "not valid JSON");
  expect_reject_header(std::string(100000, '['), 0, "not valid JSON");
}

TEST(SafetensorsReject, TopLevelNotObject) {
  for (const std::string h : {"[]", "\"str\"", "3", "null", "true"}) expect_reject_header(h, 0, "not a JSON object");
}

TEST(SafetensorsReject, TensorEntryNotObject) {
  expect_reject_header(mutate(base_header(), kEntryB, R"("b":[16,40])"), kBaseData, "entry is not an object");
  expect_reject_header(R"({"a":"F32"})", 0, "entry is not an object");
}

TEST(SafetensorsReject, MissingDtype) {
  expect_reject_header(mutate(base_header(), R"("dtype":"F32",)", ""), kBaseData, "missing field \"dtype\"");
}

TEST(SafetensorsReject, MissingShape) {
  expect_reject_header(mutate(base_header(), R"("shape":[2,2],)", ""), kBaseData, "missing field \"shape\"");
}

TEST(SafetensorsReject, MissingDataOffsets) {
  expect_reject_header(mutate(base_header(), R"(,"data_offsets":[0,16])", ""), kBaseData,
                       "missing field \"data_offsets\"");
}

TEST(SafetensorsReject, DtypeNotString) {
  for (const std::string v : {"4", "null", "[\"F32\"]", "{}"})
    expect_reject_header(mutate(base_header(), R"("dtype":"F32")", "\"dtype\":" + v), kBaseData,
                         "\"dtype\" is not a string");
}

TEST(SafetensorsReject, ShapeNotArray) {
  for (const std::string v : {"4", "\"[2,2]\"", "{}", "null"})
    expect_reject_header(mutate(base_header(), R"("shape":[2,2])", "\"shape\":" + v), kBaseData,
                         "\"shape\" is not an array");
}

TEST(SafetensorsReject, ShapeElementNotInteger) {
  for (const std::string v : {"[2,2.0]", "[2.5,2]", "[\"2\",2]", "[true,2]", "[null]", "[[2],2]", "[2,1e3]",
                              "[18446744073709551616]"})
    expect_reject_header(mutate(base_header(), R"("shape":[2,2])", "\"shape\":" + v), kBaseData, "is not an integer");
}

TEST(SafetensorsReject, NegativeShapeDim) {
  expect_reject_header(mutate(base_header(), R"("shape":[2,2])", R"("shape":[-2,-2])"), kBaseData, "is negative");
  expect_reject_header(mutate(base_header(), R"("shape":[2,2])", R"("shape":[4,-1])"), kBaseData, "is negative");
}

TEST(SafetensorsReject, ShapeDimAboveInt64) {
  expect_reject_header(mutate(base_header(), R"("shape":[2,2])", R"("shape":[9223372036854775808])"), kBaseData,
                       "too large");
}

TEST(SafetensorsReject, DataOffsetsNotPairOfIntegers) {
  for (const std::string v : {"[0]", "[]", "[0,8,16]", "\"0,16\"", "{\"0\":16}", "[0,16.0]", "[\"0\",16]",
                              "[null,16]", "[0,18446744073709551616]"})
    expect_reject_header(mutate(base_header(), R"("data_offsets":[0,16])", "\"data_offsets\":" + v), kBaseData,
                         "\"data_offsets\" is not an array of 2 integers");
}

TEST(SafetensorsReject, NegativeDataOffsets) {
  expect_reject_header(mutate(base_header(), R"("data_offsets":[0,16])", R"("data_offsets":[-1,16])"), kBaseData,
                       "data_offsets[0] is negative");
  expect_reject_header(mutate(base_header(), R"("data_offsets":[0,16])", R"("data_offsets":[0,-16])"), kBaseData,
                       "data_offsets[1] is negative");
}

TEST(SafetensorsReject, UnknownDtype) {
  for (const std::string v : {"F8", "f32", "", "FLOAT32", "U16", "F32 "})
    expect_reject_header(mutate(base_header(), R"("dtype":"F32")", "\"dtype\":\"" + v + "\""), kBaseData,
                         "unknown dtype");
}

TEST(SafetensorsReject, NumelTimesSizeOverflows) {
  // numel itself overflows.
  expect_reject_header(mutate(base_header(), R"("shape":[2,2])", R"("shape":[4294967296,4294967296])"), kBaseData,
                       "overflows uint64");
  // numel fits int64 but numel * 4 bytes does not fit uint64.
  expect_reject_header(mutate(base_header(), R"("shape":[2,2])", R"("shape":[4611686018427387904,2])"), kBaseData,
                       "overflows uint64");
  // numel above int64 max (but below uint64 max).
  expect_reject_header(
      mutate(base_header(), R"("shape":[2,2])", R"("shape":[3037000500,3037000500])"), kBaseData,
      "overflows uint64");
  // A zero dimension makes the product 0 regardless of the others: no overflow, just a length mismatch.
  expect_reject_header(mutate(base_header(), R"("shape":[2,2])", R"("shape":[4294967296,4294967296,0])"), kBaseData,
                       "does not match dtype size");
}

TEST(SafetensorsReject, EndBeforeBegin) {
  expect_reject_header(mutate(base_header(), R"("data_offsets":[16,40])", R"("data_offsets":[40,16])"), kBaseData,
                       "is before begin");
}

TEST(SafetensorsReject, OverlappingRanges) {
  // b moved to start inside a (sizes still consistent).
  const std::string h =
      "{" + kEntryA + R"(,"b":{"dtype":"I64","shape":[3],"data_offsets":[8,32]}})";
  expect_reject_header(h, 32, "overlaps");
  // Same range twice.
  const std::string h2 = "{" + kEntryA + R"(,"c":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_reject_header(h2, 16, "overlaps");
  // A zero-size tensor strictly inside another one.
  const std::string h3 = "{" + kEntryA + R"(,"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
  expect_reject_header(h3, 16, "overlaps");
}

TEST(SafetensorsReject, GapBetweenRanges) {
  const std::string h = "{" + kEntryA + R"(,"b":{"dtype":"I64","shape":[3],"data_offsets":[24,48]}})";
  expect_reject_header(h, 48, "gap in data buffer");
}

TEST(SafetensorsReject, FirstRangeNotAtZero) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]}})";
  expect_reject_header(h, 24, "does not start at offset 0");
}

TEST(SafetensorsReject, TrailingBytesAfterLastRange) {
  expect_reject(make_raw(base_header(), kBaseData + 1), "trailing bytes");
  expect_reject(make_raw("{}", 3), "trailing bytes");
}

TEST(SafetensorsReject, TruncatedBuffer) {
  expect_reject(make_raw(base_header(), kBaseData - 1), "truncated");
  expect_reject(make_raw(base_header(), 0), "truncated");
  // Offsets far beyond any real file.
  const std::string h = R"({"a":{"dtype":"U8","shape":[1000000000000],"data_offsets":[0,1000000000000]}})";
  expect_reject_header(h, 8, "truncated");
}

TEST(SafetensorsReject, ByteLengthMismatch) {
  expect_reject_header(mutate(base_header(), R"("shape":[2,2])", R"("shape":[2,3])"), kBaseData,
                       "does not match dtype size");
  expect_reject_header(mutate(base_header(), R"("dtype":"F32")", R"("dtype":"F64")"), kBaseData,
                       "does not match dtype size");
  expect_reject_header(mutate(base_header(), R"("shape":[2,2])", R"("shape":[])"), kBaseData,
                       "does not match dtype size");
}

TEST(SafetensorsReject, MetadataNotObject) {
  for (const std::string v : {"[]", "\"pt\"", "null", "1"})
    expect_reject_header(mutate(base_header(), R"({"format":"pt"})", v), kBaseData, "__metadata__ is not an object");
}

TEST(SafetensorsReject, MetadataNonStringValue) {
  for (const std::string v : {"1", "null", "true", "[\"pt\"]", "{\"x\":\"y\"}"})
    expect_reject_header(mutate(base_header(), R"({"format":"pt"})", "{\"format\":" + v + "}"), kBaseData,
                         "value for key 'format' is not a string");
}

TEST(SafetensorsReject, DuplicateTensorNames) {
  const std::string h = "{" + kEntryA + "," + kEntryB + R"(,"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_reject_header(h, kBaseData, "duplicate tensor name 'a'");
}

TEST(SafetensorsReject, DuplicateKeysInsideEntryOrMetadata) {
  expect_reject_header(mutate(base_header(), R"("dtype":"F32")", R"("dtype":"F32","dtype":"F64")"), kBaseData,
                       "duplicate key 'dtype'");
  expect_reject_header(mutate(base_header(), R"({"format":"pt"})", R"({"format":"pt","format":"np"})"), kBaseData,
                       "duplicate key 'format'");
  expect_reject_header("{" + kMeta + "," + kMeta + "," + kEntryA + "," + kEntryB + "}", kBaseData,
                       "duplicate key '__metadata__'");
}

TEST(SafetensorsReject, MissingFileAndDirectory) {
  TempDir dir;
  EXPECT_NE(error_of([&] { SafetensorsReader r(dir.file("nope.safetensors")); }).find("cannot read"),
            std::string::npos);
  const std::string msg = error_of([&] { SafetensorsReader r(dir.path().string()); });
  EXPECT_NE(msg.find(dir.path().string() + ": "), std::string::npos) << msg;
}

TEST(SafetensorsReject, LongHostileNameIsQuotedAndCut) {
  const std::string name(5000, 'n');
  const std::string msg = error_of([&] {
    SafetensorsReader::from_bytes(make_raw("{\"" + name + "\\n\":[]}", 0), "m");
  });
  EXPECT_NE(msg.find("entry is not an object"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 400u);
}

// Random corruption of valid files: every outcome is success or blocklab::Error, never a crash
// (run under the sanitizer build to catch out-of-bounds reads too).
TEST(SafetensorsReject, RandomMutationsNeverCrash) {
  std::vector<float> f(5, 1.5f);
  std::vector<int64_t> i(3, -7);
  const std::vector<uint16_t> h = {0x3C00, 0x7C00};
  const auto valid = serialize_safetensors(
      {tensor_view("w", {5}, std::span<const float>(f)), tensor_view("i", {3}, std::span<const int64_t>(i)),
       tensor_view("h", DType::F16, {2}, std::span<const uint16_t>(h))},
      {{"k", "v"}});
  std::mt19937 rng(12345);
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<std::byte> file = valid;
    const int kind = static_cast<int>(rng() % 4);
    const int count = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < count && !file.empty(); ++k) {
      const std::size_t pos = rng() % file.size();
      if (kind == 0) file[pos] = static_cast<std::byte>(rng() & 0xFF);
      if (kind == 1) file[pos] ^= static_cast<std::byte>(1u << (rng() % 8));
      if (kind == 2) file.resize(pos);
      if (kind == 3) file.insert(file.begin() + static_cast<std::ptrdiff_t>(pos), static_cast<std::byte>(rng() & 0xFF));
    }
    try {
      auto r = SafetensorsReader::from_bytes(file, "fuzz");
      ++accepted;
      for (const TensorEntry& t : r.tensors()) {
        (void)r.bytes(t);
        if (dtype_is_float(t.dtype)) (void)r.read_f64(t.name);
        if (dtype_is_integer(t.dtype)) (void)r.read_i64(t.name);
      }
    } catch (const Error&) {
    }
  }
  EXPECT_GT(accepted, 0);  // data-byte mutations keep the file valid
}

// ---------------------------------------------------------------------------------------------
// Round trips through the writer

TEST(SafetensorsRoundTrip, F32F64I64) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  std::vector<float> f32 = {1.0f, -2.5f, 3.25f, std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(), -0.0f};
  std::vector<double> f64 = {1e300, -1e-300, 0.1, std::numeric_limits<double>::infinity()};
  std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(), -1, 0, 1, std::numeric_limits<int64_t>::max()};
  write_safetensors(path, {tensor_view("f32", {2, 3}, std::span<const float>(f32)),
                           tensor_view("f64", {4}, std::span<const double>(f64)),
                           tensor_view("i64", {5, 1}, std::span<const int64_t>(i64))});
  SafetensorsReader r(path);
  EXPECT_EQ(r.path(), path);
  ASSERT_EQ(r.tensors().size(), 3u);
  // Laid out in the given order.
  EXPECT_EQ(r.tensors()[0].name, "f32");
  EXPECT_EQ(r.tensors()[1].name, "f64");
  EXPECT_EQ(r.tensors()[2].name, "i64");
  EXPECT_EQ(r.at("f32").shape, (std::vector<int64_t>{2, 3}));
  const auto got32 = r.read_f32("f32");
  ASSERT_EQ(got32.size(), f32.size());
  for (std::size_t k = 0; k < f32.size(); ++k)
    EXPECT_EQ(blocklab::bit_cast<uint32_t>(got32[k]), blocklab::bit_cast<uint32_t>(f32[k]));
  EXPECT_EQ(r.read_f64("f64"), f64);
  EXPECT_EQ(r.read_i64("i64"), i64);
  // Cross-width float reads.
  const auto f32_as_64 = r.read_f64("f32");
  for (std::size_t k = 0; k < f32.size(); ++k) EXPECT_EQ(f32_as_64[k], static_cast<double>(f32[k]));
  const auto f64_as_32 = r.read_f32("f64");
  EXPECT_EQ(f64_as_32[2], 0.1f);
  EXPECT_TRUE(std::isinf(f64_as_32[3]));
  // Raw bytes.
  auto b = r.bytes(r.at("i64"));
  ASSERT_EQ(b.size(), i64.size() * 8);
  EXPECT_EQ(std::memcmp(b.data(), i64.data(), b.size()), 0);
}

TEST(SafetensorsRoundTrip, Bf16AndF16) {
  const std::vector<float> vals = {0.0f, -0.0f, 1.0f, -2.0f, 0.5f, 65280.0f, 6.103515625e-05f, 5.9604645e-08f,
                                   std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::quiet_NaN()};
  const auto bf = bits16(vals, float_to_bf16);
  const auto hf = bits16(vals, float_to_f16);
  const auto file = serialize_safetensors({tensor_view("bf", DType::BF16, {11}, std::span<const uint16_t>(bf)),
                                           tensor_view("hf", DType::F16, {11}, std::span<const uint16_t>(hf))});
  auto r = SafetensorsReader::from_bytes(file, "mem");
  EXPECT_EQ(r.at("bf").dtype, DType::BF16);
  EXPECT_EQ(r.at("hf").dtype, DType::F16);
  for (const char* name : {"bf", "hf"}) {
    SCOPED_TRACE(name);
    const auto got = r.read_f32(name);
    const auto got64 = r.read_f64(name);
    ASSERT_EQ(got.size(), vals.size());
    for (std::size_t k = 0; k + 1 < vals.size(); ++k) {
      EXPECT_EQ(got[k], vals[k]) << k;  // all exactly representable in both formats
      EXPECT_EQ(std::signbit(got[k]), std::signbit(vals[k])) << k;
      EXPECT_EQ(got64[k], static_cast<double>(vals[k])) << k;
    }
    EXPECT_TRUE(std::isnan(got.back()));
    EXPECT_TRUE(std::isnan(got64.back()));
  }
  EXPECT_NE(error_of([&] { r.read_i64("bf"); }).find("not an integer type"), std::string::npos);
}

TEST(SafetensorsRoundTrip, IntegerWidening) {
  const std::vector<int32_t> i32 = {std::numeric_limits<int32_t>::min(), -1, 7};
  const std::vector<int16_t> i16 = {-32768, -2, 32767};
  const std::vector<int8_t> i8 = {-128, -1, 127};
  const std::vector<uint8_t> u8 = {0, 200, 255};
  const std::vector<uint8_t> bl = {0, 1, 5};
  auto raw = [](auto& v) { return std::as_bytes(std::span(v)); };
  const auto file = serialize_safetensors({{"i32", DType::I32, {3}, raw(i32)},
                                           {"i16", DType::I16, {3}, raw(i16)},
                                           {"i8", DType::I8, {3}, raw(i8)},
                                           {"u8", DType::U8, {3}, raw(u8)},
                                           {"bool", DType::BOOL, {3}, raw(bl)}});
  auto r = SafetensorsReader::from_bytes(file, "mem");
  EXPECT_EQ(r.read_i64("i32"), (std::vector<int64_t>{std::numeric_limits<int32_t>::min(), -1, 7}));
  EXPECT_EQ(r.read_i64("i16"), (std::vector<int64_t>{-32768, -2, 32767}));
  EXPECT_EQ(r.read_i64("i8"), (std::vector<int64_t>{-128, -1, 127}));
  EXPECT_EQ(r.read_i64("u8"), (std::vector<int64_t>{0, 200, 255}));
  EXPECT_EQ(r.read_i64("bool"), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_NE(error_of([&] { r.read_f32("i32"); }).find("not a floating-point type"), std::string::npos);
}

TEST(SafetensorsRoundTrip, ZeroSizeAndRankZero) {
  TempDir dir;
  const std::string path = dir.file("z.safetensors");
  const std::vector<float> empty;
  const double scalar = -4.25;
  const std::vector<int64_t> ints = {1, 2};
  write_safetensors(path, {tensor_view("empty", {0, 3}, std::span<const float>(empty)),
                           tensor_view("scalar", {}, std::span<const double>(&scalar, 1)),
                           tensor_view("empty2", {0}, std::span<const int64_t>()),
                           tensor_view("ints", {2}, std::span<const int64_t>(ints))});
  SafetensorsReader r(path);
  EXPECT_EQ(r.at("empty").numel(), 0);
  EXPECT_EQ(r.at("empty").shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(r.read_f32("empty").empty());
  EXPECT_TRUE(r.read_i64("empty2").empty());
  EXPECT_TRUE(r.at("scalar").shape.empty());
  EXPECT_EQ(r.read_f64("scalar"), std::vector<double>{-4.25});
  EXPECT_EQ(r.read_i64("ints"), ints);
  // Only zero-size tensors: empty data buffer.
  const auto only_empty = serialize_safetensors({tensor_view("e", {0}, std::span<const float>())});
  auto r2 = SafetensorsReader::from_bytes(only_empty, "mem");
  EXPECT_EQ(r2.at("e").begin, 0u);
  EXPECT_EQ(r2.at("e").end, 0u);
}

TEST(SafetensorsRoundTrip, Metadata) {
  TempDir dir;
  const std::string path = dir.file("meta.safetensors");
  const std::vector<float> v = {1};
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"note", "quote \" backslash \\ newline \n unicode \xc3\xa9"}, {"empty", ""}};
  write_safetensors(path, {tensor_view("v", {1}, std::span<const float>(v))}, meta);
  SafetensorsReader r(path);
  auto read = r.metadata();
  EXPECT_EQ(read.erase(kChecksumsKey), 1u);  // the writer adds the tensor checksums
  EXPECT_EQ(read, meta);
  // No metadata given: only the checksums.
  write_safetensors(path, {tensor_view("v", {1}, std::span<const float>(v))});
  SafetensorsReader r2(path);
  EXPECT_EQ(r2.metadata().size(), 1u);
  EXPECT_TRUE(r2.has_checksums());
}

// Every tensor's checksum goes into __metadata__; one flipped bit anywhere in a tensor's bytes is found and
// the tensor named; a file without checksums (another tool's) still reads, and says it was not verified.
TEST(SafetensorsChecksums, FlippedDataBitNamesTheTensor) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  const std::vector<int64_t> c = {7, 8, 9};
  const auto image = serialize_safetensors({tensor_view("a", {2, 2}, std::span<const float>(a)),
                                            tensor_view("b", {2}, std::span<const float>(b)),
                                            tensor_view("c", {3}, std::span<const int64_t>(c))},
                                           {{"format", "pt"}});
  const auto clean = SafetensorsReader::from_bytes(image, "clean");
  ASSERT_TRUE(clean.has_checksums());
  EXPECT_TRUE(clean.verify_checksums());
  for (const TensorEntry& t : clean.tensors()) {
    for (uint64_t at : {t.begin, (t.begin + t.end) / 2, t.end - 1}) {
      for (int bit : {0, 7}) {
        auto damaged = image;
        damaged[clean.data_offset() + at] ^= static_cast<std::byte>(1 << bit);
        const auto r = SafetensorsReader::from_bytes(damaged, "damaged");
        try {
          r.verify_checksums();
          ADD_FAILURE() << "flip at data byte " << at << " of " << t.name << " not detected";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("tensor '" + t.name + "': data damaged"), std::string::npos) << e.what();
        }
      }
    }
  }
}

TEST(SafetensorsChecksums, FileWithoutChecksumsStillReads) {
  const auto r = SafetensorsReader::from_bytes(make_raw(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
                                               "other-tool");
  EXPECT_FALSE(r.has_checksums());
  EXPECT_FALSE(r.verify_checksums());
  EXPECT_EQ(r.read_f32("x").size(), 2u);
}

TEST(SafetensorsChecksums, DamagedChecksumTableIsAnError) {
  // The table as it would sit in the header (a JSON string holding a JSON object), each one damaged.
  for (const std::string& table : {std::string(R"("not json")"), std::string(R"("{\"a\":\"123\"}")"),
                                   std::string(R"("{\"a\":\"0000000000000000\",\"zz\":\"0000000000000000\"}")"),
                                   std::string(R"("{}")"), std::string(R"("{\"a\":\"0000000000000000\"}")")}) {
    const std::string header = R"({"__metadata__":{")" + std::string(kChecksumsKey) + R"(":)" + table +
                               R"(},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    const auto r = SafetensorsReader::from_bytes(make_raw(header, 8), "bad");
    EXPECT_TRUE(r.has_checksums());
    EXPECT_THROW(r.verify_checksums(), Error) << table;
  }
}

TEST(SafetensorsRoundTrip, HeaderPaddedWithSpacesToMultipleOf8) {
  for (int len = 1; len <= 9; ++len) {
    const std::vector<float> v = {1};
    const auto file = serialize_safetensors({tensor_view(std::string(static_cast<std::size_t>(len), 'x'), {1},
                                                         std::span<const float>(v))});
    uint64_t n = 0;
    for (int k = 0; k < 8; ++k) n |= static_cast<uint64_t>(std::to_integer<uint8_t>(file[k])) << (8 * k);
    EXPECT_EQ(n % 8, 0u);
    EXPECT_EQ(file.size(), 8 + n + 4);
    const std::string header(reinterpret_cast<const char*>(file.data()) + 8, n);
    const auto last = header.find_last_of('}');
    ASSERT_NE(last, std::string::npos);
    EXPECT_EQ(header.find_first_not_of(' ', last + 1), std::string::npos) << header;
    EXPECT_LT(n - (last + 1), 8u);
    auto r = SafetensorsReader::from_bytes(file, "mem");
    EXPECT_EQ(r.data_offset() % 8, 0u);
  }
}

TEST(SafetensorsRoundTrip, SerializeMatchesWrittenFile) {
  TempDir dir;
  const std::vector<double> v = {1, 2, 3};
  const std::vector<TensorToWrite> ts = {tensor_view("v", {3}, std::span<const double>(v))};
  write_safetensors(dir.file("a.safetensors"), ts, {{"k", "v"}});
  EXPECT_EQ(read_file(dir.file("a.safetensors")), serialize_safetensors(ts, {{"k", "v"}}));
}

// ---------------------------------------------------------------------------------------------
// Writer validation and atomicity

TEST(SafetensorsWriter, LeavesNoTempFileAndOverwrites) {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  const std::vector<float> a = {1, 2}, b = {3, 4, 5};
  write_safetensors(path, {tensor_view("a", {2}, std::span<const float>(a))});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.safetensors"});
  write_safetensors(path, {tensor_view("b", {3}, std::span<const float>(b))});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.safetensors"});
  SafetensorsReader r(path);
  EXPECT_EQ(r.find("a"), nullptr);
  EXPECT_EQ(r.read_f32("b"), b);
}

TEST(SafetensorsWriter, MissingDirectoryThrows) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/out.safetensors");
  const std::vector<float> a = {1};
  const std::string msg = error_of([&] { write_safetensors(path, {tensor_view("a", {1}, std::span<const float>(a))}); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot create temporary file"), std::string::npos) << msg;
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SafetensorsWriter, InvalidInputDoesNotClobberExistingFile) {
  TempDir dir;
  const std::string path = dir.file("good.safetensors");
  const std::vector<float> a = {1, 2};
  write_safetensors(path, {tensor_view("a", {2}, std::span<const float>(a))});
  const auto before = read_file(path);

  auto expect_write_error = [&](const std::vector<TensorToWrite>& ts, const std::string& reason,
                                const std::map<std::string, std::string>& meta = {}) {
    const std::string msg = error_of([&] { write_safetensors(path, ts, meta); });
    EXPECT_NE(msg.find(reason), std::string::npos) << "expected '" << reason << "' in: " << msg;
    EXPECT_EQ(read_file(path), before);
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"good.safetensors"});
  };
  expect_write_error({tensor_view("x", {2}, std::span<const float>(a)), tensor_view("x", {2}, std::span<const float>(a))},
                     "duplicate tensor name");
  expect_write_error({tensor_view("x", {3}, std::span<const float>(a))}, "needs 12");
  expect_write_error({tensor_view("x", {-2}, std::span<const float>(a))}, "negative shape dimension");
  expect_write_error({tensor_view("", {2}, std::span<const float>(a))}, "name is empty");
  expect_write_error({tensor_view("__metadata__", {2}, std::span<const float>(a))}, "reserved");
  expect_write_error({tensor_view("bad\xff", {2}, std::span<const float>(a))}, "valid UTF-8");
  expect_write_error({tensor_view("x", {2}, std::span<const float>(a))}, "valid UTF-8", {{"k", "\xc0"}});
  expect_write_error({tensor_view("x", {4294967296, 4294967296}, std::span<const float>(a))}, "overflows");
  EXPECT_NE(error_of([&] { tensor_view("x", DType::F32, {1}, std::span<const uint16_t>()); }).find("16-bit"),
            std::string::npos);
}

TEST(SafetensorsWriter, RenameFailureRemovesTempAndKeepsTarget) {
  TempDir dir;
  // The target is a non-empty directory: write and fsync succeed, rename fails.
  const std::string path = dir.file("target");
  fs::create_directories(fs::path(path) / "child");
  const std::vector<float> a = {1, 2};
  const std::string msg = error_of([&] { write_safetensors(path, {tensor_view("a", {2}, std::span<const float>(a))}); });
  EXPECT_NE(msg.find("cannot rename"), std::string::npos) << msg;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"target"});
  EXPECT_TRUE(fs::is_directory(fs::path(path) / "child"));
}

TEST(SafetensorsWriter, TempPathBlockedKeepsExistingFile) {
  TempDir dir;
  const std::string path = dir.file("good.safetensors");
  const std::vector<float> a = {1, 2}, b = {7};
  write_safetensors(path, {tensor_view("a", {2}, std::span<const float>(a))});
  const auto before = read_file(path);
  // Something that is not ours occupies the temp name: creating the temp file fails.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  fs::create_directories(tmp);
  const std::string msg = error_of([&] { write_safetensors(path, {tensor_view("b", {1}, std::span<const float>(b))}); });
  EXPECT_NE(msg.find("cannot create temporary file"), std::string::npos) << msg;
  EXPECT_EQ(read_file(path), before);
  EXPECT_TRUE(fs::is_directory(tmp));  // not ours: left alone
}

TEST(SafetensorsWriter, MidWriteFailureRemovesTempAndKeepsTarget) {
  TempDir dir;
  const std::string path = dir.file("good.safetensors");
  const std::vector<float> small = {1, 2};
  write_safetensors(path, {tensor_view("a", {2}, std::span<const float>(small))});
  const auto before = read_file(path);

  // Limit the file size so that writing a 1 MB tensor fails with EFBIG part way through.
  const std::vector<float> big(1 << 18, 0.5f);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit lim = old;
  lim.rlim_cur = 64 * 1024;
  if (old.rlim_max != RLIM_INFINITY && old.rlim_max < lim.rlim_cur) lim.rlim_cur = old.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  const std::string msg = error_of([&] { write_safetensors(path, {tensor_view("big", {1 << 18}, std::span<const float>(big))}); });
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);

  EXPECT_NE(msg.find("write failed"), std::string::npos) << msg;
  EXPECT_EQ(read_file(path), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"good.safetensors"});
}

}  // namespace
