#pragma once
// Per-row normalisations over the last dimension C (one row = one token), and the element-wise DyT that
// takes a norm's place in normalisation-free transformers (Zhu et al. 2025).
//   LayerNorm: y = (x - mean) * rstd * weight + bias,   rstd = 1/sqrt(var + eps), var the population variance
//   RMSNorm:   y = x * rstd * weight,                    rstd = 1/sqrt(mean(x^2) + eps)
//   DyT:       y = weight * tanh(alpha * x) + bias,      alpha one learnable scalar
//   Derf:      y = weight * erf(alpha * x + shift) + bias, alpha and shift one learnable scalar each
namespace blocklab::kernels {

// inp (N,C), weight (C), bias (C) -> out (N,C); saves mean (N) and rstd (N) for the backward pass.
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N, int C,
                       T eps);
// Accumulates (+=) dinp (N,C), dweight (C), dbias (C).
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C);

// inp (N,C), weight (C) -> out (N,C); saves rstd (N).
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, T eps);
// Accumulates (+=) dinp (N,C), dweight (C).
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rstd, int N,
                      int C);

// inp (N,C), weight (C), bias (C), alpha (1) -> out (N,C). Nothing to save: the backward recomputes tanh.
template <typename T>
void dyt_forward(T* out, const T* inp, const T* weight, const T* bias, const T* alpha, int N, int C);
// Accumulates (+=) dinp (N,C), dweight (C), dbias (C), dalpha (1); sums over rows in row order.
template <typename T>
void dyt_backward(T* dinp, T* dweight, T* dbias, T* dalpha, const T* dout, const T* inp, const T* weight,
                  const T* alpha, int N, int C);

// inp (N,C), weight (C), bias (C), alpha (1), shift (1) -> out (N,C). Nothing to save.
template <typename T>
void derf_forward(T* out, const T* inp, const T* weight, const T* bias, const T* alpha, const T* shift, int N, int C);
// Accumulates (+=) dinp (N,C), dweight (C), dbias (C), dalpha (1), dshift (1); sums over rows in row order.
template <typename T>
void derf_backward(T* dinp, T* dweight, T* dbias, T* dalpha, T* dshift, const T* dout, const T* inp, const T* weight,
                   const T* alpha, const T* shift, int N, int C);

}  // namespace blocklab::kernels
