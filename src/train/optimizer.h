#pragma once
// The optimizers, over flat arenas: parameters, gradients and every state array share the parameter table's
// offsets, so an elementwise update is one vectorised, multi-threaded pass (kernels/adam.h, kernels/optimizers.h)
// whose results do not depend on the thread count. Each matches PyTorch's (tools/ref/make_optimizer_fixtures.py,
// tests/test_optimizers.cpp); t is the update count (1 at the first update), g the gradient after clipping:
//
// adam, adamw (torch.optim.Adam / AdamW):
//   m = b1 m + (1-b1) g;   v = b2 v + (1-b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   AdamW additionally decays p *= (1 - lr * weight_decay) before the update (decoupled). Adam takes no decay.
// radam (torch.optim.RAdam, decoupled_weight_decay=False): weight decay is added to the gradient first,
//   g += weight_decay * p, then m and v as Adam's, and with rho_inf = 2 / (1 - b2) - 1,
//   rho_t = rho_inf - 2 t b2^t / (1 - b2^t):
//   rho_t > 5:  p -= lr * r_t * (m / (1 - b1^t)) * sqrt(1 - b2^t) / (sqrt(v) + eps),
//               r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
//   otherwise:  p -= lr * m / (1 - b1^t)     (the variance estimate is not yet trusted: momentum SGD)
// adam_v0 = grad (adam, adamw, radam): GI-Adam (Kalra & Barkeshli 2024, "Why Warmup the Learning Rate?"): the
//   second moment starts from the first gradient instead of zero, v_0 = g_1^2, set just before the first update,
//   which then runs unchanged (so v_1 = b2 g_1^2 + (1-b2) g_1^2 = g_1^2). The bias correction of v is kept, as
//   in the paper: v / (1 - b2^t) overestimates g^2 by 1 / (1 - b2^t) at first, which shrinks the first updates by
//   sqrt(1 - b2^t), a warm-up of its own (1/31.6 of lr at t = 1 for b2 = 0.999). Steps skipped for a non-finite
//   gradient do not count: the initialisation happens at the first update taken.
// sgd (torch.optim.SGD, dampening 0): g += weight_decay * p;  b = momentum b + g  (b_1 = g_1);
//   p -= lr * (nesterov ? g + momentum b : b). momentum 0 is plain gradient descent (no state).
// lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"; PyTorch has none):
//   c = b1 m + (1-b1) g;   p -= lr (sign(c) + weight_decay p);   m = b2 m + (1-b2) g    (sign(0) = 0)
// muon (torch.optim.Muon with its defaults, adjust_lr_fn "original"): the hidden weight matrices (the blocks'
//   linear weights: hidden_matrices below) take Newton-Schulz orthogonalised momentum; every other tensor
//   (embeddings, head, norms, biases, scalars) takes AdamW with lr, beta1, beta2, adam_eps and weight_decay.
//   For a matrix G (A rows, B columns), with mu = muon_momentum:
//     b = mu b + (1-mu) g;   u = nesterov ? mu b + (1-mu) g : b
//     X = u / max(|u|_F, 1e-7), on u^T when A > B (so that X X^T is the smaller Gram matrix); muon_ns_steps times:
//       S = X X^T;   X = a X + (b S + c S S) X,    (a, b, c) = (3.4445, -4.7750, 2.0315)
//     p *= 1 - lr_m * muon_weight_decay;   p -= lr_m * sqrt(max(1, A / B)) * X   (X transposed back when A > B)
//   lr_m = muon_lr * lr / lr_peak: muon_lr follows the run's warm-up and schedule as lr does. PyTorch runs the
//   iteration in bfloat16; here it runs in T (float for training) with the products through kernels::gemm, whose
//   float path sums every element in a fixed order, so results do not depend on the thread count.
//
// Every optimizer folds gradient clipping into its pass (grad_scale multiplies each gradient value as it is
// read; 1 multiplies exactly) and can clear the gradients as it reads them. Its state is a list of named arrays
// as long as the parameter arena (a checkpoint stores array "adam.m" as adam.m.<param>, ...), plus the update
// count t.
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <string>
#include <string_view>
#include <vector>

namespace blocklab {

class ParameterTable;

enum class OptimizerKind { Adam, AdamW, RAdam, Sgd, Lion, Muon };
std::string to_string(OptimizerKind);
// Throws Error listing the valid names.
OptimizerKind parse_optimizer_kind(const std::string&);
// "adam, adamw, radam, sgd, lion or muon"
std::string optimizer_names();

// How Adam's second moment starts: zero (Adam's), or the first gradient squared (GI-Adam).
enum class AdamV0 { Zero, Grad };
std::string to_string(AdamV0);
AdamV0 parse_adam_v0(const std::string&);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::Adam;
  // adam, adamw, radam, and muon's AdamW part
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  AdamV0 adam_v0 = AdamV0::Zero;  // adam, adamw, radam
  // adamw, lion, muon's AdamW part: decoupled; radam, sgd: added to the gradient (L2); adam: none
  double weight_decay = 0.0;
  // sgd
  double momentum = 0.9;
  bool nesterov = false;
  // lion
  double lion_beta1 = 0.9;
  double lion_beta2 = 0.99;
  // muon's hidden matrices
  double muon_lr = 0.02;  // at the peak of the schedule, where lr is lr
  double muon_momentum = 0.95;
  bool muon_nesterov = true;
  int muon_ns_steps = 5;
  double muon_weight_decay = 0.0;
};

