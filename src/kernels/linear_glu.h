#pragma once
// The MLP's gated activation (SwiGLU, GeGLU: kernels/glu.h) fused with the linear layers around it, as
// kernels/linear_gelu.h fuses GELU, so that the hidden activations cross memory once less in each direction:
//   forward:  pre = [value | gate] = inp @ fc1^T + b1,  act = value * f(gate)
//             (two products, value's then gate's; f applied to each finished block of gate's, whose value block is
//             complete by then)
//   backward: dact = dout @ fc2 written into dpre's value half, and each finished block turned there into
//             dvalue = dact * f(gate) and dgate = dact * value * f'(gate)
// Products and weight gradients equal the unfused kernels (linear_forward + glu_forward, linear_backward +
// glu_backward) bit for bit: every product element sums the same terms in the same order however its columns are
// split. The gated values and their gradients to rounding, ~1e-7, where the compiler's scalar remainder loop
// rounds differently from its vector loop at a block's edge. Results do not depend on the thread count.
// Double, and a GEMM that takes no epilogue (BLAS), run the unfused kernels.
#include "kernels/glu.h"
#include "kernels/linear.h"

namespace blocklab::kernels {

// inp (N,C), weight (2I,C) as [value rows | gate rows], bias (2I) or nullptr -> pre (N,2I) and act (N,I), both
// overwritten. weight_bf16 as for linear_forward (the rounded weight, same layout; nullptr: none).
template <typename T>
void linear_glu_forward(T* act, T* pre, const T* inp, const T* weight, const T* bias, int N, int C, int I, GluKind kind,
                        GemmPrecision precision = GemmPrecision::Fp32, const uint16_t* weight_bf16 = nullptr);

// Backward of out = act @ weight^T + bias with act = glu(pre), weight (OC,I), pre (N,2I) and act (N,I) from the
// forward, dout (N,OC): dpre (N,2I) = the GLU's backward of dout @ weight, overwritten; dweight (OC,I) += dout^T @
// act; dbias (OC) += sum_n dout (dweight, dbias: nullptr skips). dact: (N,I) room for dout @ weight where the
// kernels run unfused (double, BLAS), nullptr: allocated then. dweight_squares: dweight's row sums of squares, as
// linear_backward takes them.
template <typename T>
void glu_linear_backward(T* dpre, T* dweight, T* dbias, const T* dout, const T* pre, const T* act, const T* weight,
                         int N, int I, int OC, GluKind kind, GemmPrecision precision = GemmPrecision::Fp32,
                         const uint16_t* weight_bf16 = nullptr, T* dact = nullptr, double* dweight_squares = nullptr);

// The bf16 forms for a model whose bf16 products take rounded operands (bf16_gemm_takes_rounded_operands(); an error
// elsewhere), as linear_gelu.h has them: the hidden tensors that only products read are kept rounded to bf16, dense,
// half the bytes written and read and no rounding pass before the products that read them. weight_bf16 as above.
// Forward: pre as linear_glu_forward (bf16) gives it, act (N,I) its act rounded.
void linear_glu_forward_rounded_act(uint16_t* act, float* pre, const float* inp, const float* weight,
                                    const float* bias, int N, int C, int I, GluKind kind,
                                    const uint16_t* weight_bf16 = nullptr);
// Backward: dpre (N,2I) = glu_linear_backward's (bf16) dpre rounded (fc1's backward reads it:
// linear_backward_rounded_dout), and dpre_bias (2I; fc1's bias gradient, nullptr: none) += its float values' column
// sums, taken here: from zero per tile of the product (tiles start at multiples of 16 rows; thread-count
// independent), the tiles' sums then added in row order. act: the rounded act. dweight and dbias as
// glu_linear_backward gives them.
void glu_linear_backward_rounded_dpre(uint16_t* dpre, float* dpre_bias, float* dweight, float* dbias,
                                      const float* dout, const float* pre, const uint16_t* act, const float* weight,
                                      int N, int I, int OC, GluKind kind, const uint16_t* weight_bf16 = nullptr,
                                      double* dweight_squares = nullptr);

}  // namespace blocklab::kernels
