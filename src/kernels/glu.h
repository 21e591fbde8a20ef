#pragma once
// Gated MLP activations (Shazeer 2020, "GLU Variants Improve Transformer"): the up projection produces
// 2I columns per token, split into a value half and a gate half, and
//   out = value * act(gate),   SwiGLU: act(x) = silu(x) = x sigmoid(x);   GeGLU: act(x) = x Phi(x) (erf GELU).
// Backward:  dvalue = dout * act(gate),   dgate = dout * value * act'(gate),
//   silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))),   gelu'(x) = Phi(x) + x phi(x).
// Row layout [value | gate] (value = columns 0..I-1, gate = columns I..2I-1) is that of diffusers' GEGLU,
// `hidden, gate = proj(x).chunk(2)`. Float uses the fast_math exp/erf approximations, double libm.
namespace blocklab::kernels {

enum class GluKind { SwiGLU, GeGLU };

// inp (N, 2I) -> out (N, I), overwritten.
template <typename T>
void glu_forward(T* out, const T* inp, int N, int I, GluKind kind);

// dout (N, I), inp (N, 2I) -> dinp (N, 2I), overwritten.
template <typename T>
void glu_backward(T* dinp, const T* dout, const T* inp, int N, int I, GluKind kind);

// The same on a block of rows, for a GEMM epilogue (kernels/linear_glu.h): `rows` rows of `cols` hidden units,
// each operand with its own distance from row to row (the backward's value, gate, dvalue and dgate pre_ld). The
// same bits as the whole-matrix forms (the same inlined row functions), except where the compiler's scalar remainder
// loop rounds differently from its vector loop (~1e-7).
void glu_forward_rows(float* out, long ld, const float* value, long value_ld, const float* gate, long gate_ld, int rows,
                      int cols, GluKind kind);
// dout may be dvalue itself (the product written where its gradient goes): each chunk of it is read before
// dvalue's is written.
void glu_backward_rows(float* dvalue, float* dgate, const float* dout, long ld, const float* value, const float* gate,
                       long pre_ld, int rows, int cols, GluKind kind);

}  // namespace blocklab::kernels
