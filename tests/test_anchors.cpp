// The depth map's literature anchors are data (docs/data/anchors.json, compiled into the library): the program
// reads every row, docs/placements.md lists the same rows, and each result has its Korean wording in po/ko.po.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/depthmap.h"
#include "model/config.h"
#include "report/lang.h"

namespace {

using namespace blocklab;

std::string placements_doc() {
  std::ifstream in(std::filesystem::path(BLOCKLAB_SOURCE_DIR) / "docs" / "placements.md");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(LiteratureAnchors, TheProgramReadsEveryRowOfTheDataFile) {
  const auto& anchors = experiments::literature_anchors();
  ASSERT_GE(anchors.size(), 12u);
  for (const auto& a : anchors) {
    EXPECT_FALSE(a.source.empty());
    EXPECT_FALSE(a.task.empty()) << a.source;
    EXPECT_FALSE(a.result.empty()) << a.source;
    EXPECT_GT(a.depth, 0) << a.source;
  }
  EXPECT_EQ(anchors.front().source, "Admin (Liu et al. 2020)");
  EXPECT_EQ(anchors.front().placement, NormPlacement::Post);
  EXPECT_EQ(anchors.back().placement, NormPlacement::Pre);
  EXPECT_FALSE(anchors.back().warmup);
}

TEST(LiteratureAnchors, PlacementsDocListsTheSameRows) {
  const std::string doc = placements_doc();
  ASSERT_FALSE(doc.empty()) << "docs/placements.md is missing";
  for (const auto& a : experiments::literature_anchors()) {
    const std::string row = "| " + a.source + " | " + a.task + " | " + a.result + " | `" + to_string(a.placement) +
                            "`, " + std::to_string(a.depth) + " blocks, " + (a.warmup ? "with" : "without") +
                            " warm-up |";
    EXPECT_NE(doc.find(row), std::string::npos) << "docs/placements.md lacks the row\n" << row;
  }
}

TEST(LiteratureAnchors, EveryResultHasItsKoreanWording) {
  for (const auto& a : experiments::literature_anchors())
    EXPECT_NE(report::tr(report::Lang::Ko, a.result), a.result) << a.result << " has no entry in po/ko.po";
}

}  // namespace
