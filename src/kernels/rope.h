#pragma once
// Rotary position embedding (Su et al. 2021), in the "rotate half" layout of GPT-NeoX / Llama / Qwen:
// a head vector x of size D is split into halves x1 = x[0, D/2) and x2 = x[D/2, D), and for every
// frequency i < D/2 the pair (x1[i], x2[i]) is rotated by the angle pos * inv_freq[i]:
//   out1 = x1 cos - x2 sin,   out2 = x2 cos + x1 sin.
// Forward only (inference).
namespace blocklab::kernels {

// inv_freq (D/2) -> cos, sin (Tn, D/2) for positions 0..Tn-1; angles computed in double.
void rope_tables(float* cos, float* sin, const double* inv_freq, int Tn, int half_dim);

// x: Tn rows of `heads` head vectors of size D = 2 * half_dim, row stride `row_stride` floats (head h
// of token t at x + t * row_stride + h * D). Rotated in place.
template <typename T>
void rope_forward(T* x, const float* cos, const float* sin, int Tn, int heads, int half_dim, long row_stride);

}  // namespace blocklab::kernels
