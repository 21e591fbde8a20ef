#include "model/config.h"

#include <cmath>

#include "util/error.h"

namespace blocklab {

void ModelConfig::validate() const {
  auto positive = [](const char* name, long v) {
    if (v <= 0) throw Error(std::string(name) + " must be positive, got " + std::to_string(v));
  };
  positive("layers", layers);
  positive("width", width);
  positive("heads", heads);
  positive("mlp_ratio", mlp_ratio);
  positive("vocab", vocab);
  positive("seq_len", seq_len);
  if (width % heads != 0)
    throw Error("heads (" + std::to_string(heads) + ") must divide width (" + std::to_string(width) + ")");
  if (!(embed_init_std >= 0) || !std::isfinite(embed_init_std))
    throw Error("embed_init_std must be a finite number >= 0");
  if (!(norm_eps > 0) || !std::isfinite(norm_eps)) throw Error("norm_eps must be a finite number > 0");
}

std::string to_string(NormPlacement p) { return p == NormPlacement::Post ? "post" : "pre"; }
std::string to_string(NormKind k) { return k == NormKind::LayerNorm ? "layernorm" : "rmsnorm"; }
std::string to_string(InitScheme s) { return s == InitScheme::Xavier ? "xavier" : "gpt2"; }

NormPlacement parse_norm_placement(const std::string& s) {
  if (s == "post") return NormPlacement::Post;
  if (s == "pre") return NormPlacement::Pre;
  throw Error("unknown norm_placement '" + s + "' (expected post or pre)");
}

NormKind parse_norm_kind(const std::string& s) {
  if (s == "layernorm") return NormKind::LayerNorm;
  if (s == "rmsnorm") return NormKind::RMSNorm;
  throw Error("unknown norm '" + s + "' (expected layernorm or rmsnorm)");
}

InitScheme parse_init_scheme(const std::string& s) {
  if (s == "xavier") return InitScheme::Xavier;
  if (s == "gpt2") return InitScheme::GPT2;
  throw Error("unknown init '" + s + "' (expected xavier or gpt2)");
}

}  // namespace blocklab
