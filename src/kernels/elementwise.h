#pragma once
// Elementwise kernels: GELU (exact erf form, PyTorch's nn.GELU default) and the residual add.
namespace blocklab::kernels {

// out = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), over N values.
template <typename T>
void gelu_forward(T* out, const T* inp, long N);
// dinp += dout * (Phi(x) + x phi(x)),  phi the standard normal density.
template <typename T>
void gelu_backward(T* dinp, const T* dout, const T* inp, long N);

// out = a + b over N values (out may alias a or b).
template <typename T>
void residual_forward(T* out, const T* a, const T* b, long N);
// da += dout, db += dout (either may be nullptr).
template <typename T>
void residual_backward(T* da, T* db, const T* dout, long N);

}  // namespace blocklab::kernels
