#pragma once
// Curvature of the training loss L(theta) on one fixed batch: Hessian-vector products, the largest
// eigenvalues of the Hessian (sharpness) by Lanczos, Adam's preconditioned sharpness, the trace by
// Hutchinson, and the sharpness of the Hessian restricted to one block's parameters.
//
// Hessian-vector products: central differences of the analytic gradient of the double-precision model
// (the path the gradient checks verify), along the unit vector u = v / |v|:
//   H v = |v| (g(theta + h u) - g(theta - h u)) / (2 h)                                  (order 2, default)
//   H v = |v| (-g(theta + 2h u) + 8 g(theta + h u) - 8 g(theta - h u) + g(theta - 2h u)) / (12 h)   (order 4)
// with h = 1e-4 (order 2) or 1e-3 (order 4). The truncation error is (h^2 / 6) D^3L[u,u,u] (order 2), the
// rounding error about 1e-16 |g| / h. Restricted to a set of parameters S (one block), only theta_S moves and
// only g_S is read: the product of the block H_SS of the Hessian.
//
// Estimators (every one a function of the fixed batch and a seed; bit-identical for any thread count):
//   sharpness                lambda_1(H), the largest (algebraic) eigenvalue; top k by Lanczos
//   preconditioned sharpness lambda_1(P^-1 H), P = (1 - beta1^t) diag(sqrt(v_hat) + eps),
//                            v_hat = v / (1 - beta2^t), from Adam's second moment v after t updates
//                            (Cohen et al. 2022's definition); computed as lambda_1(P^-1/2 H P^-1/2),
//                            which has the same eigenvalues. Undefined before the first update (t = 0).
//   trace                    Hutchinson: mean over Rademacher z of z^T H z, with its standard error
//   per-block sharpness      lambda_1(H_ll), the Hessian restricted to the parameters of block l
// Lanczos keeps every basis vector and reorthogonalises each new one against all of them (twice); it stops
// when the residual bound beta_j |s_ji| of each of the top k Ritz pairs is at most tol |theta_i|, when the
// Krylov space is exhausted, or after max_iter products (then converged = false).
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data/copy_task.h"
#include "model/model.h"

namespace blocklab::probe {

// A set of parameters: element ranges (offset, count) of the parameter arena, without alignment padding.
struct ParamSubset {
  std::vector<std::pair<long, long>> ranges;
  long size = 0;
};
ParamSubset all_parameters(const ParameterTable& table);
// The parameters of block `block` (0-based, blocks.N.*).
ParamSubset block_parameters(const ParameterTable& table, int block);

// A linear operator on packed vectors of a subset: out = A v (n values each).
using LinearOperator = std::function<void(const double* v, double* out)>;

// The loss of a model on one fixed batch, in double precision, and its Hessian-vector products.
class CurvatureLoss {
 public:
  // weights: a parameter arena of `config`'s table (the float training model's, or a double one), copied.
  // batch: inputs, targets and loss mask (B, T), T <= config.seq_len.
  CurvatureLoss(const ModelConfig& config, std::span<const float> weights, const Batch& batch);
  CurvatureLoss(const ModelConfig& config, std::span<const double> weights, const Batch& batch);

  const ParameterTable& table() const { return model_.table(); }
  const ModelConfig& config() const { return model_.config(); }
  // The loss at theta and its gradient (the full arena).
  double loss() const { return loss_; }
  std::span<const double> gradient() const { return grad_; }
  std::span<const double> weights() const { return base_; }

  // Finite-difference order (2 or 4) and step h; throws Error for other orders or h <= 0.
  void set_method(int order, double step);
  int order() const { return order_; }
  double step() const { return step_; }
  // "central differences of double-precision gradients, order 2, h = 0.0001"
  std::string method() const;

  // out = H_SS v for packed vectors of the subset (v, out: subset.size values). 2 (order 2) or 4 gradients.
  void hvp(const ParamSubset& subset, const double* v, double* out);
  LinearOperator hessian(const ParamSubset& subset);
  // Gradients computed so far (forward + backward passes).
  long gradients() const { return gradients_; }

