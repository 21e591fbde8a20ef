// blocklab standardize: problem 9, standardizing a score table per row and per column.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "experiments/common.h"
#include "experiments/manifest.h"
#include "experiments/standardize.h"
#include "io/atomic_file.h"
#include "util/error.h"

namespace blocklab::cli {

void register_standardize(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand("standardize",
                                  "standardize a score table per row (what LayerNorm does per token) and per column");
  auto csv = std::make_shared<std::string>();
  auto columns_over = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto decimals = std::make_shared<int>(3);
  app->add_option("--csv", *csv, "score table: header name,subject,..., then name,score,... per row "
                                 "[the source's A/B/C table]")
      ->type_name("FILE");
  app->add_option("--columns-over", *columns_over,
                  "rows to standardize each column over [A,B for the built-in table, all rows for --csv]")
      ->type_name("LIST");
  app->add_option("--out", *out, "also write per_row.csv and per_column.csv to this directory")->type_name("DIR");
  app->add_option("--decimals", *decimals, "digits after the point [3]")->check(CLI::Range(0, 12));
  commands.push_back({app, [csv, columns_over, out, decimals] {
                        using namespace experiments;
                        const ScoreTable table = csv->empty() ? source_score_table() : read_score_csv(*csv);
                        std::vector<std::string> rows;
                        if (!columns_over->empty())
                          rows = split(*columns_over, ',');
                        else if (csv->empty())
                          rows = {"A", "B"};  // the source compares A and B per subject
                        const ScoreTable per_row = standardize_rows(table);
                        const ScoreTable per_column = standardize_columns(table, rows);
                        std::printf("scores%s:\n%s", csv->empty() ? " (the source's table)" : "",
                                    format_table(table, 0).c_str());
                        std::printf("\nper row (each row: mean 0, population sd 1):\n%s",
                                    format_table(per_row, *decimals).c_str());
                        for (size_t r = 0; r < table.values.size(); ++r) {
                          const RowStats s = stats(table.values[r]);
                          std::printf("  %s: mean %s, sd %s\n", table.row_names[r].c_str(), fmt(s.mean, "%.4g").c_str(),
                                      fmt(s.sd, "%.4g").c_str());
                        }
                        std::string over;
                        for (const auto& n : per_column.row_names) over += (over.empty() ? "" : ", ") + n;
                        std::printf("\nper column over %s (each column: mean 0, population sd 1):\n%s", over.c_str(),
                                    format_table(per_column, *decimals).c_str());
                        std::printf("\nPer row, a row keeps only its shape: its level (mean) and spread (sd) are gone.\n");
                        if (!out->empty()) {
                          claim_output_dir(*out, "standardize", nlohmann::json::object(), false);
                          io::write_file_atomic(*out + "/scores.csv", table_csv(table));
                          io::write_file_atomic(*out + "/per_row.csv", table_csv(per_row));
                          io::write_file_atomic(*out + "/per_column.csv", table_csv(per_column));
                          std::printf("wrote %s/{scores,per_row,per_column}.csv\n", out->c_str());
                        }
                        return 0;
                      }});
}

}  // namespace blocklab::cli
