#pragma once
// The memory a training run holds, estimated from its config before anything is allocated:
// parameters, gradients and Adam's two moments (one arena each, the parameter table's size), the
// activations a forward saves and the backward's working buffers (Activations), and the tables that
// describe them. bench prints the same parts next to the measured peak RSS.
#include <limits>

#include "model/config.h"

namespace blocklab {

struct TrainingMemory {
  double parameters = 0, gradients = 0, adam_moments = 0;  // bytes; adam_moments counts m and v
  // the parameters rounded to bf16, where the model keeps them (bf16 products that take rounded operands:
  // Model::rounded_params_to_write; counted whatever the optimizer, an upper bound for those that write none)
  double rounded_parameters = 0;
  double activations = 0, backward_buffers = 0;
  double tables = 0;           // parameter table entries, per-block views, batch buffers
  bool lower_bound = false;    // only the cheap lower bound was computed (it exceeded stop_above)
  double total() const {
    return parameters + gradients + adam_moments + rounded_parameters + activations + backward_buffers + tables;
  }
};

// Exact for the float arenas (the same carving code that allocates them). A cheap lower bound comes
// first: when it exceeds stop_above (e.g. the memory available), it is returned as it is (lower_bound
// set), so absurd configs (a million layers, a batch of a billion) are refused in microseconds and no
// size product can overflow. The config must be valid (ModelConfig::validate); Error otherwise.
TrainingMemory estimate_training_memory(const ModelConfig& config, int batch, int seq_len,
                                        double stop_above = std::numeric_limits<double>::infinity());

}  // namespace blocklab
