// Tests for src/io/tfevents: CRC-32C against published check values, the protobuf varint, TFRecord
// framing, Event messages byte for byte against the wire format, and cutting a run's event files on resume.
#include "io/tfevents.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "io/read_file.h"
#include "util/error.h"

using namespace blocklab::io;
using blocklab::Error;
namespace fs = std::filesystem;

namespace {

std::string bytes(std::initializer_list<int> list) {
  std::string s;
  for (int b : list) s.push_back(static_cast<char>(b));
  return s;
}

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

uint32_t unmask(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("blocklab_tfevents_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write_bytes(const fs::path& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

}  // namespace

// RFC 3720 (iSCSI) appendix B.4 and the usual "123456789" check value.
TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) up.push_back(static_cast<char>(i)), down.push_back(static_cast<char>(31 - i));
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
}

TEST(Crc32c, ContinuesAcrossPieces) {
  const std::string text = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= text.size(); cut += 7)
    EXPECT_EQ(crc32c(text.substr(cut), crc32c(text.substr(0, cut))), crc32c(text));
}

TEST(Crc32c, MaskIsTheTfRecordRotation) {
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x80000000u}) {
    EXPECT_EQ(mask_crc(crc), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
    EXPECT_EQ(unmask(mask_crc(crc)), crc);
  }
  EXPECT_NE(mask_crc(0xE3069283u), 0xE3069283u);
}

// The examples of the protocol-buffer encoding guide, and the ends of the range.
TEST(Varint, Encoding) {
  auto enc = [](uint64_t v) {
    std::string s;
    append_varint(s, v);
    return s;
  };
  EXPECT_EQ(enc(0), bytes({0x00}));
  EXPECT_EQ(enc(1), bytes({0x01}));
  EXPECT_EQ(enc(127), bytes({0x7f}));
  EXPECT_EQ(enc(128), bytes({0x80, 0x01}));
  EXPECT_EQ(enc(150), bytes({0x96, 0x01}));
  EXPECT_EQ(enc(300), bytes({0xac, 0x02}));
  EXPECT_EQ(enc(UINT64_MAX), bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{300}, uint64_t{1} << 35, UINT64_MAX - 1, UINT64_MAX}) {
    const std::string s = enc(v);
    size_t pos = 0;
    EXPECT_EQ(read_varint(s, pos), v);
    EXPECT_EQ(pos, s.size());
  }
}

TEST(Varint, RejectsTruncatedAndOverlong) {
  size_t pos = 0;
  EXPECT_THROW(read_varint(bytes({0x80, 0x80}), pos), Error);
  pos = 0;
  EXPECT_THROW(read_varint(bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}), pos), Error);
  pos = 0;
  EXPECT_THROW(read_varint(std::string(11, '\x80'), pos), Error);
}

TEST(TfRecord, Framing) {
  const std::string payload = "hello, tensorboard";
  const std::string r = tfrecord(payload);
  ASSERT_EQ(r.size(), 8 + 4 + payload.size() + 4);
  // little-endian uint64 length
  EXPECT_EQ(static_cast<unsigned char>(r[0]), payload.size());
  for (int i = 1; i < 8; ++i) EXPECT_EQ(r[i], '\0');
  EXPECT_EQ(unmask(le32(r, 8)), crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, payload.size()), payload);
  EXPECT_EQ(unmask(le32(r, 12 + payload.size())), crc32c(payload));
  // an empty payload is a 16-byte record
  EXPECT_EQ(tfrecord("").size(), 16u);
  EXPECT_EQ(tfrecord("").substr(0, 8), std::string(8, '\0'));
}

TEST(TfRecord, ReadsBackAndReportsDamage) {
  TempDir dir;
  const fs::path file = dir.path / "records";
  const std::string a = "first", b(300, 'x'), c = "";
  const std::string all = tfrecord(a) + tfrecord(b) + tfrecord(c);
  write_bytes(file, all);
  TfRecords rs = read_tfrecords(file.string());
  EXPECT_TRUE(rs.complete);
  EXPECT_EQ(rs.error, "");
  ASSERT_EQ(rs.payloads.size(), 3u);
  EXPECT_EQ(rs.payloads[0], a);
  EXPECT_EQ(rs.payloads[1], b);
  EXPECT_EQ(rs.payloads[2], c);

  // every single-byte change in the second record is caught, by the length or the data CRC
  const size_t second = tfrecord(a).size(), second_end = second + tfrecord(b).size();
  for (size_t at = second; at < second_end; at += 13) {
    std::string damaged = all;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x20);
    write_bytes(file, damaged);
    rs = read_tfrecords(file.string());
    EXPECT_NE(rs.error, "") << "byte " << at;
    EXPECT_EQ(rs.payloads.size(), 1u) << "byte " << at;
  }
  // a file cut inside the last record: the records before it, marked incomplete
  write_bytes(file, all.substr(0, all.size() - 3));
  rs = read_tfrecords(file.string());
  EXPECT_EQ(rs.error, "");
  EXPECT_FALSE(rs.complete);
  EXPECT_EQ(rs.payloads.size(), 2u);
}

