#include "io/metrics.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace blocklab::io {

MetricsWriter::MetricsWriter(const std::string& path, std::vector<std::string> columns)
    : path_(path), columns_(columns.size()) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) throw Error(path + ": cannot write: " + std::strerror(errno));
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
