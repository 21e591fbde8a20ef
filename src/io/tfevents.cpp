#include "io/tfevents.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "io/atomic_file.h"
#include "io/read_file.h"
#include "util/error.h"

namespace blocklab::io {

namespace fs = std::filesystem;

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

void append_fixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void append_fixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t load_fixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
uint64_t load_fixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

void append_key(std::string& out, uint32_t field, Wire wire) { append_varint(out, (uint64_t{field} << 3) | wire); }
void append_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  append_key(out, field, kLength);
  append_varint(out, bytes.size());
  out.append(bytes);
}
void append_double(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  append_key(out, field, kFixed64);
  append_fixed64(out, bits);
}
void append_float(std::string& out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  append_key(out, field, kFixed32);
  append_fixed32(out, bits);
}
void append_int64(std::string& out, uint32_t field, int64_t v) {
  append_key(out, field, kVarint);
  append_varint(out, static_cast<uint64_t>(v));  // negative int64: ten bytes, as protobuf encodes them
}

// Event fields
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 6;

std::string event_head(double wall_time, int64_t step) {
  std::string e;
  append_double(e, kWallTime, wall_time);
  if (step != 0) append_int64(e, kStep, step);
  return e;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string host = buf;
  std::replace(host.begin(), host.end(), '/', '_');
  return host;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The <seconds> of events.out.tfevents.<seconds>.<host>; -1 when the name has another form.
long long name_seconds(const std::string& name) {
  const std::string prefix = "events.out.tfevents.";
  if (name.rfind(prefix, 0) != 0) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(name.c_str() + prefix.size(), &end, 10);
  return end != name.c_str() + prefix.size() ? v : -1;
}

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  crc = ~crc;
  for (const char ch : data) crc = kCrc32cTable[(crc ^ static_cast<unsigned char>(ch)) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

uint64_t read_varint(std::string_view data, size_t& pos) {
  uint64_t value = 0;
  for (int i = 0; i < 10; ++i) {
    if (pos >= data.size()) throw Error("protobuf: varint runs past the end");
    const auto byte = static_cast<unsigned char>(data[pos++]);
    if (i == 9 && byte > 1) throw Error("protobuf: varint exceeds 64 bits");
    value |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) return value;
  }
  throw Error("protobuf: varint longer than 10 bytes");
}

std::string tfrecord(std::string_view payload) {
  std::string r;
  r.reserve(payload.size() + 16);
  append_fixed64(r, payload.size());
  append_fixed32(r, masked_crc32c(std::string_view(r.data(), 8)));
  r.append(payload);
  append_fixed32(r, masked_crc32c(payload));
  return r;
}

TfRecords read_tfrecords(const std::string& path) {
  const std::string data = read_file(path);
  TfRecords out;
  size_t pos = 0;
  while (pos < data.size()) {
    if (data.size() - pos < 12) {
      out.complete = false;
      break;
    }
    const char* head = data.data() + pos;
    if (load_fixed32(head + 8) != masked_crc32c(std::string_view(head, 8))) {
      out.error = path + ": record at byte " + std::to_string(pos) + ": length CRC does not match";
      break;
    }
    const uint64_t length = load_fixed64(head);
    if (length > data.size() - pos - 12 || data.size() - pos - 12 - length < 4) {
      out.complete = false;
      break;
    }
    const std::string_view payload(head + 12, length);
    if (load_fixed32(head + 12 + length) != masked_crc32c(payload)) {
      out.error = path + ": record at byte " + std::to_string(pos) + ": data CRC does not match";
      break;
    }
    out.payloads.emplace_back(payload);
    pos += 16 + length;
  }
  return out;
}

namespace event {

std::string file_version(double wall_time) {
  std::string e = event_head(wall_time, 0);
  append_bytes(e, kFileVersion, "brain.Event:2");
  return e;
}

std::string scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary, value;
  for (const auto& [tag, v] : values) {
    value.clear();
    append_bytes(value, 1, tag);                     // Summary.Value.tag
    append_float(value, 2, static_cast<float>(v));   // Summary.Value.simple_value
    append_bytes(summary, 1, value);                 // Summary.value
  }
  std::string e = event_head(wall_time, step);
  append_bytes(e, kSummary, summary);
  return e;
}

std::string text(double wall_time, int64_t step, const std::string& tag, const std::string& text) {
  std::string tensor, plugin, metadata, value, summary;
  append_int64(tensor, 1, 7);       // TensorProto.dtype = DT_STRING
  append_bytes(tensor, 2, "");      // TensorProto.tensor_shape: no dimensions (a scalar)
  append_bytes(tensor, 8, text);    // TensorProto.string_val
  append_bytes(plugin, 1, "text");  // PluginData.plugin_name
  append_bytes(metadata, 1, plugin);  // SummaryMetadata.plugin_data
  append_bytes(value, 1, tag);
  append_bytes(value, 8, tensor);    // Summary.Value.tensor
  append_bytes(value, 9, metadata);  // Summary.Value.metadata
  append_bytes(summary, 1, value);
  std::string e = event_head(wall_time, step);
  append_bytes(e, kSummary, summary);
  return e;
}

std::string session_start(double wall_time, int64_t step) {
  std::string log;
  append_int64(log, 1, 1);  // SessionLog.status = START
  std::string e = event_head(wall_time, step);
  append_bytes(e, kSessionLog, log);
  return e;
}

int64_t step_of(std::string_view e) {
  int64_t step = 0;
  size_t pos = 0;
  while (pos < e.size()) {
    const uint64_t key = read_varint(e, pos);
    const uint64_t field = key >> 3;
    switch (key & 7) {
      case kVarint: {
        const uint64_t v = read_varint(e, pos);
        if (field == kStep) step = static_cast<int64_t>(v);
        break;
      }
      case kFixed64:
        if (e.size() - pos < 8) throw Error("protobuf: fixed64 runs past the end");
        pos += 8;
        break;
      case kFixed32:
        if (e.size() - pos < 4) throw Error("protobuf: fixed32 runs past the end");
        pos += 4;
        break;
      case kLength: {
        const uint64_t n = read_varint(e, pos);
        if (n > e.size() - pos) throw Error("protobuf: field runs past the end");
        pos += n;
        break;
      }
      default:
        throw Error("protobuf: unsupported wire type " + std::to_string(key & 7));
    }
    if (field == 0) throw Error("protobuf: field number 0");
  }
  return step;
}

}  // namespace event

