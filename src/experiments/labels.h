#pragma once
// Display labels of the norm placements, as every table, figure and log line of the experiments shows them.
#include <string>

#include "model/config.h"

namespace blocklab::experiments {

// "Post-LN" / "Pre-LN".
std::string placement_label(NormPlacement placement);
// The same for a norm_placement value as a config holds it ("post", "pre"); any other text as it is.
std::string placement_label(const std::string& value);

}  // namespace blocklab::experiments
