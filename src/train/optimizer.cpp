#include "train/optimizer.h"

#include <cmath>

#include "kernels/adam.h"
#include "util/error.h"

namespace blocklab {

std::string to_string(OptimizerKind k) { return k == OptimizerKind::Adam ? "adam" : "adamw"; }

OptimizerKind parse_optimizer_kind(const std::string& s) {
  if (s == "adam") return OptimizerKind::Adam;
  if (s == "adamw") return OptimizerKind::AdamW;
  throw Error("unknown optimizer '" + s + "' (expected adam or adamw)");
}

template <typename T>
Adam<T>::Adam(const AdamOptions& options, size_t size) : options_(options), m_(size, T(0)), v_(size, T(0)) {}

template <typename T>
void Adam<T>::step(std::span<T> params, std::span<const T> grads, double lr) {
  BLOCKLAB_CHECK(grads.size() == m_.size(), "optimizer arena size mismatch");
  update(params, const_cast<T*>(grads.data()), lr, 1.0, false);  // not written: zero_grads is false
}

template <typename T>
void Adam<T>::step_and_zero_grads(std::span<T> params, std::span<T> grads, double lr, double grad_scale) {
  BLOCKLAB_CHECK(grads.size() == m_.size(), "optimizer arena size mismatch");
  update(params, grads.data(), lr, grad_scale, true);
}

template <typename T>
void Adam<T>::update(std::span<T> params, T* grads, double lr, double grad_scale, bool zero_grads) {
  BLOCKLAB_CHECK(params.size() == m_.size(), "optimizer arena size mismatch");
  ++t_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  // PyTorch's formulation: step_size = lr / bc1, denom = sqrt(v) / sqrt(bc2) + eps
  const kernels::AdamCoefficients<T> c{
      .beta1 = static_cast<T>(b1),
      .beta2 = static_cast<T>(b2),
      .step_size = static_cast<T>(lr / (1.0 - std::pow(b1, static_cast<double>(t_)))),
      .inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(1.0 - std::pow(b2, static_cast<double>(t_)))),
      .eps = static_cast<T>(options_.eps),
      .decay = options_.kind == OptimizerKind::AdamW ? static_cast<T>(1.0 - lr * options_.weight_decay) : T(1)};
  kernels::adam_update(params.data(), grads, m_.data(), v_.data(), static_cast<long>(m_.size()), c,
                       static_cast<T>(grad_scale), zero_grads);
}

template <typename T>
double global_norm(std::span<const T> values, std::span<double> partial) {
  // Fixed-size chunks summed in order: the same result for any thread count.
  const long n = static_cast<long>(values.size());
  const long chunks = global_norm_chunks(values.size());
  BLOCKLAB_CHECK(static_cast<long>(partial.size()) >= chunks, "global_norm: work space too small");
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; ++c) {
    const long begin = c * kNormChunk, end = std::min(n, begin + kNormChunk);
    partial[c] = kernels::sum_of_squares(values.data() + begin, end - begin);
  }
  double total = 0;
  for (long c = 0; c < chunks; ++c) total += partial[c];
  return std::sqrt(total);
}

template <typename T>
double global_norm(std::span<const T> values) {
  std::vector<double> partial(global_norm_chunks(values.size()));
  return global_norm(values, std::span<double>(partial));
}

double clip_scale(double norm, double max_norm) { return max_norm <= 0 || !(norm > max_norm) ? 1.0 : max_norm / norm; }

template <typename T>
void clip_to_norm(std::span<T> values, double norm, double max_norm) {
  const double scale = clip_scale(norm, max_norm);
  if (scale == 1.0) return;
  const T s = static_cast<T>(scale);
  for (T& x : values) x *= s;
}

template class Adam<float>;
template class Adam<double>;
template double global_norm<float>(std::span<const float>, std::span<double>);
template double global_norm<double>(std::span<const double>, std::span<double>);
template double global_norm<float>(std::span<const float>);
template double global_norm<double>(std::span<const double>);
template void clip_to_norm<float>(std::span<float>, double, double);
template void clip_to_norm<double>(std::span<double>, double, double);

}  // namespace blocklab
