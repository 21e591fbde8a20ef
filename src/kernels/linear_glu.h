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
// kernels run unfused (double, BLAS), nullptr: allocated then.
template <typename T>
void glu_linear_backward(T* dpre, T* dweight, T* dbias, const T* dout, const T* pre, const T* act, const T* weight,
                         int N, int I, int OC, GluKind kind, GemmPrecision precision = GemmPrecision::Fp32,
                         const uint16_t* weight_bf16 = nullptr, T* dact = nullptr);

}  // namespace blocklab::kernels
