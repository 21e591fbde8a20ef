// Problem 9: per-row and per-column standardization of the source's score table, and CSV input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_runner.h"
#include "experiments/standardize.h"
#include "util/error.h"

using namespace blocklab;
namespace bt = blocklab::testing;
using namespace blocklab::experiments;

TEST(Standardize, PerStudentMatchesTheSource) {
  const ScoreTable per_row = standardize_rows(source_score_table());
  const double z = std::sqrt(1.5);  // (90 - 80) / sqrt(200/3) = 1.2247...
  ASSERT_EQ(per_row.values.size(), 3u);
  for (int r : {0, 1}) {  // A and B: (1.225, 0, -1.225)
    EXPECT_NEAR(per_row.values[r][0], z, 1e-12);
    EXPECT_NEAR(per_row.values[r][1], 0.0, 1e-12);
    EXPECT_NEAR(per_row.values[r][2], -z, 1e-12);
  }
  EXPECT_NEAR(per_row.values[2][0], z, 1e-12);  // C: (1.225, -1.225, 0)
  EXPECT_NEAR(per_row.values[2][1], -z, 1e-12);
  EXPECT_NEAR(per_row.values[2][2], 0.0, 1e-12);
  EXPECT_NEAR(z, 1.225, 5e-4);
  const RowStats a = stats(source_score_table().values[0]);
  EXPECT_DOUBLE_EQ(a.mean, 80);
  EXPECT_NEAR(a.sd, 8.165, 5e-4);  // population sd
}

TEST(Standardize, PerSubjectOverAAndBGivesPlusMinusOne) {
  const ScoreTable per_column = standardize_columns(source_score_table(), {"A", "B"});
  ASSERT_EQ(per_column.row_names, (std::vector<std::string>{"A", "B"}));
  for (int c = 0; c < 3; ++c) {
    EXPECT_DOUBLE_EQ(per_column.values[0][c], 1.0);
    EXPECT_DOUBLE_EQ(per_column.values[1][c], -1.0);
  }
  EXPECT_THROW(standardize_columns(source_score_table(), {"A", "Z"}), Error);
}

TEST(Standardize, ARowWithoutSpreadBecomesZerosAndFormattingDropsNegativeZero) {
  ScoreTable t = source_score_table();
  t.values[1] = {50, 50, 50};
  const ScoreTable per_row = standardize_rows(t);
  for (double v : per_row.values[1]) EXPECT_EQ(v, 0.0);
  const std::string text = format_table(standardize_rows(source_score_table()), 3);
  EXPECT_NE(text.find("1.225"), std::string::npos) << text;
  EXPECT_NE(text.find("-1.225"), std::string::npos);
  EXPECT_EQ(text.find("-0.000"), std::string::npos) << text;
}

TEST(Standardize, ReadsACsvAndRejectsBadOnesWithTheLine) {
  const auto dir = bt::fresh_dir("standardize_csv");
  std::ofstream(dir / "ok.csv") << "name,x,y\nP,1,3\nQ,2,2\n";
  const ScoreTable t = read_score_csv((dir / "ok.csv").string());
  EXPECT_EQ(t.corner, "name");
  EXPECT_EQ(t.column_names, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(t.values[0], (std::vector<double>{1, 3}));
  std::ofstream(dir / "ragged.csv") << "name,x,y\nP,1,3\nQ,2\n";
  std::ofstream(dir / "word.csv") << "name,x,y\nP,1,high\n";
  std::ofstream(dir / "empty.csv") << "";
  for (const char* name : {"ragged.csv", "word.csv", "empty.csv", "missing.csv"}) {
    try {
      read_score_csv((dir / name).string());
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(Standardize, CliPrintsBothTablesAndRejectsABadCsv) {
  const auto r = bt::run_cli("standardize");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("1.225"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("per column over A, B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-1.000"), std::string::npos) << r.out;
  const auto bad = bt::run_cli("standardize --csv /nonexistent/scores.csv");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("cannot read"), std::string::npos) << bad.err;
}
