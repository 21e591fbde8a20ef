#pragma once
// Hyper-connections (Zhu et al., ICLR 2025): the residual stream widened to n = residual_streams streams
// H = (H_1 .. H_n), each (N,C), stored stream after stream as (n, N, C). Around every sub-layer T (self-
// attention, MLP; its branch with its input norm, model/block.h: sublayer_branch_forward):
//   h = sum_i A_m[i] H_i                   (width connection: the branch's input)
//   H'_j = B[j] T(h) + sum_i A_r[i][j] H_i  (depth connection)
// static (hc_dynamic = false): A_m (n), A_r (n,n), B (n) are learned constants, at init A_m = e_(k mod n) for
// the k-th sub-layer (0-based over the stack), A_r = I, B = 1; with n = 1 this is Pre-LN exactly.
// dynamic (hc_dynamic = true): per token, from Hn_i = Norm(H_i) (the config's norm kind, its own parameters):
//   A_m(H)[i]    = A_m[i]    + s_a f(Hn_i . W_m)
//   A_r(H)[i][j] = A_r[i][j] + s_a f(Hn_i . W_r[:, j])
//   B(H)[j]      = B[j]      + s_b f(Hn_j . W_b)
// with f = tanh, W_m (C), W_r (C,n), W_b (C) zero and s_a, s_b 0.01 at init.
// mhc (manifold-constrained, Xie et al. 2025), as the `hyper-connections` package's
// ManifoldConstrainedHyperConnections computes it: f = identity and A_r's dynamic term its own scale
// (scale_alpha = (s_m, s_r)); the three pre-activations above then go through
//   A_m(H) = sigmoid(.),  B(H) = 2 sigmoid(.),  A_r(H) = Sinkhorn(.)
// Sinkhorn: M = exp(P - max_i P[i][j]), then 20 times: divide each column by its sum, then each row by its sum
// (doubly stochastic: rows sum to 1 exactly, columns to within the iteration's convergence). Static and
// dynamic alike; the static init (A_m = e_k, A_r = I, B = 1) is the package's too.
// The stack starts from n copies of the embedding and sums the streams before the final norm and head.
#include "model/block.h"
#include "model/config.h"
#include "model/parameters.h"

namespace blocklab {

// What the mixing of one sub-layer saves for its backward.
template <typename T>
struct HyperActs {
  T* h = nullptr;      // (N,C) the branch's input
  T* out = nullptr;    // (n,N,C) the streams after the sub-layer
  T* sum = nullptr;    // (N,C) [the MLP sub-layer] sum_j out_j: the block's output stream
  T* a_in = nullptr;   // (N,n) A_m(H) per token
  T* a_res = nullptr;  // (N,n,n) A_r(H) [i][j] per token
  T* b = nullptr;      // (N,n) B(H) per token
  NormActs<T> norm;    // [dynamic] (n*N rows) Norm(H_i), row i*N + t
  T* f_in = nullptr;   // [dynamic] (N,n) f(Hn_i . W_m)
  T* f_res = nullptr;  // [dynamic] (N,n,n) f(Hn_i . W_r[:, j])
  T* f_b = nullptr;    // [dynamic] (N,n) f(Hn_j . W_b)
  T* pre_res = nullptr;  // [mhc] (N,n,n) A_r(H) before the Sinkhorn projection
};

// mhc's projection of one (n,n) matrix P (row-major) onto the doubly stochastic ones (see the top), into M.
template <typename T>
void sinkhorn_forward(T* M, const T* P, int n);
// Its backward: dP (overwritten; it may be dM) from dM, P as given to the forward.
template <typename T>
void sinkhorn_backward(T* dP, const T* dM, const T* P, int n);
inline constexpr int kSinkhornIterations = 20;

// Working memory of the backward of one sub-layer's mixing, shared by all of them.
template <typename T>
struct HyperScratch {
  T* dh = nullptr;        // (N,C) d loss / d h
  T* d_branch = nullptr;  // (N,C) d loss / d T(h)
  T* d_in = nullptr;      // (N,n) d loss / d A_m(H)
  T* d_res = nullptr;     // (N,n,n)
  T* d_b = nullptr;       // (N,n)
  T* d_norm = nullptr;    // [dynamic] (n,N,C) d loss / d Hn
  T* d_streams = nullptr;  // (n,N,C) the second stream-gradient buffer
};

// Sizes in elements (a null base counts, a real base binds). `with_sum`: carve HyperActs::sum.
template <typename T>
long carve_hyper_acts(HyperActs<T>& a, T* base, const ModelConfig& c, long N, bool with_sum);
template <typename T>
long carve_hyper_scratch(HyperScratch<T>& s, T* base, const ModelConfig& c, long N);

// Width connection: from the streams H (n,N,C), the per-token weights and a.h.
template <typename T>
void hyper_input_forward(HyperActs<T>& a, const T* H, const HyperTensors<T>& w, const ModelConfig& c, long N);
// Depth connection: a.out = B T(h) + A_r^T H; a.sum when carved.
template <typename T>
void hyper_output_forward(HyperActs<T>& a, const T* H, const T* branch, const ModelConfig& c, long N);

// Backward of the depth connection: d_out (n,N,C) = d loss / d a.out -> dH (n,N,C) overwritten with
// sum_j A_r[i][j] d_out_j, s.d_branch, s.d_res, s.d_b.
template <typename T>
void hyper_output_backward(T* dH, HyperScratch<T>& s, const T* d_out, const HyperActs<T>& a, const T* H,
                           const T* branch, const ModelConfig& c, long N);
// Backward of the width connection and of the weights: s.dh = d loss / d h. Unless `dh_in_dH` (the branch's
// backward already added dh into dH, see model.cpp), dH_i += A_m(H)[i] dh. Then the weights' gradients into g
// and, for the dynamic form, d loss / d H through Norm(H) into dH.
template <typename T>
void hyper_input_backward(T* dH, HyperScratch<T>& s, const HyperTensors<T>& g, const HyperActs<T>& a, const T* H,
                          const HyperTensors<T>& w, const ModelConfig& c, long N, bool dh_in_dH);

}  // namespace blocklab
