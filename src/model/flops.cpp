#include "model/flops.h"

namespace blocklab {

double training_flops_per_step(const ModelConfig& config, int batch, int seq_len, long loss_positions) {
  const double C = config.width, hidden = config.mlp_hidden(), V = config.vocab;
  const double tokens = static_cast<double>(batch) * seq_len;
  const double head_tokens = loss_positions < 0 ? tokens : static_cast<double>(loss_positions);
  // qkv (3C x C), proj (C x C), fc1 (hidden x C), fc2 (C x hidden) per block; the head (V x C)
  const double block_params = config.layers * (3 * C * C + C * C + 2 * hidden * C);
  const double attention = 12.0 * config.layers * batch * static_cast<double>(seq_len) * seq_len * C;
  return 6.0 * (block_params * tokens + V * C * head_tokens) + attention;
}

}  // namespace blocklab
