#pragma once
// GELU in the tanh approximation used by GPT-2 ("gelu_new", PyTorch's gelu(approximate='tanh')):
//   out = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
//   d out / dx = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// The exact erf form is kernels/elementwise.h.
namespace blocklab::kernels {

// inp (N) -> out (N); out may alias inp.
template <typename T>
void gelu_tanh_forward(T* out, const T* inp, long N);

// dout (N), inp (N) -> dinp (N) = dout * gelu_tanh'(inp), overwritten; dinp may alias dout.
template <typename T>
void gelu_tanh_backward(T* dinp, const T* dout, const T* inp, long N);

}  // namespace blocklab::kernels
