#pragma once
// The residual designs: one row each, the values of norm_placement, in the order of docs/placements.md. A row
// names the design (its config value and its label), the family it belongs to, and its value on each axis the
// one norm_placement key spans: where the norms sit (its sub-layer plan: the flags of
// y = after(s * x + g * F(out(in(x)))) for each block and sub-layer, and whether the stack ends in a norm), the
// residual stream (one, n mixed, or on the sphere), the init scheme `init = auto` gives it, and whether the
// attention normalises its q, k, v heads. A row may also name a check of the config keys it cannot combine with.
// Everything that asks "which design is this" reads this table: parsing and printing the config value, the labels
// of figures and reports, the list that `--placements all` runs, the final norm, the init, the plan, the stream.
//
// How to add a design: a row here (its plan function beside it in designs.cpp), the arithmetic its plan flags do
// not already cover (a kernel pair in kernels/, called from model/block.cpp), its tests, and its section in
// docs/placements.md (docs/development.md).
#include <string>
#include <vector>

#include "model/config.h"

namespace blocklab {

// The axis a design varies, of the three the one norm_placement value spans.
enum class DesignFamily {
  NormPlacement,     // where the norms sit around the sub-layers (post, pre, peri, reordered, mix, lns, hybrid)
  ResidualScaling,   // a scale or gate on the residual or the branch (deepnorm, admin, rezero)
  InitScheme,        // an initialisation that replaces the norms (tfixup)
  ResidualTopology,  // the residual stream itself changes (ModelConfig::stream: several streams, or the sphere)
};
std::string to_string(DesignFamily family);

struct Design {
  NormPlacement id;
  const char* name;   // the config value: "post"
  const char* label;  // as the papers and figures name it: "Post-LN" (Korean: po/ko.po, msgctxt "placement")
  DesignFamily family;
  bool final_norm;    // a norm after the last block, before the head
  InitScheme init;    // what init = auto gives (Auto: the block preset's base scheme)
  SublayerPlan (*plan)(const ModelConfig& config, int block, Sublayer which);
  ResidualStream stream = ResidualStream::Single;
  bool qkv_norm = false;  // the self-attention's Q, K, V normalised per head (HybridNorm)
  void (*check)(const ModelConfig& config) = nullptr;  // throws Error for keys the design cannot combine with
};

// Every design, in the order of docs/placements.md.
const std::vector<Design>& designs();
const Design& design(NormPlacement id);

}  // namespace blocklab
