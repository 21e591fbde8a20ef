#pragma once
// The optimizer's passes over the parameter arenas, vectorised at the running instruction-set level and split
// over the threads in fixed chunks (every element's arithmetic is its own, so results do not depend on the
// thread count).
//
// adam_update: one pass that reads each of p, g, m, v once and writes p, m, v (and, when asked, zeroes g for
// the next backward, so that the backward needs no pass of its own to clear it, and, when given p_bf16, writes each
// new p rounded to bf16 as round_to_bf16 rounds, while its chunk is still in cache: the copy the bf16 products read
// in place of rounding the weights on every call):
//   g' = g * grad_scale                           (gradient clipping folded in: grad_scale = max_norm / norm)
//   m  = b1 m + (1 - b1) g';   v = b2 v + (1 - b2) g'^2
//   p  = p * decay - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
// with PyTorch's constants (torch.optim.Adam / AdamW, train/optimizer.h): step_size = lr / (1 - b1^t),
// inv_sqrt_bc2 = 1 / sqrt(1 - b2^t), decay = 1 - lr * weight_decay for AdamW and 1 for Adam. A grad_scale of 1
// multiplies exactly, so an unclipped step equals the plain formula bit for bit at the same level. Levels with
// FMA contract the products (as every kernel here does), so AVX2 / AVX-512 / NEON round differently from the
// generic level in the last bit.
//
// sum_of_squares: sum of g^2 in double over one chunk, in 16 lanes (element i into lane i % 16) added pairwise
// at the end: a float's square is exact in double, so the result is the same at every level, and a chunked
// caller gets the same bits for any thread count.
#include <cstdint>

namespace blocklab::kernels {

template <typename T>
struct AdamCoefficients {
  T beta1, beta2, step_size, inv_sqrt_bc2, eps, decay;
};

// n elements of the arenas; zero_grads: the pass sets g to 0 after reading it (g is then not const); p_bf16 (n
// values, float only; nullptr: none) receives the new p rounded to bf16.
template <typename T>
void adam_update(T* p, T* g, T* m, T* v, long n, const AdamCoefficients<T>& c, T grad_scale, bool zero_grads,
                 uint16_t* p_bf16 = nullptr);

// The sum of squares of x[0..n) in double, as described above (n at most a few thousand: one chunk).
template <typename T>
double sum_of_squares(const T* x, long n);

}  // namespace blocklab::kernels
