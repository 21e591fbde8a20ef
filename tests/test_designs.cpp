// The table of residual designs (model/designs.h): one row per norm_placement value, and everything that names
// a design reads it. Checked here: the rows cover the enum once each, names and labels round-trip and are
// unique, the plans and init ties are the ones the rows claim, and docs/placements.md lists every design with
// the final norm its row says.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "model/designs.h"
#include "model/parameters.h"
#include "report/labels.h"
#include "util/error.h"

namespace {

using namespace blocklab;

TEST(Designs, EveryPlacementHasOneRowAndItsNameAndLabelRoundTrip) {
  std::set<int> ids;
  std::set<std::string> names, labels;
  for (const Design& d : designs()) {
    EXPECT_TRUE(ids.insert(static_cast<int>(d.id)).second) << d.name;
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_TRUE(labels.insert(d.label).second) << d.label;
    EXPECT_EQ(parse_norm_placement(d.name), d.id);
    EXPECT_EQ(to_string(d.id), d.name);
    EXPECT_EQ(report::placement_label(d.id), d.label);
    EXPECT_EQ(&design(d.id), &d);
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(NormPlacement::NGPT) + 1);  // the enum's last value
  EXPECT_EQ(*ids.begin(), 0);
  std::vector<NormPlacement> order;
  for (const Design& d : designs()) order.push_back(d.id);
  EXPECT_EQ(report::all_placements(), order);  // --placements all runs the table's order
  try {
    parse_norm_placement("postln");
    ADD_FAILURE() << "an unknown name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of: post, pre, peri"), std::string::npos) << e.what();
  }
}

TEST(Designs, RowsGiveThePlansFinalNormsAndInitsTheyName) {
  ModelConfig c;
  c.layers = 8;
  auto plan = [&](NormPlacement p, int block, Sublayer which) {
    c.norm_placement = p;
    return c.sublayer_plan(block, which);
  };
  EXPECT_TRUE(plan(NormPlacement::Post, 0, Sublayer::Attention).after_norm);
  EXPECT_TRUE(plan(NormPlacement::Pre, 3, Sublayer::Mlp).in_norm);
  EXPECT_EQ(plan(NormPlacement::DeepNorm, 0, Sublayer::Mlp).residual_scale, c.deepnorm_alpha());
  // Mix-LN: blocks 1..N/4 Post-LN, the rest Pre-LN
  EXPECT_TRUE(plan(NormPlacement::Mix, 1, Sublayer::Attention).after_norm);
  EXPECT_TRUE(plan(NormPlacement::Mix, 2, Sublayer::Attention).in_norm);
  EXPECT_DOUBLE_EQ(plan(NormPlacement::LNS, 3, Sublayer::Mlp).in_scale, 0.5);
  // HybridNorm: no attention input norm, the MLP's residual from its norm; HybridNorm* block 1 is Pre-LN
  EXPECT_TRUE(plan(NormPlacement::Hybrid, 0, Sublayer::Attention).plain());
  EXPECT_FALSE(plan(NormPlacement::Hybrid, 0, Sublayer::Attention).in_norm);
  EXPECT_TRUE(plan(NormPlacement::Hybrid, 0, Sublayer::Mlp).residual_from_norm);
  EXPECT_TRUE(plan(NormPlacement::HybridStar, 0, Sublayer::Attention).in_norm);
  EXPECT_FALSE(plan(NormPlacement::HybridStar, 0, Sublayer::Mlp).residual_from_norm);
  EXPECT_TRUE(plan(NormPlacement::NGPT, 0, Sublayer::Mlp).normalized_update);
  for (const Design& d : designs()) {
    c.norm_placement = d.id;
    c.init = InitScheme::Auto;
    c.base_init = InitScheme::GPT2;
    EXPECT_EQ(c.effective_init(), d.init == InitScheme::Auto ? InitScheme::GPT2 : d.init) << d.name;
    EXPECT_EQ(c.has_final_norm(), d.final_norm) << d.name;
    // a design without any norm layer in its plan (and no q/k/v norms) varies the residual, the init or the topology
    const SublayerPlan p = c.sublayer_plan(c.layers - 1, Sublayer::Attention);
    if (!p.in_norm && !p.out_norm && !p.after_norm && !d.qkv_norm) {
      EXPECT_NE(d.family, DesignFamily::NormPlacement) << d.name;
    }
  }
}

// The axes other than the plan: the stream and the q/k/v norms are what the rows say, a stream other than the
// single one belongs to the residual-topology family, and the parameter table follows the stream (the sphere's
// scales, the hyper-connections' mixing) and the q/k/v norms.
TEST(Designs, StreamAndQkvNormAxesComeFromTheRowsAndShapeTheParameters) {
  for (const Design& d : designs()) {
    ModelConfig c;
    c.layers = 2, c.width = 16, c.heads = 2;
    c.norm_placement = d.id;
    EXPECT_EQ(c.stream(), d.stream) << d.name;
    EXPECT_EQ(c.qkv_norm(), d.qkv_norm) << d.name;
    EXPECT_EQ(c.hyper(), d.stream == ResidualStream::Hyper || d.stream == ResidualStream::ManifoldHyper) << d.name;
    if (d.stream != ResidualStream::Single) {
      EXPECT_EQ(d.family, DesignFamily::ResidualTopology) << d.name;
    }
    if (d.qkv_norm) c.qkv = QkvLayout::Separate;
    const ParameterTable table(c);
    EXPECT_EQ(table.find("head.s_z") != nullptr, d.stream == ResidualStream::Sphere) << d.name;
    EXPECT_EQ(table.find("blocks.0.attn_hc.alpha_in") != nullptr, c.hyper()) << d.name;
    EXPECT_EQ(table.find("blocks.1.attn.v_norm.weight") != nullptr, d.qkv_norm) << d.name;
  }
}

// A row's check runs in validate(): nGPT's refuses a tied head, naming the design's config value.
TEST(Designs, ARowsCheckRunsInValidate) {
  const Design& d = design(NormPlacement::NGPT);
  ASSERT_NE(d.check, nullptr);
  ModelConfig c;
  c.norm_placement = d.id;
  c.tie_head = false;
  EXPECT_NO_THROW(c.validate());
  c.tie_head = true;
  try {
    c.validate();
    ADD_FAILURE() << "norm_placement = ngpt accepted tie_head = true";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("norm_placement = ngpt needs an untied head"), std::string::npos) << e.what();
  }
}

TEST(Designs, PlacementsDocListsEveryDesignWithItsFinalNorm) {
  std::ifstream in(std::filesystem::path(BLOCKLAB_SOURCE_DIR) / "docs" / "placements.md");
  ASSERT_TRUE(in) << "docs/placements.md is missing";
  std::string line;
  std::map<std::string, std::string> final_norm;  // the first table's rows: name -> its "final norm" column
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::string name = line.substr(3, line.find('`', 3) - 3);
    std::vector<std::string> cells;
    std::stringstream row(line);
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    if (cells.size() > 3 && !final_norm.count(name)) final_norm[name] = cells[3];
  }
  for (const Design& d : designs()) {
    ASSERT_TRUE(final_norm.count(d.name)) << d.name << " has no row in docs/placements.md";
    EXPECT_EQ(final_norm[d.name].find(d.final_norm ? " yes" : " no"), 0u) << d.name << ": '" << final_norm[d.name] << "'";
  }
}

}  // namespace
