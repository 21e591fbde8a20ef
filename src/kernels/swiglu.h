#pragma once
// The gated MLP activation of Llama / Qwen (Shazeer 2020): out = silu(gate) * up, silu(x) = x / (1 + e^-x).
// Forward only (inference).
namespace blocklab::kernels {

// gate (N), up (N) -> out (N); out may alias gate or up.
template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, long N);

}  // namespace blocklab::kernels
