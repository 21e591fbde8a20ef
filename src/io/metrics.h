#pragma once
// Per-step metrics as CSV, one row per step, flushed as written so that a crash keeps every finished
// step. Values are printed with 9 significant digits: enough to round-trip a float exactly, so two
// runs' files are byte-identical exactly when their numbers are.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace blocklab::io {

class MetricsWriter {
 public:
  // Creates (truncates) path and writes the header. Throws Error when the file cannot be written.
  // With append, adds rows to an existing file instead (see keep_metrics_through for resuming).
  MetricsWriter(const std::string& path, std::vector<std::string> columns, bool append = false);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // The first column is the integer step; the rest are numbers.
  void row(long step, const std::vector<double>& values);
  // The same with values that may be absent (a value not measured at this step): an empty cell.
  void row_partial(long step, const std::vector<std::optional<double>>& values);
  // Makes every row written so far durable (fflush + fsync), e.g. before a checkpoint that counts on them.
  void sync();

 private:
  std::string path_;
  size_t columns_;
  std::FILE* file_ = nullptr;
  std::vector<std::string> fields_;  // the row being written, reused
  std::string line_;
};

// Reads a metrics CSV back as named columns (header + numeric rows); an empty cell (a value not measured at
// that step) reads as NaN. Throws Error on malformed input.
struct MetricsTable {
  std::vector<std::string> columns;
  std::vector<std::vector<double>> rows;
  int column(const std::string& name) const;  // -1 when absent
};
MetricsTable read_metrics(const std::string& path);

// For resuming at `step`: rewrites path (atomically) with its header and only the rows of steps
// 1..step, dropping later rows and an unfinished last line, so that appending continues the file as
// if the run had never stopped. A missing file is created with just the header. Throws Error when the
// header is not `columns` or a row does not start with a step number.
void keep_metrics_through(const std::string& path, const std::vector<std::string>& columns, long step);

}  // namespace blocklab::io
