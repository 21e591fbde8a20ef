#include "probe/residual_norms.h"

#include <algorithm>
#include <cmath>

namespace blocklab::probe {

template <typename T>
ResidualNorms residual_norms(const Activations<T>& acts, int C) {
  const int L = acts.layers(), B = acts.batch(), Tn = acts.seq_len();
  ResidualNorms r;
  std::vector<double> mean(C);
  for (int l = 0; l <= L; ++l) {
    const T* h = acts.stream(l);
    double vector_norms = 0, token_norms = 0;
    for (int b = 0; b < B; ++b) {
      std::fill(mean.begin(), mean.end(), 0.0);
      for (int t = 0; t < Tn; ++t) {
        const T* x = h + (static_cast<long>(b) * Tn + t) * C;
        double sq = 0;
        for (int c = 0; c < C; ++c) {
          mean[c] += x[c];
          sq += static_cast<double>(x[c]) * x[c];
        }
        token_norms += std::sqrt(sq);
      }
      double sq = 0;
      for (int c = 0; c < C; ++c) sq += (mean[c] / Tn) * (mean[c] / Tn);
      vector_norms += std::sqrt(sq);
    }
    r.mean_vector_norm.push_back(vector_norms / B);
    r.mean_token_norm.push_back(token_norms / (static_cast<double>(B) * Tn));
  }
  return r;
}

template ResidualNorms residual_norms(const Activations<float>&, int);
template ResidualNorms residual_norms(const Activations<double>&, int);

}  // namespace blocklab::probe