// Event messages against the wire format written out by hand from event.proto / summary.proto.
TEST(Event, ScalarsWireFormat) {
  const std::string e = event::scalars(0.0, 5, {{"a", 1.0}});
  const std::string expect = bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0,  // wall_time = 0.0 (field 1, fixed64)
                                    0x10, 0x05,                     // step = 5 (field 2, varint)
                                    0x2a, 0x0a,                     // summary (field 5), 10 bytes
                                    0x0a, 0x08,                     // Summary.value (field 1), 8 bytes
                                    0x0a, 0x01, 'a',                // Value.tag = "a"
                                    0x15, 0x00, 0x00, 0x80, 0x3f});  // Value.simple_value = 1.0f (field 2, fixed32)
  EXPECT_EQ(e, expect);
  EXPECT_EQ(event::step_of(e), 5);
}

TEST(Event, FileVersionTextAndSessionLog) {
  const std::string v = event::file_version(1.5);
  EXPECT_EQ(v.substr(0, 9), bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f}));  // 1.5 as a little-endian double
  EXPECT_EQ(v.substr(9), bytes({0x1a, 13}) + "brain.Event:2");
  EXPECT_EQ(event::step_of(v), 0);

  const std::string s = event::session_start(0.0, 7);
  EXPECT_EQ(s.substr(9), bytes({0x10, 0x07, 0x32, 0x02, 0x08, 0x01}));  // step 7, session_log{status: START}
  EXPECT_EQ(event::step_of(s), 7);

  const std::string t = event::text(0.0, 3, "config", "x");
  EXPECT_EQ(event::step_of(t), 3);
  EXPECT_NE(t.find(bytes({0x08, 0x07})), std::string::npos);  // dtype DT_STRING
  EXPECT_NE(t.find(bytes({0x0a, 0x04}) + "text"), std::string::npos);  // plugin_name "text"
  EXPECT_NE(t.find(bytes({0x42, 0x01}) + "x"), std::string::npos);  // string_val "x"

  EXPECT_EQ(event::step_of(event::scalars(0.0, int64_t{1} << 40, {})), int64_t{1} << 40);
  EXPECT_THROW(event::step_of(bytes({0x12, 0x05, 0x01})), Error);  // a field longer than the message
}

TEST(EventFile, WriterKeepsItsSegmentAndResumeCutsEarlierOnes) {
  TempDir dir;
  fs::path first;
  {
    EventFileWriter w(dir.path, 0);
    first = w.path();
    EXPECT_EQ(first.filename().string().rfind("events.out.tfevents.", 0), 0u);
    w.text(0, "config", "{}");
    for (int step = 1; step <= 8; ++step) w.scalars(step, {{"loss", 1.0 / step}});
  }
  // crash inside a record after step 8
  std::string data = read_file(first.string());
  write_bytes(first, data + tfrecord(event::scalars(0.0, 9, {{"loss", 0.1}})).substr(0, 10));
  keep_events_through(dir.path, 5);
  TfRecords rs = read_tfrecords(first.string());
  EXPECT_TRUE(rs.complete);
  ASSERT_EQ(rs.payloads.size(), 1u + 1u + 5u);  // file_version, config, steps 1..5
  EXPECT_EQ(event::step_of(rs.payloads.back()), 5);

  fs::path second;
  {
    EventFileWriter w(dir.path, 5);
    second = w.path();
    EXPECT_GT(second.filename().string(), first.filename().string());  // read after the first file
    w.scalars(5, {{"loss", 9.0}});  // not this segment's: dropped
    w.scalars(6, {{"loss", 0.5}});
    w.text(5, "config", "{}");     // dropped too
  }
  rs = read_tfrecords(second.string());
  ASSERT_EQ(rs.payloads.size(), 3u);  // file_version, SessionLog START at 6, step 6
  EXPECT_EQ(event::step_of(rs.payloads[1]), 6);
  EXPECT_EQ(event::step_of(rs.payloads[2]), 6);

  // a file that needs no cut is left as it was, byte for byte
  const std::string before = read_file(first.string());
  const auto time = fs::last_write_time(first);
  keep_events_through(dir.path, 6);
  EXPECT_EQ(read_file(first.string()), before);
  EXPECT_EQ(fs::last_write_time(first), time);
  EXPECT_EQ(list_event_files(dir.path), (std::vector<fs::path>{first, second}));
}
