#pragma once
// Display labels of the norm placements, as every table, figure and log line of the experiments shows them.
#include <string>
#include <vector>

#include "model/config.h"
#include "report/lang.h"

namespace blocklab::report {

// "Post-LN", "Pre-LN", "Peri-LN", "DeepNorm", ... (the names the papers use).
std::string placement_label(NormPlacement placement);
// In Korean, Post-LN and Pre-LN carry the source's names: "뒤 정규화 (Post-LN)", "앞 정규화 (Pre-LN)"; the
// other placements keep the papers' names in both languages.
std::string placement_label(NormPlacement placement, Lang lang);
// The same for a norm_placement value as a config holds it ("post", "peri"); any other text as it is.
std::string placement_label(const std::string& value);
// Every placement, in the order of docs/placements.md.
const std::vector<NormPlacement>& all_placements();

}  // namespace blocklab::report

namespace blocklab::report {

// A design as figures name it: the placement's label, then what sets it apart from the plain block:
// "Pre-LN", "Pre-LN rmsnorm +attn_gate +value_residual".
std::string design_label(const ModelConfig& config);

}  // namespace blocklab::report
