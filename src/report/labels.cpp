#include "report/labels.h"

#include "util/error.h"

namespace blocklab::report {

std::string placement_label(NormPlacement placement) {
  switch (placement) {
    case NormPlacement::Post: return "Post-LN";
    case NormPlacement::Pre: return "Pre-LN";
    case NormPlacement::Peri: return "Peri-LN";
    case NormPlacement::Reordered: return "Reordered (OLMo 2)";
    case NormPlacement::DeepNorm: return "DeepNorm";
    case NormPlacement::Admin: return "Admin";
    case NormPlacement::ReZero: return "ReZero";
    case NormPlacement::TFixup: return "T-Fixup";
    case NormPlacement::Mix: return "Mix-LN";
    case NormPlacement::LNS: return "LN-Scaling";
    case NormPlacement::Hybrid: return "HybridNorm";
    case NormPlacement::HybridStar: return "HybridNorm*";
    case NormPlacement::Hc: return "Hyper-connections";
    case NormPlacement::Mhc: return "mHC";
    case NormPlacement::NGPT: return "nGPT";
  }
  return to_string(placement);
}

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
  static const std::vector<NormPlacement> all{NormPlacement::Post,     NormPlacement::Pre,    NormPlacement::Peri,
                                              NormPlacement::Reordered, NormPlacement::DeepNorm, NormPlacement::Admin,
                                              NormPlacement::ReZero,   NormPlacement::TFixup, NormPlacement::Mix,
                                              NormPlacement::LNS,      NormPlacement::Hybrid, NormPlacement::HybridStar,
                                              NormPlacement::Hc,       NormPlacement::Mhc,    NormPlacement::NGPT};
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
