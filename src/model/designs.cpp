#include "model/designs.h"

#include <cmath>

#include "model/sphere.h"
#include "util/error.h"

namespace blocklab {

namespace {

using C = const ModelConfig&;

SublayerPlan post(C, int, Sublayer) { return {.after_norm = true}; }
SublayerPlan pre(C, int, Sublayer) { return {.in_norm = true}; }
SublayerPlan peri(C, int, Sublayer) { return {.in_norm = true, .out_norm = true}; }
SublayerPlan reordered(C, int, Sublayer) { return {.out_norm = true}; }
SublayerPlan deepnorm(C c, int, Sublayer) { return {.after_norm = true, .residual_scale = c.deepnorm_alpha()}; }
SublayerPlan admin(C, int, Sublayer) { return {.after_norm = true, .learned_scale = true}; }
SublayerPlan rezero(C, int, Sublayer) { return {.gate = true}; }
SublayerPlan tfixup(C, int, Sublayer) { return {}; }
// Mix-LN: the first floor(N/4) blocks (1-based l <= N/4) Post-LN, the rest Pre-LN
SublayerPlan mix(C c, int block, Sublayer) {
  return block + 1 <= c.layers / 4 ? SublayerPlan{.after_norm = true} : SublayerPlan{.in_norm = true};
}
// LayerNorm Scaling: Pre-LN with the input norm's output times 1/sqrt(l)
SublayerPlan lns(C, int block, Sublayer) {
  return {.in_norm = true, .in_scale = 1.0 / std::sqrt(static_cast<double>(block + 1))};
}
// HybridNorm (the authors' OLMo code: attn_norm off, ffn_norm on with ffn_residual_after_norm); the q, k, v
// norms are ModelConfig::qkv_norm's
SublayerPlan hybrid(C, int, Sublayer which) {
  return which == Sublayer::Mlp ? SublayerPlan{.in_norm = true, .residual_from_norm = true} : SublayerPlan{};
}
// HybridNorm* makes block 0 Pre-LN (its norm_pos_special_config {0: attn_norm on, ffn_residual off})
SublayerPlan hybrid_star(C c, int block, Sublayer which) {
  return block == 0 ? SublayerPlan{.in_norm = true} : hybrid(c, block, which);
}
// Hyper-connections: the branch's input norm; the residual is the stack's stream mixing (model/hyper.h)
SublayerPlan hyper(C, int, Sublayer) { return {.in_norm = true}; }
SublayerPlan ngpt(C, int, Sublayer) { return {.normalized_update = true}; }

// id, config value, label, family, final norm, init = auto, plan; then where they differ from the defaults: the
// stream, q/k/v norms, the check of the config.
using F = DesignFamily;
const std::vector<Design> kDesigns = {
    {NormPlacement::Post, "post", "Post-LN", F::NormPlacement, false, InitScheme::Auto, post},
    {NormPlacement::Pre, "pre", "Pre-LN", F::NormPlacement, true, InitScheme::Auto, pre},
    {NormPlacement::Peri, "peri", "Peri-LN", F::NormPlacement, true, InitScheme::Auto, peri},
    {NormPlacement::Reordered, "reordered", "Reordered (OLMo 2)", F::NormPlacement, true, InitScheme::Auto, reordered},
    {NormPlacement::DeepNorm, "deepnorm", "DeepNorm", F::ResidualScaling, false, InitScheme::DeepNorm, deepnorm},
    {NormPlacement::Admin, "admin", "Admin", F::ResidualScaling, false, InitScheme::Auto, admin},
    {NormPlacement::ReZero, "rezero", "ReZero", F::ResidualScaling, false, InitScheme::Auto, rezero},
    {NormPlacement::TFixup, "tfixup", "T-Fixup", F::InitScheme, false, InitScheme::TFixup, tfixup},
    {NormPlacement::Mix, "mix", "Mix-LN", F::NormPlacement, true, InitScheme::Auto, mix},
    {NormPlacement::LNS, "lns", "LN-Scaling", F::NormPlacement, true, InitScheme::Auto, lns},
    {NormPlacement::Hybrid, "hybrid", "HybridNorm", F::NormPlacement, true, InitScheme::Auto, hybrid,
     ResidualStream::Single, true},
    {NormPlacement::HybridStar, "hybrid_star", "HybridNorm*", F::NormPlacement, true, InitScheme::Auto, hybrid_star,
     ResidualStream::Single, true},
    {NormPlacement::Hc, "hc", "Hyper-connections", F::ResidualTopology, true, InitScheme::Auto, hyper,
     ResidualStream::Hyper},
    {NormPlacement::Mhc, "mhc", "mHC", F::ResidualTopology, true, InitScheme::Auto, hyper,
     ResidualStream::ManifoldHyper},
    {NormPlacement::NGPT, "ngpt", "nGPT", F::ResidualTopology, false, InitScheme::Auto, ngpt,
     ResidualStream::Sphere, false, check_sphere_config},
};

}  // namespace

std::string to_string(DesignFamily family) {
  switch (family) {
    case DesignFamily::NormPlacement: return "norm placement";
    case DesignFamily::ResidualScaling: return "residual scaling";
    case DesignFamily::InitScheme: return "init scheme";
    case DesignFamily::ResidualTopology: return "residual topology";
  }
  return "?";
}

const std::vector<Design>& designs() { return kDesigns; }

const Design& design(NormPlacement id) {
  for (const Design& d : kDesigns)
    if (d.id == id) return d;
  throw Error("internal: no design row for norm_placement " + std::to_string(static_cast<int>(id)));
}

}  // namespace blocklab