std::vector<fs::path> list_event_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && name.find(".tfevents.") != std::string::npos &&
        name.find(".tmp.") == std::string::npos)
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void keep_events_through(const fs::path& dir, int64_t step) {
  for (const fs::path& file : list_event_files(dir)) {
    const TfRecords records = read_tfrecords(file.string());
    bool changed = !records.complete || !records.error.empty();
    std::string kept;
    for (const std::string& payload : records.payloads) {
      int64_t s;
      try {
        s = event::step_of(payload);
      } catch (const Error&) {
        changed = true;  // not an Event: dropped with everything after it
        break;
      }
      if (s > step) {
        changed = true;
        continue;
      }
      kept += tfrecord(payload);
    }
    if (changed) write_file_atomic(file.string(), kept);
  }
}

EventFileWriter::EventFileWriter(const fs::path& dir, int64_t start_step) : start_step_(start_step) {
  // A name after every event file already there: TensorBoard reads a directory's files in name order.
  long long seconds = static_cast<long long>(now_seconds());
  for (const fs::path& f : list_event_files(dir))
    seconds = std::max(seconds, name_seconds(f.filename().string()) + 1);
  path_ = dir / ("events.out.tfevents." + std::to_string(seconds) + "." + host_name());
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) throw Error(path_.string() + ": cannot write: " + std::strerror(errno));
  const double t = now_seconds();
  write(event::file_version(t));
  if (start_step_ > 0) write(event::session_start(t, first_step()));
}

EventFileWriter::~EventFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventFileWriter::write(const std::string& e) {
  const std::string record = tfrecord(e);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    throw Error(path_.string() + ": write failed: " + std::strerror(errno));
}

void EventFileWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  if (takes(step) && !values.empty()) write(event::scalars(now_seconds(), step, values));
}

void EventFileWriter::text(int64_t step, const std::string& tag, const std::string& text) {
  if (takes(step)) write(event::text(now_seconds(), step, tag, text));
}

void EventFileWriter::sync() {
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    throw Error(path_.string() + ": sync failed: " + std::strerror(errno));
}

}  // namespace blocklab::io
