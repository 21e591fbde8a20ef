#pragma once
// nGPT, the normalized transformer (Loshchilov et al. 2024; docs/placements.md): the one design whose residual
// stream lives on the unit sphere (ResidualStream::Sphere). Everything it adds to a stack of blocks is here or in
// kernels/unit_norm.h: its config constraints, the factors of its learned scales, its initialisation and the
// renormalisation of its weights after every optimizer step. The block and the stack read only the stream
// axis (ModelConfig::stream) and call these.
//
//   h <- U(A + |alpha| (U(F(x)) - A)), A = U(x), U(v) = v / ||v||, per sub-layer (SublayerPlan::normalized_update)
//   q, k <- U(q_h) s_qk, U(k_h) s_qk per head (softmax scale sqrt(D));  fc1's outputs times s_uv;
//   logits <- s_z (h_L head^T);  no norm layers, no final norm
//
// The learned scales are stored as p and used as p * (init / scale), p starting at `scale` (the paper's
// trick to give them the optimizer's step size of the other weights):
//   alpha (C per sub-layer): init 0.05, scale 1/sqrt(C);   s_qk (Q): init 1, scale 1/sqrt(C)
//   s_uv (fc1's outputs): init 1, scale 1, used times sqrt(C);   s_z (V): init 1, scale 1/sqrt(C)
#include "model/config.h"
#include "model/parameters.h"
#include "util/rng.h"

namespace blocklab {

// The constants the stored scales are multiplied by where they are used.
struct SphereFactors {
  double alpha, s_qk, s_uv, s_z;
  static SphereFactors of(const ModelConfig& config);
};

// Throws Error for the keys nGPT cannot combine with (cross-attention, qk_norm, a tied head, grouped-query
// attention, bf16, a norm kind other than the default).
void check_sphere_config(const ModelConfig& config);

// nGPT's init for one parameter: every linear weight and embedding N(0, 1/C), output projections
// N(0, 1/(2 N C)); the learned scales at their stored starts (s_uv: 1; alpha, s_qk, s_z: 1/sqrt(C)). Returns
// false for the parameters it leaves to the common init (biases, the value-residual mix).
template <typename T>
bool sphere_init(T* p, const ParamSpec& spec, const ModelConfig& config, Rng& rng);

// Every weight vector along the width to unit L2 norm: q, k, v, fc1, the head and the token embedding by rows
// (over their C inputs), the output projections and fc2 by columns (over their C outputs). After init and after
// every optimizer step.
template <typename T>
void normalize_onto_sphere(T* params, const ParameterTable& table);

}  // namespace blocklab
