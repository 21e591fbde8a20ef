#include "experiments/standardize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "io/csv.h"
#include "util/error.h"

namespace blocklab::experiments {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::string number(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  // "-0.000" -> "0.000"
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

}  // namespace

ScoreTable source_score_table() {
  ScoreTable t;
  t.row_names = {"A", "B", "C"};
  t.column_names = {"Korean", "English", "Math"};
  t.values = {{90, 80, 70}, {60, 50, 40}, {90, 50, 70}};
  return t;
}

ScoreTable read_score_csv(const std::string& path) {
  ScoreTable t;
  bool header = true;
  for (io::CsvRecord& record : io::read_csv(path)) {
    std::vector<std::string>& cells = record.fields;
    for (auto& c : cells) c = trim(c);
    if (cells.size() == 1 && cells[0].empty()) continue;  // a blank line
    const std::string where = path + ":" + std::to_string(record.line) + ": ";
    if (header) {
      if (cells.size() < 3) throw Error(where + "the header needs a name column and at least 2 score columns");
      t.corner = cells[0];
      t.column_names.assign(cells.begin() + 1, cells.end());
      header = false;
      continue;
    }
    if (cells.size() != t.column_names.size() + 1)
      throw Error(where + "expected " + std::to_string(t.column_names.size() + 1) + " cells, got " +
                  std::to_string(cells.size()));
    std::vector<double> row;
    for (size_t i = 1; i < cells.size(); ++i) {
      char* end = nullptr;
      const double v = std::strtod(cells[i].c_str(), &end);
      if (cells[i].empty() || *end != '\0' || !std::isfinite(v))
        throw Error(where + "'" + cells[i] + "' is not a number");
      row.push_back(v);
    }
    if (std::find(t.row_names.begin(), t.row_names.end(), cells[0]) != t.row_names.end())
      throw Error(where + "row name '" + cells[0] + "' appears twice");
    t.row_names.push_back(cells[0]);
    t.values.push_back(std::move(row));
  }
  if (header) throw Error(path + ": empty file");
  if (t.values.empty()) throw Error(path + ": no score rows after the header");
  return t;
}

RowStats stats(const std::vector<double>& values) {
  RowStats s;
  if (values.empty()) return s;
  for (double v : values) s.mean += v;
  s.mean /= values.size();
  double sq = 0;
  for (double v : values) sq += (v - s.mean) * (v - s.mean);
  s.sd = std::sqrt(sq / values.size());
  return s;
}

ScoreTable standardize_rows(const ScoreTable& table) {
  ScoreTable out = table;
  for (auto& row : out.values) {
    const RowStats s = stats(row);
    for (double& v : row) v = s.sd > 0 ? (v - s.mean) / s.sd : 0.0;
  }
  return out;
}

ScoreTable standardize_columns(const ScoreTable& table, const std::vector<std::string>& rows) {
  std::vector<size_t> pick;
  if (rows.empty()) {
    for (size_t i = 0; i < table.row_names.size(); ++i) pick.push_back(i);
  } else {
    for (const auto& name : rows) {
      const auto it = std::find(table.row_names.begin(), table.row_names.end(), name);
      if (it == table.row_names.end()) throw Error("no row named '" + name + "' in the score table");
      pick.push_back(static_cast<size_t>(it - table.row_names.begin()));
    }
  }
  ScoreTable out;
  out.corner = table.corner;
  out.column_names = table.column_names;
  for (size_t i : pick) {
    out.row_names.push_back(table.row_names[i]);
    out.values.push_back(table.values[i]);
  }
  for (size_t c = 0; c < out.column_names.size(); ++c) {
    std::vector<double> column;
    for (const auto& row : out.values) column.push_back(row[c]);
    const RowStats s = stats(column);
    for (auto& row : out.values) row[c] = s.sd > 0 ? (row[c] - s.mean) / s.sd : 0.0;
  }
  return out;
}

std::string format_table(const ScoreTable& table, int decimals) {
  std::vector<std::vector<std::string>> cells;
  cells.push_back({table.corner});
  for (const auto& c : table.column_names) cells.back().push_back(c);
  for (size_t r = 0; r < table.values.size(); ++r) {
    cells.push_back({table.row_names[r]});
    for (double v : table.values[r]) cells.back().push_back(number(v, decimals));
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  std::string text;
  for (const auto& row : cells) {
    for (size_t i = 0; i < row.size(); ++i) {
      const std::string pad(width[i] - row[i].size(), ' ');
      text += i == 0 ? "  " + row[i] + pad : "  " + pad + row[i];
    }
    text += "\n";
  }
  return text;
}

std::string table_csv(const ScoreTable& table) {
  std::vector<std::string> header = {table.corner};
  header.insert(header.end(), table.column_names.begin(), table.column_names.end());
  io::CsvWriter csv(header);
  for (size_t r = 0; r < table.values.size(); ++r) {
    std::vector<std::string> row = {table.row_names[r]};
    for (double v : table.values[r]) row.push_back(io::csv_number(v));
    csv.row(row);
  }
  return csv.text();
}

}  // namespace blocklab::experiments
