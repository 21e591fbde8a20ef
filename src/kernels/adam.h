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
//
// add_squares / lanes_total: the same sums for a row whose columns arrive in pieces (a GEMM's column blocks): each
// piece adds its squares into the row's 16 lanes (column j into lane j % 16, in column order), and the lanes are
// added pairwise once the row is complete; add_squares from zero over a whole row and then lanes_total give
// sum_of_squares(row) bit for bit, whatever the pieces.
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

inline constexpr int kSquareLanes = 16;
// x[0..n) as columns first_col .. first_col + n - 1 of a row: lanes[j % 16] += x^2 for each column j, in order.
template <typename T>
void add_squares(double* lanes, const T* x, long n, long first_col);
// add_squares for `rows` rows of x (ldx apart), each into its own 16 lanes (lanes + 16 r): the same sums, four rows at
// a time (eight independent chains of additions where one row has two).
template <typename T>
void add_squares_rows(double* lanes, const T* x, long ldx, int rows, long n, long first_col);
// The 16 lanes added pairwise (lane l += lane l + w for w = 8, 4, 2, 1; the lanes are overwritten): the row's sum.
double lanes_total(double* lanes);
// out[r] = sum_of_squares of row r of x (rows x cols, leading dimension ld), rows split over the threads (parallel) or
// all on the calling thread.
template <typename T>
void row_sums_of_squares(const T* x, long rows, long cols, long ld, double* out, bool parallel = true);

}  // namespace blocklab::kernels
