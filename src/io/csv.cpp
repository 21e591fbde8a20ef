#include "io/csv.h"

#include <cstdio>

#include "io/read_file.h"
#include "util/error.h"

namespace blocklab::io {

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

void append_csv_line(std::string& out, const std::vector<std::string>& fields) {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ',';
    if (fields[i].find_first_of(",\"\r\n") == std::string::npos)
      out += fields[i];
    else
      out += csv_field(fields[i]);
  }
  out += '\n';
}

std::string csv_line(const std::vector<std::string>& fields) {
  std::string line;
  append_csv_line(line, fields);
  return line;
}

std::string csv_number(double value, const char* format) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

CsvWriter::CsvWriter(const std::vector<std::string>& header) : columns_(header.size()), text_(csv_line(header)) {}

void CsvWriter::row(const std::vector<std::string>& fields) {
  if (fields.size() != columns_)
    throw Error("CSV record with " + std::to_string(fields.size()) + " fields under a header of " +
                std::to_string(columns_));
  text_ += csv_line(fields);
}

std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& where) {
  std::vector<CsvRecord> records;
  long line = 1;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    // A line with nothing on it is not a record.
    if (text[i] == '\n' || (text[i] == '\r' && i + 1 < n && text[i + 1] == '\n')) {
      i += text[i] == '\r' ? 2 : 1;
      ++line;
      continue;
    }
    CsvRecord record;
    record.line = line;
    for (;;) {  // one field per pass
      std::string field;
      if (i < n && text[i] == '"') {
        const long opened = line;
        ++i;
        for (;;) {
          if (i >= n) throw Error(where + ":" + std::to_string(opened) + ": a quoted field is never closed");
          if (text[i] == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (text[i] == '\n') ++line;
          field += text[i++];
        }
        if (i < n && text[i] != ',' && text[i] != '\n' && !(text[i] == '\r' && i + 1 < n && text[i + 1] == '\n'))
          throw Error(where + ":" + std::to_string(line) + ": text after the closing quote of a field");
      } else {
        while (i < n && text[i] != ',' && text[i] != '\n' && !(text[i] == '\r' && i + 1 < n && text[i + 1] == '\n'))
          field += text[i++];
      }
      record.fields.push_back(std::move(field));
      if (i < n && text[i] == ',') {
        ++i;
        continue;
      }
      break;  // end of the record: a line end or the end of the text
    }
    records.push_back(std::move(record));
    if (i < n) {
      i += text[i] == '\r' ? 2 : 1;
      ++line;
    }
  }
  return records;
}

std::vector<CsvRecord> read_csv(const std::string& path) {
  return parse_csv(read_file(path), path);
}

}  // namespace blocklab::io
