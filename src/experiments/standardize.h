#pragma once
// Problem 9: standardizing a score table per student (row) or per subject (column), with the population
// standard deviation. Per-row standardization is what LayerNorm does to each token: it erases a row's
// level (mean) and spread (sd) and keeps only its shape.
#include <string>
#include <vector>

namespace blocklab::experiments {

struct ScoreTable {
  std::string corner = "student";           // header of the name column
  std::vector<std::string> row_names;        // students
  std::vector<std::string> column_names;     // subjects
  std::vector<std::vector<double>> values;   // [row][column]
};

// The source's table: A (90, 80, 70), B (60, 50, 40), C (90, 50, 70) in Korean, English, Math.
ScoreTable source_score_table();

// CSV: a header row (corner,subject,...), then one row per student (name,score,...). Throws Error naming
// the file and line for a missing file, ragged rows, a non-number, or fewer than 1 row / 2 columns.
ScoreTable read_score_csv(const std::string& path);

struct RowStats {
  double mean = 0, sd = 0;  // population sd (divide by n)
};
RowStats stats(const std::vector<double>& values);

// (x - mean) / sd per row. A row with sd = 0 has nothing but its level, and standardizes to zeros.
ScoreTable standardize_rows(const ScoreTable& table);
// (x - mean) / sd per column over the rows named (all rows when empty); the result holds those rows.
// Throws Error for an unknown row name.
ScoreTable standardize_columns(const ScoreTable& table, const std::vector<std::string>& rows = {});

// Aligned text table with `decimals` digits (-0 printed as 0).
std::string format_table(const ScoreTable& table, int decimals);
std::string table_csv(const ScoreTable& table);

}  // namespace blocklab::experiments
