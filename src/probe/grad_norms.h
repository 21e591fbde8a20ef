#pragma once
// Per-parameter gradient norms: the Frobenius norm of each tensor's gradient after a backward pass,
// the measurement behind Xiong et al. (2020), Fig. 3.
#include <string>
#include <vector>

#include "model/model.h"

namespace blocklab::probe {

struct ParameterGradNorm {
  std::string name;  // PyTorch name, e.g. "blocks.23.mlp.fc2.weight"
  int block = 0;     // 1-based block number (blocks.N -> N+1); 0 for tensors outside the blocks
  double norm = 0;   // sqrt(sum of squared gradient entries), summed in double in a fixed order
};

// One entry per parameter tensor, in parameter-table order, from the model's current gradients.
template <typename T>
std::vector<ParameterGradNorm> parameter_grad_norms(const Model<T>& model);

}  // namespace blocklab::probe
