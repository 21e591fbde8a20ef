#pragma once
// The residual-stream probe: how the norm of the residual stream h_l grows with depth l in a real model,
// next to the random-walk reference sqrt(l + 1) (a stream that starts at length 1 and gains one
// independent unit-length vector per block).
//
// Per layer l (0 = embeddings, l = output of block l), over the T prompt tokens:
//   mean_vector_norm  || (1/T) sum_t h_l[t] ||          (the source's "norm of the mean prompt-token vector")
//   mean_token_norm   (1/T) sum_t || h_l[t] ||
//   relative_update   (1/T) sum_t || h_l[t] - h_{l-1}[t] || / || h_{l-1}[t] ||   (0 at l = 0)
// Sums run in double, in token order.
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace blocklab::hf {

struct ResidualLayerStats {
  int layer = 0;
  double mean_vector_norm = 0;
  double mean_token_norm = 0;
  double relative_update = 0;
};

class ResidualProbe {
 public:
  ResidualProbe(int tokens, int width) : tokens_(tokens), width_(width) {}
  // Feed h_l (tokens x width) for l = 0, 1, 2, ... in order.
  void observe(int layer, std::span<const float> hidden);
  const std::vector<ResidualLayerStats>& layers() const { return layers_; }

 private:
  int tokens_, width_;
  std::vector<float> previous_;
  std::vector<ResidualLayerStats> layers_;
};

// layer,mean_vector_norm,mean_token_norm,sqrt_layer_plus_1,relative_update (9 significant digits).
void write_residual_csv(const std::filesystem::path& path, const std::vector<ResidualLayerStats>& layers);

}  // namespace blocklab::hf
