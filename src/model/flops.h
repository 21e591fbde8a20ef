#pragma once
// Floating-point work of one training step, the numerator of model FLOP/s and MFU.
#include "model/config.h"

namespace blocklab {

// 6 x (parameters in matrix multiplies) x tokens  +  12 x layers x batch x T^2 x width  (attention
// scores and weighted sum, forward 4 B T^2 C per layer, backward twice that; counted over the full
// T x T square as is conventional, although the causal mask skips half of it). The head's share counts the
// positions whose loss counts (loss_positions; all batch x seq_len when negative): the head runs for them alone.
double training_flops_per_step(const ModelConfig& config, int batch, int seq_len, long loss_positions = -1);

}  // namespace blocklab
