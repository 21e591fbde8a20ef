#pragma once
// Adam and AdamW over flat arenas (parameters, gradients, first and second moments share the
// parameter table's offsets, so the update is one loop). Matches torch.optim.Adam / AdamW:
//   m = b1 m + (1-b1) g;   v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   AdamW additionally decays p *= (1 - lr * weight_decay) before the update (decoupled).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace blocklab {

enum class OptimizerKind { Adam, AdamW };
std::string to_string(OptimizerKind);
OptimizerKind parse_optimizer_kind(const std::string&);

struct AdamOptions {
  OptimizerKind kind = OptimizerKind::Adam;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // AdamW only
};

template <typename T>
class Adam {
 public:
  Adam(const AdamOptions& options, size_t size);

  // One update with learning rate lr; increments the step count first (bias correction uses t >= 1).
  void step(std::span<T> params, std::span<const T> grads, double lr);

  int64_t steps_taken() const { return t_; }
  std::span<T> first_moment() { return m_; }
  std::span<T> second_moment() { return v_; }
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  AdamOptions options_;
  std::vector<T> m_, v_;
  int64_t t_ = 0;
};

extern template class Adam<float>;
extern template class Adam<double>;

// Global L2 norm of a gradient arena, summed in a fixed order (independent of the thread count): squares
// summed in chunks of kNormChunk values, the chunk sums added in order. `partial` holds one double per
// chunk (global_norm_chunks(size) of them), so that a training loop can size it once.
inline constexpr long kNormChunk = 4096;
inline long global_norm_chunks(size_t n) { return (static_cast<long>(n) + kNormChunk - 1) / kNormChunk; }
template <typename T>
double global_norm(std::span<const T> values, std::span<double> partial);
// The same with its own work space.
template <typename T>
double global_norm(std::span<const T> values);

// Multiplies the arena by max_norm / norm when norm > max_norm (max_norm <= 0 disables clipping).
template <typename T>
void clip_to_norm(std::span<T> values, double norm, double max_norm);

}  // namespace blocklab
