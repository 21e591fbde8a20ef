#include "probe/residual_norms.h"

#include "probe/stream_stats.h"

namespace blocklab::probe {

template <typename T>
ResidualNorms residual_norms(const Activations<T>& acts, int C) {
  ResidualNorms r;
  for (int l = 0; l <= acts.layers(); ++l) {
    const StreamNorms n = stream_norms(acts.stream(l), acts.batch(), acts.seq_len(), C);
    r.mean_vector_norm.push_back(n.mean_vector_norm);
    r.mean_token_norm.push_back(n.mean_token_norm);
  }
  return r;
}

template ResidualNorms residual_norms(const Activations<float>&, int);
template ResidualNorms residual_norms(const Activations<double>&, int);

}  // namespace blocklab::probe
