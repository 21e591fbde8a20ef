#pragma once
// CSV as every blocklab file writes and reads it (metrics.csv, summary.csv, gradnorm.csv, residual*.csv,
// score tables): a header record, then one record per row; fields separated by ',', records ended by
// '\n'. A field is quoted per RFC 4180 only where needed (it holds a comma, a double quote, CR or LF;
// quotes inside are doubled), so files of names and numbers carry no quotes at all. Numbers are written
// with printf formats, by default "%.9g": enough digits to round-trip a float exactly, so two files are
// byte-identical exactly when their numbers are.
#include <string>
#include <string_view>
#include <vector>

namespace blocklab::io {

// One field, quoted when it needs to be.
std::string csv_field(std::string_view text);
// One record: the fields, quoted as needed, joined by ',', ending in '\n'.
std::string csv_line(const std::vector<std::string>& fields);
// The same record appended to `out` (a buffer reused from record to record).
void append_csv_line(std::string& out, const std::vector<std::string>& fields);
// A number as a field: printf `format` ("%.9g" by default, "nan"/"inf" as printf writes them).
std::string csv_number(double value, const char* format = "%.9g");

// A whole CSV text, built record by record.
class CsvWriter {
 public:
  explicit CsvWriter(const std::vector<std::string>& header);
  // Throws Error when the record does not have one field per header column.
  void row(const std::vector<std::string>& fields);
  const std::string& text() const { return text_; }

 private:
  size_t columns_;
  std::string text_;
};

struct CsvRecord {
  long line = 0;                    // where the record starts in the text (1-based), for messages
  std::vector<std::string> fields;  // unquoted
};

// Parses CSV text: records end in LF or CRLF (the last one may end without either), quoted fields may
// hold ',', '"' (doubled) and line breaks. Lines with nothing on them are skipped. Throws Error
// "<where>:<line>: ..." for a quote that is never closed or text after a closing quote.
std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& where);
// The same for a file. Throws Error "<path>: cannot read" when it cannot be opened.
std::vector<CsvRecord> read_csv(const std::string& path);

}  // namespace blocklab::io
