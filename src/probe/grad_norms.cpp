#include "probe/grad_norms.h"

#include <cmath>

namespace blocklab::probe {

template <typename T>
std::vector<ParameterGradNorm> parameter_grad_norms(const Model<T>& model) {
  std::vector<ParameterGradNorm> out;
  const std::span<const T> grads = model.grads();
  for (const ParamSpec& spec : model.table().specs()) {
    double sum = 0;
    for (long i = 0; i < spec.numel; ++i) {
      const double g = grads[spec.offset + i];
      sum += g * g;
    }
    out.push_back({spec.name, spec.block >= 0 ? spec.block + 1 : 0, std::sqrt(sum)});
  }
  return out;
}

template std::vector<ParameterGradNorm> parameter_grad_norms(const Model<float>&);
template std::vector<ParameterGradNorm> parameter_grad_norms(const Model<double>&);

}  // namespace blocklab::probe
