#pragma once
// Residual-stream norms: how long the token vectors h^(l) are after each block (problem 10).
// For every stream index l = 0 (embeddings) .. L (after the last block), over a batch (B,T,C):
//   mean_vector_norm[l] = mean over sequences b of || (1/T) sum_t h_{b,t} ||   (the mean token vector)
//   mean_token_norm[l]  = mean over b, t of || h_{b,t} ||                      (the mean per-token norm)
// Each stream index's pair is probe/stream_stats.h stream_norms (shared with the Hugging Face residual probe).
// Post-LN streams are LayerNorm outputs (norm about sqrt(C)); Pre-LN streams are never normalised.
#include <vector>

#include "model/model.h"

namespace blocklab::probe {

struct ResidualNorms {
  std::vector<double> mean_vector_norm;  // L+1 entries
  std::vector<double> mean_token_norm;   // L+1 entries
};

// From the activations of a forward pass; C the model width.
template <typename T>
ResidualNorms residual_norms(const Activations<T>& acts, int C);

}  // namespace blocklab::probe
