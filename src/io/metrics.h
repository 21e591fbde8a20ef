#pragma once
// Per-step metrics as CSV, one row per step, flushed as written so that a crash keeps every finished
// step. Values are printed with 9 significant digits: enough to round-trip a float exactly, so two
// runs' files are byte-identical exactly when their numbers are.
#include <cstdio>
#include <string>
#include <vector>

namespace blocklab::io {

class MetricsWriter {
 public:
  // Creates (truncates) path and writes the header. Throws Error when the file cannot be written.
  MetricsWriter(const std::string& path, std::vector<std::string> columns);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // The first column is the integer step; the rest are numbers.
  void row(long step, const std::vector<double>& values);

 private:
  std::string path_;
  size_t columns_;
  std::FILE* file_ = nullptr;
};

// Reads a metrics CSV back as named columns (header + numeric rows). Throws Error on malformed input.
struct MetricsTable {
  std::vector<std::string> columns;
  std::vector<std::vector<double>> rows;
  int column(const std::string& name) const;  // -1 when absent
};
MetricsTable read_metrics(const std::string& path);

}  // namespace blocklab::io
