#pragma once
// The MLP's GELU fused with the linear layers around it, so that the (N, hidden) activations cross
// memory once less in each direction:
//   forward:  pre = inp @ fc1^T + b1,  act = gelu(pre)       (GELU applied to each finished GEMM block)
//   backward: dpre = (dout @ fc2) * gelu'(pre)               (GELU derivative applied the same way)
// Either GELU: the exact erf form (kernels/gelu.h) or GPT-2's tanh approximation (kernels/gelu_tanh.h).
// Products and weight gradients equal the unfused kernels (linear_forward + gelu_forward or gelu_tanh_forward,
// linear_backward + the GELU's backward) bit for bit; GELU values and derivatives to rounding, ~1e-7 (at a
// block's edge the compiler's scalar remainder loop may round differently from its vector loop). Blocks are whole register-tile
// columns wherever the thread split falls, so results do not depend on the thread count.
#include "kernels/linear.h"

namespace blocklab::kernels {

enum class GeluForm { Erf, Tanh };

// inp (N,C), weight (OC,C), bias (OC) -> pre (N,OC) and act = gelu(pre) (N,OC), both overwritten.
template <typename T>
void linear_gelu_forward(T* act, T* pre, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                         GemmPrecision precision = GemmPrecision::Fp32, GeluForm form = GeluForm::Erf);

// Backward of out = gelu(pre) @ weight^T + bias (the second MLP layer applied to the GELU output), with
// weight (OC,C), pre and act = gelu(pre) (N,C) from the forward, dout (N,OC):
//   dpre (N,C) = (dout @ weight) * gelu'(pre), overwritten;  dweight += dout^T @ act;  dbias += sum_n dout.
template <typename T>
void gelu_linear_backward(T* dpre, T* dweight, T* dbias, const T* dout, const T* pre, const T* act, const T* weight,
                          int N, int C, int OC, GemmPrecision precision = GemmPrecision::Fp32, GeluForm form = GeluForm::Erf);

}  // namespace blocklab::kernels
