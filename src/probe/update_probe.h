#pragma once
// Probes of the training step's update (train --update-probe-every N): at every N-th step and the run's last, what
// the update just taken did, per group of parameters, into OUT/updates.csv and the run's TensorBoard event file.
// A group is "embeddings" (the tensors before the first block), "block_1" .. "block_L" (all of a block's tensors),
// "head" (the tensors after the last block: the final norm and the head) or "all" (every tensor). Per group:
//
// 1. The spread of Adam's per-parameter step size (Liu et al. 2020, "On the Variance of the Adaptive Learning Rate
//    and Beyond"): for adam, adamw and radam (with adam_v0 = zero or grad: GI-Adam), over the group's elements i,
//      a_i = lr / (sqrt(v_hat_i) + eps),   v_hat = v / (1 - beta2^t),
//    with v the second moment after this step's update, t the updates taken (this one included) and lr this
//    update's learning rate: the step each parameter would take for a unit first moment. The columns give its
//    mean, standard deviation, coefficient of variation cv = std / mean, minimum, 5th, 50th and 95th percentiles
//    and maximum. The percentiles interpolate linearly between order statistics (numpy's default). a spans orders
//    of magnitude early in training (v_hat of a parameter that has seen one gradient is that gradient squared), so
//    p95 / p05 shows the spread best; cv is dominated by the few largest steps. For radam, a is the adaptive rate
//    its rectification r_t multiplies (before rho_t > 5 its update does not use it). Other optimizers keep no v (muon
//    keeps Adam's only for its non-matrix tensors): their step-size columns are empty.
// 2. The update-to-weight ratio |dW| / |W|: dW = W_after - W_before, the change this step made to the group's
//    weights (weight decay and the sphere stream's renormalisation included), W_before the weights before it, both
//    norms over all the group's tensors together. Blocks also get it per sub-layer (the attention's, the
//    cross-attention's and the MLP's tensors, norms included; empty where a block has none).
// 3. The critical sharpness along the update (Kalra et al. 2026), on the "all" row only (empty on the others). With
//    d = dW / lr, the update per unit learning rate (so that eta = lr is the step taken) and L the mean loss of this
//    step's own batch,
//      eta_c = the step size where L(W_before + eta d) crosses L(W_before) from below,   lambda_c = 2 / eta_c,
//    found with at most K = update_probe_passes forward passes (plus one for L(W_before)): from eta = lr, doubling
//    while L(W_before + eta d) <= L(W_before) (or halving while it is above), then bisecting the bracket
//    [eta_lo, eta_hi] (L <= L(W_before) at eta_lo, > at eta_hi; eta_lo may be 0) for the passes left. eta_c is the
//    bracket's midpoint, exact to (eta_hi - eta_lo) / 2. When no pass found the loss above L(W_before) (it still
//    falls at lr 2^(K-1)), eta_hi, eta_c and lambda_c are empty and eta_lo = lr 2^(K-1): lambda_c < 2 / eta_lo.
//    lambda_c compares with 2 / lr (edge_gd) as the sharpness does: on a quadratic L and gradient descent,
//    L(W + eta d) = L - eta g.g + eta^2 g.H.g / 2, so lambda_c = g.H.g / g.g, the curvature along the update, which
//    is the sharpness when g is the top eigenvector; lambda_c > 2 / lr means the update overshot, raising the
//    batch's loss. loss and loss_after are L(W_before) and L(W_before + dW). curvature.csv's rows of the same step
//    (measured after the update, on its own batch) join by step.
//
//   step,group,lr,params,step_size_mean,step_size_std,step_size_cv,step_size_min,step_size_p05,step_size_p50,
//   step_size_p95,step_size_max,update_norm,weight_norm,update_ratio,update_ratio_attention,update_ratio_cross,
//   update_ratio_mlp,loss,loss_after,eta_lo,eta_hi,eta_c,lambda_c,edge_gd,passes
//
// Rows come in the order embeddings, block_1 .. block_L, head, all. Every sum is taken in double in the table's
// order on one thread, and the forward passes give the same numbers for every thread count, so the values do not
// depend on the thread count. The trainer keeps a copy of the weights before a probed update; the line search
// writes its points into the model's weights, runs forward with the trainer's activations (free between steps) on
// the step's batch and puts the updated weights back bit for bit: probing never changes a run's numbers.
// TensorBoard: updates/lambda_c, updates/eta_c, and per group updates/update_ratio/<group>,
// updates/step_size_cv/<group> and updates/step_size_p95_over_p05/<group>.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "train/trainer.h"

namespace blocklab::probe {

// The spread of a = lr / (sqrt(v / (1 - beta2^t)) + eps) over the elements of `specs` (see above).
struct StepSizeSpread {
  long count = 0;
  double mean = 0, std = 0, cv = 0, min = 0, p05 = 0, p50 = 0, p95 = 0, max = 0;
};
StepSizeSpread step_size_spread(std::span<const float> v, const std::vector<const ParamSpec*>& specs, double lr,
                                double beta2, double eps, int64_t t);

// The linearly interpolated q-quantile (0 <= q <= 1) of values (reordered; not empty).
double quantile(std::vector<double>& values, double q);

// The critical step size's line search (see above): loss(eta) is L(W + eta d), loss0 = L(W), eta0 the first
// step tried (> 0), passes the most calls of loss.
struct CriticalStep {
  double loss_at_eta0 = 0;          // the first pass: loss(eta0)
  std::optional<double> lo, hi;     // the bracket; no hi when no pass rose above loss0 (lo: the largest tried)
  int passes = 0;                   // calls of loss made
  std::optional<double> eta_c() const {
    return hi ? std::optional<double>((*lo + *hi) / 2) : std::nullopt;
  }
};
CriticalStep critical_step(const std::function<double(double)>& loss, double loss0, double eta0, int passes);

// The groups of the rows, in order, with their tensors: embeddings, block_1 .. block_L, head, all.
struct ParamGroup {
  std::string name;
  int block = -1;  // 0-based block of block_N rows; -1 otherwise
  std::vector<const ParamSpec*> specs;
};
std::vector<ParamGroup> update_groups(const ParameterTable& table);

std::vector<std::string> update_columns();

// One probed step's rows (the CSV's fields) and TensorBoard scalars, from a trainer whose last step was probed
// (Trainer::params_before_update() not empty). Restores the model's weights exactly.
struct UpdateMeasurement {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::pair<std::string, double>> scalars;
};
UpdateMeasurement measure_update(Trainer& trainer);

class UpdateProbeWriter {
 public:
  explicit UpdateProbeWriter(std::string path);
  ~UpdateProbeWriter();
  UpdateProbeWriter(const UpdateProbeWriter&) = delete;
  UpdateProbeWriter& operator=(const UpdateProbeWriter&) = delete;

  // Measures when the trainer's last step was probed (Trainer::update_probed) and its update applied. The first
  // call opens the file: a new one at step 0 (before the first step), or, later (a resumed run), one that keeps the
  // rows of earlier steps.
  void operator()(Trainer& trainer);

 private:
  void open(int first_step);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace blocklab::probe
