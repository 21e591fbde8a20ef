#pragma once
// Linear layer (PyTorch nn.Linear layout): out = inp @ weight^T + bias.
// precision (float only; double always runs in double): the products' operands in fp32, or rounded to bf16
// with float accumulation (bf16_gemm.h). Bias and bias gradient are float either way.
#include "kernels/bf16_gemm.h"

namespace blocklab::kernels {

// inp (N,C), weight (OC,C), bias (OC) or nullptr -> out (N,OC), overwritten. weight_version: nonzero when the
// weight is unchanged since every earlier call with the same version (SgemmExtras::b_version), so that the bf16
// path may keep its rounded copy; results are the same either way. weight_bf16 (nullptr: none): the weight
// already rounded to bf16 (round_to_bf16, same layout), read instead of rounding it where the bf16 products take
// rounded operands (bf16_gemm_takes_rounded_operands()) and ignored elsewhere; the same results.
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                    GemmPrecision precision = GemmPrecision::Fp32, uint64_t weight_version = 0,
                    const uint16_t* weight_bf16 = nullptr);

// How a backward kernel writes an input gradient: added to what the buffer holds (a residual stream's
// gradient gathers several terms), or written over it (a fresh buffer: no zeroing pass needed).
enum class GradWrite { Accumulate, Overwrite };

// dinp (N,C) (+)= dout @ weight as dinp_write says; accumulates (+=) into dweight (OC,C) and dbias (OC).
// Any of the three may be nullptr to skip it. dout (N,OC) is the gradient of the loss w.r.t. out. weight_version
// and weight_bf16 as for linear_forward. dweight_squares (OC values, with dweight; nullptr: none): each row's sum of
// squares of dweight as the call leaves it, as sum_of_squares (kernels/adam.h) sums a row, taken from the product's
// blocks while they are in cache where the GEMM runs here (SgemmExtras::c_row_squares), else in a pass: the
// gradient norm's share of this weight. Every backward below that writes a dweight takes it likewise.
template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N,
                     int C, int OC, GradWrite dinp_write = GradWrite::Accumulate,
                     GemmPrecision precision = GemmPrecision::Fp32, uint64_t weight_version = 0,
                     const uint16_t* weight_bf16 = nullptr, double* dweight_squares = nullptr);

// For a model whose bf16 products take rounded operands (bf16_gemm_takes_rounded_operands()): dout (N,OC) rounded
// to bf16 once for both of a linear layer's backward products (the input gradient's A, and the weight gradient's
// op(A) = dout^T, copied from it into panels where the tiles need them), and dbias (OC; nullptr: none) += its column
// sums in the same pass (the bits a_row_sums gives): dout's floats cross memory once instead of twice. The copy is
// this thread's, valid until its next call.
const uint16_t* rounded_for_backward(const float* dout, int N, int OC, float* dbias);

// linear_forward with the input kept rounded to bf16 (inp: (N,C) dense, round_to_bf16 of the float input), for a
// model whose bf16 products take rounded operands (an error elsewhere): the bits of linear_forward in bf16.
void linear_forward_rounded_input(float* out, const uint16_t* inp, const float* weight, const float* bias, int N, int C,
                                  int OC, uint64_t weight_version = 0, const uint16_t* weight_bf16 = nullptr);
// linear_backward's products with dout given rounded, its bias gradient taken by whoever rounded it: dinp (N,C)
// (+)= dout @ weight (nullptr: skipped), dweight (OC,C) += dout^T @ inp; weight_bf16 as for linear_forward.
void linear_backward_rounded_dout(float* dinp, float* dweight, const uint16_t* dout, const float* inp,
                                  const float* weight, int N, int C, int OC, GradWrite dinp_write,
                                  const uint16_t* weight_bf16 = nullptr, double* dweight_squares = nullptr);
// dweight (OC,C) += dout^T @ inp, dout given rounded (rounded_for_backward), inp as floats or (inp_bf16) rounded.
void linear_weight_backward_rounded(float* dweight, const uint16_t* dout, const float* inp, const uint16_t* inp_bf16,
                                    int N, int C, int OC, double* dweight_squares = nullptr);

}  // namespace blocklab::kernels
