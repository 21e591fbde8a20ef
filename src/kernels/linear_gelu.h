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

// What linear_gelu_forward leaves in `pre` for the backward.
enum class GeluSaved {
  PreActivation,  // pre = the product inp W^T + b
  Derivative,     // pre = gelu'(product): the backward multiplies by it instead of evaluating GELU's derivative
};

// inp (N,C), weight (OC,C), bias (OC) -> pre (N,OC) and act = gelu(pre) (N,OC), both overwritten.
// With want_derivative, the fused float path (blocklab's own GEMMs) computes gelu' beside gelu from the same
// erf and exponential, and stores it over the product: the backward then skips GELU's most expensive part.
// Returns what `pre` holds; without want_derivative, or where the GEMM is not fused, the product.
template <typename T>
GeluSaved linear_gelu_forward(T* act, T* pre, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                              GemmPrecision precision = GemmPrecision::Fp32, GeluForm form = GeluForm::Erf,
                              bool want_derivative = false);

// Backward of out = gelu(pre) @ weight^T + bias (the second MLP layer applied to the GELU output), with
// weight (OC,C), pre and act = gelu(pre) (N,C) from the forward, dout (N,OC):
//   dpre (N,C) = (dout @ weight) * gelu'(pre), overwritten;  dweight += dout^T @ act;  dbias += sum_n dout.
// dweight_squares: dweight's row sums of squares, as linear_backward takes them.
// saved: what linear_gelu_forward returned (Derivative: `pre` holds gelu'(pre)). Either way dpre is the same,
// bit for bit, on the fused path.
template <typename T>
void gelu_linear_backward(T* dpre, T* dweight, T* dbias, const T* dout, const T* pre, const T* act, const T* weight,
                          int N, int C, int OC, GemmPrecision precision = GemmPrecision::Fp32, GeluForm form = GeluForm::Erf,
                          GeluSaved saved = GeluSaved::PreActivation, double* dweight_squares = nullptr);

// The bf16 forms for a model whose bf16 products take rounded operands (bf16_gemm_takes_rounded_operands(); an error
// elsewhere), where the MLP's hidden tensors are read only by products, which round them: they are kept rounded to
// bf16, (N, C) dense, half the bytes written and read and no rounding pass before the products that read them.
// weight_bf16 (nullptr: none): the weight already rounded, as linear_forward takes it.
// Forward: act as linear_gelu_forward (bf16, want_derivative) computes it, rounded; `pre` holds gelu', as there.
void linear_gelu_forward_rounded_act(uint16_t* act, float* pre, const float* inp, const float* weight,
                                     const float* bias, int N, int C, int OC, GeluForm form,
                                     const uint16_t* weight_bf16 = nullptr);
// Backward: dpre = (dout @ weight) * gelu' rounded (fc1's backward reads it: linear_backward_rounded_dout), and
// dpre_bias (C; fc1's bias gradient, nullptr: none) += its float values' column sums, taken here: from zero per
// tile of the product (192 rows; thread-count independent), the tiles' sums then added in row order. dweight and
// dbias as gelu_linear_backward gives them (act rounded: its values, the same bits).
void gelu_linear_backward_rounded_dpre(uint16_t* dpre, float* dpre_bias, float* dweight, float* dbias,
                                       const float* dout, const float* derivative, const uint16_t* act,
                                       const float* weight, int N, int C, int OC,
                                       const uint16_t* weight_bf16 = nullptr, double* dweight_squares = nullptr);

}  // namespace blocklab::kernels