// Whether kind has Adam's state: m and v over every parameter, the preconditioner sqrt(v / (1 - b2^t)) + eps
// (what the curvature probe's preconditioned sharpness needs).
inline bool is_adam(OptimizerKind kind) { return kind == OptimizerKind::Adam || kind == OptimizerKind::AdamW; }

// How many arrays as long as the parameters the optimizer keeps: 2 for adam, adamw and radam, 1 for sgd (0
// without momentum) and lion, 3 for muon (its momentum, and AdamW's m and v).
int optimizer_state_arrays(const OptimizerOptions& options);

// A 2-D weight Muon orthogonalises: rows x cols elements at offset in the arenas, row-major.
struct MatrixRange {
  long offset = 0;
  int rows = 0, cols = 0;
};
// The model's hidden weight matrices: every block's linear weights (q/k/v or qkv, gate, output projection,
// cross-attention, MLP), not the embeddings, the head, norms, biases or scalars.
std::vector<MatrixRange> hidden_matrices(const ParameterTable& table);

// Newton-Schulz's coefficients and norm floor (torch.optim.Muon's: Keller Jordan's Muon).
inline constexpr double kMuonA = 3.4445, kMuonB = -4.7750, kMuonC = 2.0315, kMuonEps = 1e-7;

template <typename T>
class Optimizer {
 public:
  struct StateArray {
    std::string name;      // "adam.m", "sgd.momentum", ...
    std::span<T> values;   // as long as the parameter arena
  };

  virtual ~Optimizer() = default;

  // One update with learning rate lr; increments the update count first (bias correction uses t >= 1).
  void step(std::span<T> params, std::span<const T> grads, double lr);
  // The same update of a training step, with the gradient clipping folded in (each gradient value multiplied by
  // grad_scale as it is read: 1 for none, max_norm / norm to clip) and the gradients set to zero in the same pass
  // (the next backward finds them cleared: Model::grads_were_zeroed()).
  // Given rounded_params (as long as the arena; empty: none), an optimizer that writes one
  // (writes_rounded_params(): adam and adamw) also rounds each new parameter value to bf16 into it in the same pass
  // (as the bf16 products round their operands), so that the next forward reads the copy instead of rounding the
  // weights again; the others leave it as it was. Returns whether it wrote the copy.
  bool step_and_zero_grads(std::span<T> params, std::span<T> grads, double lr, double grad_scale,
                           std::span<uint16_t> rounded_params = {});
  virtual bool writes_rounded_params() const { return false; }

  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  // The state a checkpoint saves and restores, in a fixed order.
  virtual std::vector<StateArray> state() = 0;
  // One array by name; empty when this optimizer has none of that name.
  std::span<T> state(std::string_view name);

 protected:
  explicit Optimizer(size_t size) : size_(size) {}
  // The update itself, t_ already counting it. grads is written only when zero_grads is set.
  virtual void update(std::span<T> params, T* grads, double lr, double grad_scale, bool zero_grads) = 0;
  // update() with zero_grads set that also writes the rounded copy: called only where writes_rounded_params().
  virtual void update_rounded(std::span<T>, T*, double, double, uint16_t*) {}

  size_t size_;
  int64_t t_ = 0;
};

// adam and adamw (also what Muon runs on the tensors that are not hidden matrices).
template <typename T>
class Adam : public Optimizer<T> {
 public:
  Adam(const OptimizerOptions& options, size_t size);
  std::span<T> first_moment() { return m_; }
  std::span<T> second_moment() { return v_; }
  std::vector<typename Optimizer<T>::StateArray> state() override { return {{"adam.m", m_}, {"adam.v", v_}}; }
  using Optimizer<T>::state;
  bool writes_rounded_params() const override { return std::is_same_v<T, float>; }

  // The update of elements [begin, end) at update count t (with adamw's decay when `decoupled`), as update()
  // runs it over the whole arena.
  // rounded (nullptr: none; float only): the new values rounded to bf16, at the same offsets.
  void update_range(T* params, T* grads, long begin, long end, double lr, double grad_scale, bool zero_grads,
                    bool decoupled, int64_t t, uint16_t* rounded = nullptr);

 protected:
  void update(std::span<T> params, T* grads, double lr, double grad_scale, bool zero_grads) override;
  void update_rounded(std::span<T> params, T* grads, double lr, double grad_scale, uint16_t* rounded) override;

 private:
  OptimizerOptions options_;
  std::vector<T> m_, v_;
};

// Builds the optimizer options.kind names. hidden: Muon's matrices (ignored by the others); lr_peak: the run's
// lr (Muon scales muon_lr by lr / lr_peak at each step).
template <typename T>
std::unique_ptr<Optimizer<T>> make_optimizer(const OptimizerOptions& options, size_t size,
                                             std::vector<MatrixRange> hidden = {}, double lr_peak = 1.0);

extern template class Optimizer<float>;
extern template class Optimizer<double>;
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
