#pragma once
// The learned gates and mixes of a sub-layer, as forward/backward kernels:
//   sigmoid gate (gated attention, Qiu et al. 2025)   gate = sigmoid(z), out = y * gate
//     backward: dz = dout * y * gate * (1 - gate),  dy = dout * gate
//   value mix (value residual, Zhou et al. 2024)      V = lambda1 V_own + lambda2 V_1 (V_1: the first block's values)
//     backward: d lambda1 = sum dV V_own,  d lambda2 = sum dV V_1 (in row order),  d V_own = lambda1 dV,
//               d V_1 += lambda2 dV
//   scaled residual (DeepNorm, Admin, ReZero)           resid = s * skip + g * branch, s a constant or a learned
//                                                      (C) vector omega, g a learned scalar (or 1)
//     backward: d g += sum d_resid branch,  d branch = g d_resid,  d omega += sum_n d_resid skip (row order),
//               d skip = s d_resid
// Serial loops in a fixed order: the same bits for any thread count.
namespace blocklab::kernels {

// z (n) -> gate = sigmoid(z) in place of z; out (n) = y * gate.
template <typename T>
void sigmoid_gate_forward(T* out, T* gate, const T* y, long n);
// On entry dy holds d out; on exit d y. dz (n) overwritten.
template <typename T>
void sigmoid_gate_backward(T* dz, T* dy, const T* y, const T* gate, long n);

// v: N rows of K values at a stride (the value part of fused [q | k | v] rows, or a (N, K) matrix). On exit
// v = lambda[0] v + lambda[1] first and v_own (N, K) holds v as it was.
template <typename T>
void value_mix_forward(T* v, long v_stride, T* v_own, const T* first, const T* lambda, long N, int K);
// On entry dv holds d V (rows at dv_stride); on exit d V_own. Adds (+=) into d_lambda (2) and d_first (N, K).
template <typename T>
void value_mix_backward(T* dv, long dv_stride, T* d_lambda, T* d_first, const T* v_own, const T* first,
                        const T* lambda, long N, int K);

// resid (N, C) = s * skip + g * branch, s = omega[i] per channel when omega is given, else s_const.
template <typename T>
void scaled_residual_forward(T* resid, const T* skip, const T* branch, const T* omega, T s_const, T g, long N, int C);
// On entry d holds d resid; on exit d skip. d_branch (N, C) overwritten. Adds (+=) d g into *d_gate and d omega
// into g_omega (C) where they are given (non-null).
template <typename T>
void scaled_residual_backward(T* d, T* d_branch, T* d_gate, T* g_omega, const T* skip, const T* branch,
                              const T* omega, T s_const, T g, long N, int C);

}  // namespace blocklab::kernels
