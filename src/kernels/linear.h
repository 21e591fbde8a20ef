#pragma once
// Linear layer (PyTorch nn.Linear layout): out = inp @ weight^T + bias.
// precision (float only; double always runs in double): the products' operands in fp32, or rounded to bf16
// with float accumulation (bf16_gemm.h). Bias and bias gradient are float either way.
#include "kernels/bf16_gemm.h"

namespace blocklab::kernels {

// inp (N,C), weight (OC,C), bias (OC) or nullptr -> out (N,OC), overwritten. weight_version: nonzero when the
// weight is unchanged since every earlier call with the same version (SgemmExtras::b_version), so that the bf16
// path may keep its rounded copy; results are the same either way.
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                    GemmPrecision precision = GemmPrecision::Fp32, uint64_t weight_version = 0);

// How a backward kernel writes an input gradient: added to what the buffer holds (a residual stream's
// gradient gathers several terms), or written over it (a fresh buffer: no zeroing pass needed).
enum class GradWrite { Accumulate, Overwrite };

// dinp (N,C) (+)= dout @ weight as dinp_write says; accumulates (+=) into dweight (OC,C) and dbias (OC).
// Any of the three may be nullptr to skip it. dout (N,OC) is the gradient of the loss w.r.t. out.
template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N,
                     int C, int OC, GradWrite dinp_write = GradWrite::Accumulate,
                     GemmPrecision precision = GemmPrecision::Fp32, uint64_t weight_version = 0);

// The same products with the input kept rounded to bf16 (inp: (N,C) dense, round_to_bf16 of the float input), for
// a model whose bf16 products take rounded operands (bf16_gemm_takes_rounded_operands(); it is an error to call them
// elsewhere): the bits of linear_forward (in bf16) and of linear_backward's weight and bias terms.
void linear_forward_rounded_input(float* out, const uint16_t* inp, const float* weight, const float* bias, int N, int C,
                                  int OC, uint64_t weight_version = 0);
void linear_weight_backward_rounded_input(float* dweight, float* dbias, const float* dout, const uint16_t* inp, int N,
                                          int C, int OC);

}  // namespace blocklab::kernels
