#pragma once
// The elementwise passes of the optimizers other than Adam / AdamW (those are kernels/adam.h), vectorised at the
// running instruction-set level and split over the threads in fixed chunks, as adam_update is: every element's
// arithmetic is its own, so results do not depend on the thread count. Each pass reads each array once, takes the
// gradient times grad_scale (clipping folded in: 1 multiplies exactly) and, when zero_grads is set, sets the
// gradient to 0 after reading it. The formulas (train/optimizer.h has the optimizers around them):
//
// radam_update, torch.optim.RAdam with decoupled_weight_decay=False:
//   g' = g * grad_scale + weight_decay * p        (L2: the decay is part of the gradient the moments see)
//   m  = b1 m + (1 - b1) g';   v = b2 v + (1 - b2) g'^2
//   rectified (rho_t > 5):  p -= step_size * m * sqrt_bc2 / (sqrt(v) + eps),   step_size = lr * r_t / (1 - b1^t)
//   otherwise:              p -= step_size * m,                                 step_size = lr / (1 - b1^t)
//
// sgd_update, torch.optim.SGD with dampening 0 (momentum 0: no buffer, b is not read):
//   g' = g * grad_scale + weight_decay * p;   b = momentum b + g'   (b starts at 0, so b_1 = g'_1 as in PyTorch)
//   p -= lr * (nesterov ? g' + momentum b : b)
//
// lion_update, Lion (Chen et al. 2023), decoupled weight decay:
//   c = b1 m + (1 - b1) g';   p -= lr (sign(c) + weight_decay p);   m = b2 m + (1 - b2) g'    (sign(0) = 0)
//
// square_grads: v = (g * grad_scale)^2, Adam's second moment taken from the first gradient (adam_v0 = grad).
//
// muon_momentum: Muon's momentum on one matrix, as torch.optim.Muon (an average, not a sum):
//   b = mu b + (1 - mu) g';   u = nesterov ? mu b + (1 - mu) g' : b
// muon_apply: p = p * decay - step * o, the orthogonalised update o read transposed when `transposed` (o is then
// (cols, rows)): decay = 1 - lr * muon_weight_decay, step = the shape-adjusted lr.
namespace blocklab::kernels {

template <typename T>
struct RAdamCoefficients {
  T beta1, beta2, weight_decay, step_size, sqrt_bc2, eps;
  bool rectified;
};

template <typename T>
void radam_update(T* p, T* g, T* m, T* v, long n, const RAdamCoefficients<T>& c, T grad_scale, bool zero_grads);

template <typename T>
struct SgdCoefficients {
  T lr, momentum, weight_decay;
  bool nesterov;
};

// b may be null when momentum is 0.
template <typename T>
void sgd_update(T* p, T* g, T* b, long n, const SgdCoefficients<T>& c, T grad_scale, bool zero_grads);

template <typename T>
struct LionCoefficients {
  T lr, beta1, beta2, weight_decay;
};

template <typename T>
void lion_update(T* p, T* g, T* m, long n, const LionCoefficients<T>& c, T grad_scale, bool zero_grads);

template <typename T>
void square_grads(T* v, const T* g, long n, T grad_scale);

template <typename T>
void muon_momentum(T* u, T* g, T* b, long n, T mu, bool nesterov, T grad_scale, bool zero_grads);

// p (rows, cols); o (rows, cols), or (cols, rows) when transposed.
template <typename T>
void muon_apply(T* p, const T* o, int rows, int cols, bool transposed, T decay, T step);

}  // namespace blocklab::kernels
