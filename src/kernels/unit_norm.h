#pragma once
// The arithmetic of a residual stream kept on the unit sphere (the normalized transformer, Loshchilov et al.
// 2024), as forward/backward kernels. U(v) = v / ||v|| (no epsilon, as the paper's code).
//   unit rows          out = U(x) per row;  backward: dx = (1/||x||) (dout - out (out . dout))
//   scaled unit heads  out_h = U(x_h) * s * f per head h of D values (q and k; s learned, f a constant factor)
//                      backward: ds += dout_h U(x_h) f (row order), dx_h = U's backward of dout_h * s * f
//   sphere step        resid = A + |a f| (B - A), a learned (C) vector: the move from A towards B
//                      backward: da += dresid (B - A) sign(a f) f (row order), dB = |a f| dresid,
//                                dA = (1 - |a f|) dresid
//   channel scale      out = raw * (s f), s learned per column (fc1's outputs, the logits)
//                      backward: ds += dout raw f (row order), draw = dout * (s f)
// Everything but `unit rows` runs serially in a fixed order, and unit rows takes each row on its own: the same
// bits for any thread count.
namespace blocklab::kernels {

// out (rows, width) = U(x); rn (rows) = 1 / ||x_r||.
template <typename T>
void unit_rows_forward(T* out, T* rn, const T* x, long rows, int width);
// In place: d = d loss / d out on entry, d loss / d x on exit; y = out.
template <typename T>
void unit_rows_backward(T* d, const T* y, const T* rn, long rows, int width);

// out (N, H*D) = U(x_h) * (s * factor) for each head h of each row of x (rows at x_stride), s (H*D);
// rn (N*H) the inverse norms.
template <typename T>
void scaled_unit_heads_forward(T* out, T* rn, const T* x, long x_stride, const T* s, T factor, long N, int H, int D);
// In place on d (rows at d_stride): d loss / d out on entry, d loss / d x on exit; adds d loss / d s into g_s.
template <typename T>
void scaled_unit_heads_backward(T* d, long d_stride, T* g_s, const T* x, long x_stride, const T* rn, const T* s,
                                T factor, long N, int H, int D);

// resid (N, C) = A + |alpha * factor| (B - A), alpha (C).
template <typename T>
void sphere_step_forward(T* resid, const T* A, const T* B, const T* alpha, T factor, long N, int C);
// d_resid (N, C) in; d_A, d_B (N, C) overwritten; adds d loss / d alpha into g_alpha (C).
template <typename T>
void sphere_step_backward(T* d_A, T* d_B, T* g_alpha, const T* d_resid, const T* A, const T* B, const T* alpha,
                          T factor, long N, int C);

// out (N, cols) = raw * (s * factor), s (cols).
template <typename T>
void channel_scale_forward(T* out, const T* raw, const T* s, T factor, long N, int cols);
// In place: d = d loss / d out on entry, d loss / d raw on exit; adds d loss / d s into g_s.
template <typename T>
void channel_scale_backward(T* d, T* g_s, const T* raw, const T* s, T factor, long N, int cols);

}  // namespace blocklab::kernels
