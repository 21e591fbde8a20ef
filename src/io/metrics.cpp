#include "io/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "io/atomic_file.h"
#include "io/csv.h"
#include "util/error.h"

namespace blocklab::io {

MetricsWriter::MetricsWriter(const std::string& path, std::vector<std::string> columns, bool append)
    : path_(path), columns_(columns.size()) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr) throw Error(path + ": cannot write: " + std::strerror(errno));
  if (append) return;
  std::fputs(csv_line(columns).c_str(), file_);
  std::fflush(file_);
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::row(long step, const std::vector<double>& values) {
  if (values.size() + 1 != columns_) throw Error(path_ + ": metrics row has the wrong number of values");
  fields_.resize(columns_);
  fields_[0] = std::to_string(step);
  for (size_t i = 0; i < values.size(); ++i) fields_[i + 1] = csv_number(values[i]);
  line_.clear();
  append_csv_line(line_, fields_);
  std::fputs(line_.c_str(), file_);
  if (std::fflush(file_) != 0) throw Error(path_ + ": write failed: " + std::strerror(errno));
}

void MetricsWriter::row_partial(long step, const std::vector<std::optional<double>>& values) {
  if (values.size() + 1 != columns_) throw Error(path_ + ": metrics row has the wrong number of values");
  fields_.resize(columns_);
  fields_[0] = std::to_string(step);
  for (size_t i = 0; i < values.size(); ++i) fields_[i + 1] = values[i] ? csv_number(*values[i]) : std::string();
  line_.clear();
  append_csv_line(line_, fields_);
  std::fputs(line_.c_str(), file_);
  if (std::fflush(file_) != 0) throw Error(path_ + ": write failed: " + std::strerror(errno));
}

void MetricsWriter::sync() {
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    throw Error(path_ + ": write failed: " + std::strerror(errno));
}

void keep_metrics_through(const std::string& path, const std::vector<std::string>& columns, long step) {
  const std::string header = csv_line(columns);
  std::string kept = header;
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const size_t complete = text.rfind('\n');  // an unfinished last line is dropped
    const std::vector<CsvRecord> records =
        parse_csv(std::string_view(text).substr(0, complete == std::string::npos ? 0 : complete + 1), path);
    if (records.empty() || records.front().line != 1 || records.front().fields != columns)
      throw Error(path + ": header is not '" + header.substr(0, header.size() - 1) + "'; cannot resume this metrics file");
    for (size_t r = 1; r < records.size(); ++r) {
      const std::string& first = records[r].fields.front();
      char* end = nullptr;
      const long row_step = std::strtol(first.c_str(), &end, 10);
      if (end == first.c_str() || *end != '\0')
        throw Error(path + ":" + std::to_string(records[r].line) + ": a row does not start with a step number");
      if (row_step <= step) kept += csv_line(records[r].fields);
    }
  }
  write_file_atomic(path, kept);
}

int MetricsTable::column(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return static_cast<int>(i);
  return -1;
}

MetricsTable read_metrics(const std::string& path) {
  const std::vector<CsvRecord> records = read_csv(path);
  if (records.empty()) throw Error(path + ": empty metrics file");
  MetricsTable table;
  table.columns = records.front().fields;
  for (size_t r = 1; r < records.size(); ++r) {
    const std::string where = path + ":" + std::to_string(records[r].line);
    std::vector<double> row;
    for (const std::string& cell : records[r].fields) {
      if (cell.empty() && !row.empty()) {  // not measured at this step (the step column is never empty)
        row.push_back(std::nan(""));
        continue;
      }
      char* end = nullptr;
      const double v = std::strtod(cell.c_str(), &end);
      if (cell.empty() || *end != '\0') throw Error(where + ": not a number: '" + cell + "'");
      row.push_back(v);
    }
    if (row.size() != table.columns.size())
      throw Error(where + ": expected " + std::to_string(table.columns.size()) + " values");
    table.rows.push_back(std::move(row));
  }
  return table;
}

}  // namespace blocklab::io
