#pragma once
// Adam and AdamW over flat arenas (parameters, gradients, first and second moments share the
// parameter table's offsets, so the update is one vectorised, multi-threaded pass: kernels/adam.h). Matches
// torch.optim.Adam / AdamW:
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
  // The same update of a training step, with the gradient clipping folded in (each gradient value multiplied by
  // grad_scale as it is read: 1 for none, max_norm / norm to clip) and the gradients set to zero in the same pass
  // (the next backward finds them cleared: Model::grads_were_zeroed()).
  void step_and_zero_grads(std::span<T> params, std::span<T> grads, double lr, double grad_scale);

  int64_t steps_taken() const { return t_; }
  std::span<T> first_moment() { return m_; }
  std::span<T> second_moment() { return v_; }
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  void update(std::span<T> params, T* grads, double lr, double grad_scale, bool zero_grads);

  AdamOptions options_;
  std::vector<T> m_, v_;
  int64_t t_ = 0;
};

extern template class Adam<float>;
extern template class Adam<double>;

// Global L2 norm of a gradient arena, summed in a fixed order (independent of the thread count): squares
// summed in double in chunks of kNormChunk values (kernels::sum_of_squares: 16 lanes, vectorised), the chunk
// sums added in order. `partial` holds one double per
// chunk (global_norm_chunks(size) of them), so that a training loop can size it once.
inline constexpr long kNormChunk = 4096;
inline long global_norm_chunks(size_t n) { return (static_cast<long>(n) + kNormChunk - 1) / kNormChunk; }
template <typename T>
double global_norm(std::span<const T> values, std::span<double> partial);
// The same with its own work space.
template <typename T>
double global_norm(std::span<const T> values);

// The factor that clipping to max_norm multiplies a gradient of global norm `norm` by: max_norm / norm when
// norm > max_norm, else 1 (max_norm <= 0 disables clipping).
double clip_scale(double norm, double max_norm);
// Multiplies the arena by clip_scale(norm, max_norm).
template <typename T>
void clip_to_norm(std::span<T> values, double norm, double max_norm);

}  // namespace blocklab