 private:
  template <typename W>
  void init(std::span<const W> weights, const Batch& batch);  // the weights (checked against the model), then init
  void init(const Batch& batch);
  // The gradient at the current parameters (model_.params()) into grad.
  double evaluate(std::vector<double>& grad);

  Model<double> model_;
  Activations<double> acts_;
  Batch batch_;
  std::vector<double> base_, grad_, work_;
  double loss_ = 0;
  int order_ = 2;
  double step_ = 1e-4;
  long gradients_ = 0;
};

// Eigenvalues (ascending) and eigenvectors (column j of the row-major n x n `vectors` belongs to value j)
// of a symmetric matrix (row-major n x n; only its symmetric part is used), by cyclic Jacobi rotations.
struct SymmetricEigen {
  std::vector<double> values;
  std::vector<double> vectors;
};
SymmetricEigen symmetric_eigen(std::vector<double> a, int n);

struct LanczosOptions {
  int top = 1;          // eigenvalues wanted (the largest, algebraic)
  int max_iter = 50;    // products at most (each basis vector is kept: max_iter * n doubles)
  double tol = 1e-5;    // convergence: residual bound <= tol |theta| for each of the top k
  uint64_t seed = 0;    // the start vector's normal draws
  std::function<void(int iteration, double top)> progress;
};
struct LanczosResult {
  std::vector<double> values;     // the top k Ritz values, descending
  std::vector<double> residuals;  // their residual bounds beta_j |s_ji| (|H y - theta y| for exact products)
  int iterations = 0;
  bool converged = false;
};
// The largest eigenvalues of a symmetric operator on R^n (n >= 1).
LanczosResult lanczos_top(const LinearOperator& op, long n, const LanczosOptions& options);

struct TraceEstimate {
  double value = 0;
  double std_error = 0;  // sample standard deviation / sqrt(samples) (0 for one sample)
  int samples = 0;
};
// Hutchinson: the mean of z^T A z over `samples` Rademacher vectors z drawn from seed.
TraceEstimate hutchinson_trace(const LinearOperator& op, long n, int samples, uint64_t seed);

// Adam's state after t updates: the second moment v (the parameter arena's layout) and the options.
struct AdamMoments {
  std::span<const float> v;
  int64_t t = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};
// P's diagonal on the subset: (1 - beta1^t) (sqrt(v / (1 - beta2^t)) + eps). Throws Error for t < 1.
std::vector<double> adam_preconditioner(const AdamMoments& adam, const ParamSubset& subset);

struct CurvatureOptions {
  int top = 1;             // eigenvalues of H reported
  int max_iter = 50;       // Lanczos products for sharpness and preconditioned sharpness
  double tol = 1e-5;
  int trace_samples = 8;   // Hutchinson samples (0: no trace)
  bool per_block = true;   // sharpness of each block's H_ll
  int block_max_iter = 30;
  double block_tol = 1e-3;
  int order = 2;           // finite-difference order, 2 or 4
  double step = 0;         // finite-difference step h; 0: 1e-4 (order 2) or 1e-3 (order 4)
  uint64_t seed = 0;       // Lanczos start vectors and Hutchinson's probes
  // What is being computed and how far it is: stage, gradients done, gradients at most for the whole estimate.
  std::function<void(const std::string& stage, long done, long total)> progress;
};

struct CurvatureResult {
  std::vector<double> top;        // top-k eigenvalues of H, descending; top[0] is the sharpness
  std::vector<double> residuals;
  int iterations = 0;
  bool converged = false;
  std::optional<double> preconditioned;  // lambda_1(P^-1 H); absent without Adam's state or at t = 0
  int preconditioned_iterations = 0;
  bool preconditioned_converged = false;
  std::optional<TraceEstimate> trace;
  std::vector<double> per_block;  // lambda_1(H_ll), blocks 1..L
  double loss = 0;
  std::string method;
  long gradients = 0;
  double seconds = 0;
};

// Gradient evaluations that measure_curvature needs at most with these options (for an expected time).
long curvature_gradient_budget(const ModelConfig& config, const CurvatureOptions& options, bool preconditioned);
// Every estimate above for loss.weights() on its batch; adam may be null.
CurvatureResult measure_curvature(CurvatureLoss& loss, const AdamMoments* adam, const CurvatureOptions& options);

}  // namespace blocklab::probe
