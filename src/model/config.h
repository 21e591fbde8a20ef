#pragma once
// The architecture of a stack of transformer blocks. Variants are enums switched inside one
// forward/backward, not a class per variant.
#include <string>

namespace blocklab {

enum class NormPlacement { Post, Pre };  // Post-LN: h = LN(h + F(h)).  Pre-LN: h = h + F(LN(h)), final LN.
enum class NormKind { LayerNorm, RMSNorm };
enum class InitScheme { Xavier, GPT2 };  // Linear weights: Xavier-uniform (Xiong et al.) or N(0, 0.02)

struct ModelConfig {
  NormPlacement norm_placement = NormPlacement::Pre;
  NormKind norm = NormKind::LayerNorm;
  int layers = 24;
  int width = 128;    // C
  int heads = 4;      // H, must divide width
  int mlp_ratio = 4;  // MLP hidden width = mlp_ratio * C
  int vocab = 64;     // V
  int seq_len = 63;   // T, the longest sequence the position table holds
  InitScheme init = InitScheme::Xavier;
  double embed_init_std = 1.0;  // token/position embeddings ~ N(0, embed_init_std^2); 1.0 = nn.Embedding
  double norm_eps = 1e-5;

  int head_size() const { return width / heads; }
  int mlp_hidden() const { return mlp_ratio * width; }
  bool has_final_norm() const { return norm_placement == NormPlacement::Pre; }
  bool norm_has_bias() const { return norm == NormKind::LayerNorm; }

  // Throws Error naming the first invalid field.
  void validate() const;
};

std::string to_string(NormPlacement);
std::string to_string(NormKind);
std::string to_string(InitScheme);
// Parse from the names above ("post"/"pre", "layernorm"/"rmsnorm", "xavier"/"gpt2"); throw Error otherwise.
NormPlacement parse_norm_placement(const std::string&);
NormKind parse_norm_kind(const std::string&);
InitScheme parse_init_scheme(const std::string&);

}  // namespace blocklab
