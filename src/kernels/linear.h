#pragma once
// Linear layer (PyTorch nn.Linear layout): out = inp @ weight^T + bias.
namespace blocklab::kernels {

// inp (N,C), weight (OC,C), bias (OC) or nullptr -> out (N,OC), overwritten.
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);

// Accumulates (+=) into dinp (N,C), dweight (OC,C), dbias (OC); any of them may be nullptr to skip it.
// dout (N,OC) is the gradient of the loss w.r.t. out.
template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N,
                     int C, int OC);

}  // namespace blocklab::kernels
