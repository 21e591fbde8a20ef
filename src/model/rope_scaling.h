#pragma once
// RoPE's frequencies for a base theta and a head size D, with the long-context scalings Hugging Face models
// declare (rope_scaling / rope_parameters in config.json), as transformers computes them:
//   none     inv_freq[i] = theta^(-2i/D), i < D/2
//   linear   inv_freq[i] / factor
//   llama3   Llama 3.1: wavelengths 2 pi / inv_freq above original_max_positions / low_freq_factor divided by
//            factor, below original_max_positions / high_freq_factor kept, the band between interpolated
#include <vector>

namespace blocklab {

struct RopeScaling {
  enum class Kind { None, Linear, Llama3 };
  Kind kind = Kind::None;
  double factor = 1.0;                 // linear and llama3
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  int original_max_positions = 8192;   // llama3
};

// The D/2 inverse frequencies for base theta and head size D, with `scaling` applied.
std::vector<double> rope_inv_freq(double theta, int head_dim, const RopeScaling& scaling = {});

// cos and sin (Tn, D/2) of positions 0..Tn-1 for those frequencies (kernels/rope.h rope_tables), resized.
void rope_position_tables(std::vector<float>& cos, std::vector<float>& sin, double theta, int head_dim,
                          const RopeScaling& scaling, int Tn);

}  // namespace blocklab
