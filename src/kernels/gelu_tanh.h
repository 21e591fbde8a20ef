#pragma once
// GELU in the tanh approximation used by GPT-2 ("gelu_new", PyTorch's gelu(approximate='tanh')):
//   out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Forward only (inference); the exact erf form with its backward pass is kernels/elementwise.h.
namespace blocklab::kernels {

// inp (N) -> out (N); out may alias inp.
template <typename T>
void gelu_tanh_forward(T* out, const T* inp, long N);

}  // namespace blocklab::kernels
