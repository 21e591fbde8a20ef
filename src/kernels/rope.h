#pragma once
// Rotary position embedding (Su et al. 2021), in the "rotate half" layout of GPT-NeoX / Llama / Qwen:
// a head vector x of size D is split into halves x1 = x[0, D/2) and x2 = x[D/2, D), and for every
// frequency i < D/2 the pair (x1[i], x2[i]) is rotated by the angle t * inv_freq[i] (t the position):
//   out1 = x1 cos - x2 sin,   out2 = x2 cos + x1 sin.
// The map is a rotation R(t) (orthogonal), so its backward pass is the rotation by the negative angle:
//   dx1 = dout1 cos + dout2 sin,   dx2 = dout2 cos - dout1 sin.
namespace blocklab::kernels {

// inv_freq (D/2) -> cos, sin (Tn, D/2) for positions 0..Tn-1; angles computed in double.
template <typename T>
void rope_tables(T* cos, T* sin, const double* inv_freq, int Tn, int half_dim);

// x: B*Tn rows of `heads` head vectors of size D = 2 * half_dim, row stride `row_stride` elements; row r
// is position r % Tn, and head h of row r sits at x + r * row_stride + h * D. cos, sin (Tn, half_dim).
// Rotated in place: x <- R(t) x.
template <typename T>
void rope_forward(T* x, const T* cos, const T* sin, int B, int Tn, int heads, int half_dim, long row_stride);

// The gradient through rope_forward, in place on the same layout: dx <- R(t)^T dx (overwrites: the
// incoming dout becomes the gradient with respect to the unrotated input).
template <typename T>
void rope_backward(T* dx, const T* cos, const T* sin, int B, int Tn, int heads, int half_dim, long row_stride);

}  // namespace blocklab::kernels
