#include "experiments/labels.h"

namespace blocklab::experiments {

std::string placement_label(NormPlacement placement) {
  return placement == NormPlacement::Post ? "Post-LN" : "Pre-LN";
}

std::string placement_label(const std::string& value) {
  for (NormPlacement p : {NormPlacement::Post, NormPlacement::Pre})
    if (value == to_string(p)) return placement_label(p);
  return value;
}

}  // namespace blocklab::experiments
