#include "model/rope_scaling.h"

#include <cmath>
#include <numbers>

#include "kernels/rope.h"

namespace blocklab {

std::vector<double> rope_inv_freq(double theta, int head_dim, const RopeScaling& s) {
  const int D = head_dim, half = D / 2;
  std::vector<double> inv(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) inv[i] = std::pow(theta, -2.0 * i / D);
  switch (s.kind) {
    case RopeScaling::Kind::None:
      break;
    case RopeScaling::Kind::Linear:
      for (double& f : inv) f /= s.factor;
      break;
    case RopeScaling::Kind::Llama3: {
      // Llama 3.1: long wavelengths are slowed down by `factor`, short ones kept, the band between
      // interpolated (transformers' _compute_llama3_parameters).
      const double old_len = s.original_max_positions;
      const double low_wavelen = old_len / s.low_freq_factor;
      const double high_wavelen = old_len / s.high_freq_factor;
      for (double& f : inv) {
        const double wavelen = 2 * std::numbers::pi / f;
        if (wavelen > low_wavelen) {
          f /= s.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth =
              (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
          f = (1 - smooth) * f / s.factor + smooth * f;
        }
      }
      break;
    }
  }
  return inv;
}

void rope_position_tables(std::vector<float>& cos, std::vector<float>& sin, double theta, int head_dim,
                          const RopeScaling& scaling, int Tn) {
  const std::vector<double> inv = rope_inv_freq(theta, head_dim, scaling);
  cos.resize(static_cast<std::size_t>(Tn) * (head_dim / 2));
  sin.resize(cos.size());
  kernels::rope_tables(cos.data(), sin.data(), inv.data(), Tn, head_dim / 2);
}

}  // namespace blocklab
