#include "io/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "io/atomic_file.h"
#include "util/error.h"

namespace blocklab::io {

MetricsWriter::MetricsWriter(const std::string& path, std::vector<std::string> columns, bool append)
    : path_(path), columns_(columns.size()) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr) throw Error(path + ": cannot write: " + std::strerror(errno));
  if (append) return;
  std::string header;
  for (size_t i = 0; i < columns.size(); ++i) header += (i ? "," : "") + columns[i];
  std::fprintf(file_, "%s\n", header.c_str());
  std::fflush(file_);
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::row(long step, const std::vector<double>& values) {
  if (values.size() + 1 != columns_) throw Error(path_ + ": metrics row has the wrong number of values");
  std::fprintf(file_, "%ld", step);
  for (double v : values) std::fprintf(file_, ",%.9g", v);
  std::fputc('\n', file_);
  if (std::fflush(file_) != 0) throw Error(path_ + ": write failed: " + std::strerror(errno));
}

void MetricsWriter::sync() {
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0)
    throw Error(path_ + ": write failed: " + std::strerror(errno));
}

void keep_metrics_through(const std::string& path, const std::vector<std::string>& columns, long step) {
  std::string header;
  for (size_t i = 0; i < columns.size(); ++i) header += (i ? "," : "") + columns[i];
  std::string kept = header + "\n";
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    size_t pos = text.find('\n');
    if (pos == std::string::npos || text.compare(0, pos, header) != 0)
      throw Error(path + ": header is not '" + header + "'; cannot resume this metrics file");
    long line_no = 1;
    for (size_t start = pos + 1; start < text.size(); start = pos + 1) {
      ++line_no;
      pos = text.find('\n', start);
      if (pos == std::string::npos) break;  // unfinished last line
      const std::string line = text.substr(start, pos - start);
      if (line.empty()) continue;
      char* end = nullptr;
      const long row_step = std::strtol(line.c_str(), &end, 10);
      if (end == line.c_str() || (*end != ',' && *end != '\0'))
        throw Error(path + ":" + std::to_string(line_no) + ": a row does not start with a step number");
      if (row_step <= step) kept += line + "\n";
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
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read");
  MetricsTable table;
  std::string line;
  if (!std::getline(in, line)) throw Error(path + ": empty metrics file");
  std::stringstream header(line);
  for (std::string cell; std::getline(header, cell, ',');) table.columns.push_back(cell);
  long line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    std::vector<double> row;
    std::stringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) {
      char* end = nullptr;
      const double v = std::strtod(cell.c_str(), &end);
      if (cell.empty() || *end != '\0') throw Error(path + ":" + std::to_string(line_no) + ": not a number: '" + cell + "'");
      row.push_back(v);
    }
    if (row.size() != table.columns.size())
      throw Error(path + ":" + std::to_string(line_no) + ": expected " + std::to_string(table.columns.size()) + " values");
    table.rows.push_back(std::move(row));
  }
  return table;
}

}  // namespace blocklab::io
