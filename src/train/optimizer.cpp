#include "train/optimizer.h"

#include <cmath>

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
  BLOCKLAB_CHECK(params.size() == m_.size() && grads.size() == m_.size(), "optimizer arena size mismatch");
  ++t_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const T beta1 = static_cast<T>(b1), beta2 = static_cast<T>(b2);
  // PyTorch's formulation: step_size = lr / bc1, denom = sqrt(v) / sqrt(bc2) + eps
  const T step_size = static_cast<T>(lr / (1.0 - std::pow(b1, static_cast<double>(t_))));
  const T inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(1.0 - std::pow(b2, static_cast<double>(t_))));
  const T eps = static_cast<T>(options_.eps);
  const T decay = options_.kind == OptimizerKind::AdamW ? static_cast<T>(1.0 - lr * options_.weight_decay) : T(1);
  T* p = params.data();
  const T* g = grads.data();
  T* m = m_.data();
  T* v = v_.data();
  const long n = static_cast<long>(m_.size());
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) {
    m[i] = beta1 * m[i] + (T(1) - beta1) * g[i];
    v[i] = beta2 * v[i] + (T(1) - beta2) * g[i] * g[i];
    p[i] = p[i] * decay - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
  }
}

template <typename T>
double global_norm(std::span<const T> values, std::span<double> partial) {
  // Fixed-size chunks summed in order: the same result for any thread count.
  const long n = static_cast<long>(values.size());
  const long chunks = global_norm_chunks(values.size());
  BLOCKLAB_CHECK(static_cast<long>(partial.size()) >= chunks, "global_norm: work space too small");
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; ++c) {
    double s = 0;
    const long end = std::min(n, (c + 1) * kNormChunk);
    for (long i = c * kNormChunk; i < end; ++i) s += static_cast<double>(values[i]) * values[i];
    partial[c] = s;
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

template <typename T>
void clip_to_norm(std::span<T> values, double norm, double max_norm) {
  if (max_norm <= 0 || !(norm > max_norm)) return;
  const T scale = static_cast<T>(max_norm / norm);
  for (T& x : values) x *= scale;
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
