#pragma once
// TensorBoard event files: RUN/events.out.tfevents.<seconds>.<host>, read by TensorBoard (and by its
// EventAccumulator, tbparse, TensorFlow's summary_iterator).
//
// The file is a sequence of TFRecords:
//   uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | payload | uint32 masked_crc32c(payload)
// and each payload is one serialized `Event` protocol buffer (tensorflow/core/util/event.proto). The few
// messages and fields written here are encoded by hand (a varint, a fixed32 float, a fixed64 double and
// length-delimited bytes are all the wire format needs), so that blocklab needs neither protoc at build time
// nor libprotobuf at run time:
//   Event        { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//                  SessionLog session_log = 6; }
//   Summary      { repeated Value value = 1; }
//   Summary.Value{ string tag = 1; float simple_value = 2; TensorProto tensor = 8; SummaryMetadata metadata = 9; }
//   SummaryMetadata { PluginData plugin_data = 1; }   PluginData { string plugin_name = 1; }
//   TensorProto  { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2; repeated bytes string_val = 8; }
//   SessionLog   { SessionStatus status = 1 (START = 1); }
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace blocklab::io {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), continuing from crc (0 to start):
// crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view data, uint32_t crc = 0);
// The TFRecord mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc(uint32_t crc);
inline uint32_t masked_crc32c(std::string_view data) { return mask_crc(crc32c(data)); }

// Protocol-buffer wire format pieces.
void append_varint(std::string& out, uint64_t value);
// Reads a varint at data[pos], advancing pos; throws Error when it runs past the end or exceeds 10 bytes.
uint64_t read_varint(std::string_view data, size_t& pos);

// One framed record around payload.
std::string tfrecord(std::string_view payload);

// The records of a TFRecord file. `complete` is false when the file ends inside a record (a crash while
// writing); `error` is set (and reading stopped) at the first record whose length or data CRC does not check.
struct TfRecords {
  std::vector<std::string> payloads;
  bool complete = true;
  std::string error;
};
TfRecords read_tfrecords(const std::string& path);

// Serialized Event messages.
namespace event {
std::string file_version(double wall_time);  // "brain.Event:2", the first event of every file
std::string scalars(double wall_time, int64_t step, const std::vector<std::pair<std::string, double>>& values);
// A text summary (TensorBoard's text plugin renders it as Markdown).
std::string text(double wall_time, int64_t step, const std::string& tag, const std::string& text);
// SessionLog START at step: a reader that already holds later points from an earlier segment drops them.
std::string session_start(double wall_time, int64_t step);
// The step field of a serialized Event (0 when absent); throws Error when it is not a valid message.
int64_t step_of(std::string_view event);
}  // namespace event

// The event files of a run directory (names containing ".tfevents."), in name order.
std::vector<std::filesystem::path> list_event_files(const std::filesystem::path& dir);

// For resuming at `step`: rewrites (atomically) every event file of dir that holds an event after `step`,
// or ends in an unfinished or damaged record, keeping only its intact events of steps <= step. Files that
// need no change are left untouched.
void keep_events_through(const std::filesystem::path& dir, int64_t step);

// Writes one run segment's event file. A new run (start_step 0) takes every step >= 0; a resumed run
// (start_step = the checkpoint's step) only steps > start_step, which the files of the earlier segments
// (cut by keep_events_through) do not hold, so that no step appears twice across the directory.
class EventFileWriter {
 public:
  // Creates dir/events.out.tfevents.<seconds>.<host> (a name after every event file already there) and
  // writes the file_version event; a resumed run also writes SessionLog START at start_step + 1.
  // Throws Error when the file cannot be written.
  EventFileWriter(const std::filesystem::path& dir, int64_t start_step);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Scalars of one step as one event; ignored when the step is not this segment's (see above).
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // A text summary; ignored, like scalars, when the step is not this segment's.
  void text(int64_t step, const std::string& tag, const std::string& text);
  // Makes every event so far durable (fflush + fsync), e.g. before a checkpoint.
  void sync();
  const std::filesystem::path& path() const { return path_; }
  int64_t start_step() const { return start_step_; }
  bool takes(int64_t step) const { return step >= first_step(); }
  // The first step this segment writes: 0 for a new run, start_step + 1 for a resumed one.
  int64_t first_step() const { return start_step_ == 0 ? 0 : start_step_ + 1; }

 private:
  void write(const std::string& event);
  std::filesystem::path path_;
  int64_t start_step_;
  std::FILE* file_ = nullptr;
};

}  // namespace blocklab::io
