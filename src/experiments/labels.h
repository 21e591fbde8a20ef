#pragma once
// Display labels of the norm placements, as every table, figure and log line of the experiments shows them.
#include <string>
#include <vector>

#include "model/config.h"

namespace blocklab::experiments {

// "Post-LN", "Pre-LN", "Peri-LN", "DeepNorm", ... (the names the papers use).
std::string placement_label(NormPlacement placement);
// The same for a norm_placement value as a config holds it ("post", "peri"); any other text as it is.
std::string placement_label(const std::string& value);
// Every placement, in the order of PLACEMENTS.md.
const std::vector<NormPlacement>& all_placements();

}  // namespace blocklab::experiments
