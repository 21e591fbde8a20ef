// Tests for src/io/csv: fields quoted only where RFC 4180 needs it, records parsed back with their line
// numbers, and malformed quoting reported with the line.
#include "io/csv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "util/error.h"

using namespace blocklab::io;
using blocklab::Error;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_csv(text, "t.csv");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Csv, QuotesOnlyWhereNeeded) {
  EXPECT_EQ(csv_field("norm_placement=pre+seed=0"), "norm_placement=pre+seed=0");
  EXPECT_EQ(csv_field(""), "");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_field("cr\r"), "\"cr\r\"");
  EXPECT_EQ(csv_line({"step", "loss", ""}), "step,loss,\n");
  EXPECT_EQ(csv_line({"x,y", "1"}), "\"x,y\",1\n");
}

TEST(Csv, NumbersAsPrintfWritesThem) {
  EXPECT_EQ(csv_number(0.1), "0.1");
  EXPECT_EQ(csv_number(0.1f), "0.100000001");
  EXPECT_EQ(csv_number(4.1588830833596715), "4.15888308");
  EXPECT_EQ(csv_number(1e-12), "1e-12");
  EXPECT_EQ(csv_number(12.345, "%.1f"), "12.3");
  EXPECT_EQ(csv_number(std::nan("")), "nan");
  EXPECT_EQ(csv_number(-INFINITY), "-inf");
  // 9 significant digits round-trip every float.
  for (float f : {0.1f, 1.0f / 3, 3.14159265f, 1e-30f, 6.5e30f}) EXPECT_EQ(std::stof(csv_number(f)), f);
}

TEST(Csv, WriterChecksTheFieldCount) {
  CsvWriter csv({"a", "b"});
  csv.row({"1", "x,y"});
  EXPECT_EQ(csv.text(), "a,b\n1,\"x,y\"\n");
  EXPECT_THROW(csv.row({"1"}), Error);
  EXPECT_THROW(csv.row({"1", "2", "3"}), Error);
}

TEST(Csv, ParsesWhatItWrites) {
  const std::vector<std::vector<std::string>> records = {
      {"name", "value", "note"}, {"plain", "1.5", ""}, {"with,comma", "\"quoted\"", "two\nlines"}, {"", "", ""}};
  std::string text;
  for (const auto& r : records) text += csv_line(r);
  const auto parsed = parse_csv(text, "t.csv");
  ASSERT_EQ(parsed.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) EXPECT_EQ(parsed[i].fields, records[i]) << i;
  EXPECT_EQ(parsed[0].line, 1);
  EXPECT_EQ(parsed[2].line, 3);
  EXPECT_EQ(parsed[3].line, 5);  // the field before it spans two lines
}

TEST(Csv, LineEndsEmptyLinesAndTheLastRecord) {
  const auto r = parse_csv("a,b\r\n\r\n1,2\n\n3,4", "t.csv");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].fields, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r[1].fields, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(r[1].line, 3);
  EXPECT_EQ(r[2].fields, (std::vector<std::string>{"3", "4"}));  // no line end after the last record
  EXPECT_EQ(r[2].line, 5);
  EXPECT_EQ(parse_csv("x,\n", "t.csv")[0].fields, (std::vector<std::string>{"x", ""}));
  EXPECT_EQ(parse_csv(" ,a b", "t.csv")[0].fields, (std::vector<std::string>{" ", "a b"}));  // spaces are data
  EXPECT_TRUE(parse_csv("", "t.csv").empty());
  EXPECT_TRUE(parse_csv("\n\n", "t.csv").empty());
}

TEST(Csv, MalformedQuotingNamesTheLine) {
  EXPECT_NE(error_of("a,b\n1,\"open\n").find("t.csv:2: a quoted field is never closed"), std::string::npos)
      << error_of("a,b\n1,\"open\n");
  EXPECT_NE(error_of("a,b\n\"x\"y,1\n").find("t.csv:2: text after the closing quote"), std::string::npos)
      << error_of("a,b\n\"x\"y,1\n");
  EXPECT_EQ(error_of("a,\"b\"\r\n"), "");
}

TEST(Csv, ReadsAFile) {
  const fs::path dir = fs::temp_directory_path() / ("blocklab_csv_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "t.csv") << "step,loss\n1,4.1\n";
  const auto r = read_csv((dir / "t.csv").string());
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].fields[1], "4.1");
  try {
    read_csv((dir / "missing.csv").string());
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.csv: cannot read"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}
