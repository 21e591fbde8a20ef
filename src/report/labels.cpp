#include "report/labels.h"

#include "model/designs.h"
#include "util/error.h"

namespace blocklab::report {

std::string placement_label(NormPlacement placement) { return design(placement).label; }

std::string placement_label(NormPlacement placement, Lang lang) {
  return report::trc(lang, "placement", placement_label(placement));  // po/ko.po: msgctxt "placement"
}

std::string placement_label(const std::string& value) {
  try {
    return placement_label(parse_norm_placement(value));
  } catch (const Error&) {
    return value;
  }
}

const std::vector<NormPlacement>& all_placements() {
  static const std::vector<NormPlacement> all = [] {
    std::vector<NormPlacement> ids;
    for (const Design& d : designs()) ids.push_back(d.id);
    return ids;
  }();
  return all;
}

}  // namespace blocklab::report

namespace blocklab::report {

std::string design_label(const ModelConfig& config) {
  std::string label = placement_label(config.norm_placement);
  if (config.norm != ModelConfig{}.norm) {
    label += ' ';
    label += to_string(config.norm);
  }
  if (config.attn_gate) label += " +attn_gate";
  if (config.value_residual) label += " +value_residual";
  return label;
}

}  // namespace blocklab::report
