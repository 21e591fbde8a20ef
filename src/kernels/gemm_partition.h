#pragma once
// How blocklab's packed GEMM drivers (sgemm.cpp, bf16_gemm.cpp) share C among threads, and the extras they
// both apply per thread: one parallel region, no barrier inside; each thread owns a rectangle of C and packs
// the operands it needs itself. Splitting C by rows makes every thread pack all of B (N x K); splitting by
// columns makes every thread read or pack all of A (M x K), so the split runs along the larger dimension.
// The split never changes what any C element sums, or in which order: results are the same for every
// thread count.
#include <algorithm>
#include <vector>

#include "kernels/adam.h"
#include "kernels/sgemm.h"

namespace blocklab::kernels {

// The part of C one thread computes: column panels [q_lo, q_hi) of NR columns, rows [i_begin, i_end).
struct ThreadRect {
  int q_lo = 0, q_hi = 0, i_begin = 0, i_end = 0;
  bool empty() const { return q_lo >= q_hi || i_begin >= i_end; }
};

class GemmPartition {
 public:
  // C of M x N in register tiles of MR x NR, shared by up to `threads` threads; rows_only: whole rows to each thread.
  GemmPartition(int M, int N, int MR, int NR, int threads, bool rows_only = false)
      : M_(M), MR_(MR), n_panels_((N + NR - 1) / NR), row_panels_((M + MR - 1) / MR),
        split_columns_(!rows_only && (row_panels_ < threads || (N > M && n_panels_ >= threads))) {}

  // Thread `thread` of a team of `team`: whole row panels or whole column panels, in equal shares.
  ThreadRect rect(int thread, int team) const {
    const auto share = [&](int total, int t) { return static_cast<int>(static_cast<long>(total) * t / team); };
    ThreadRect r;
    r.q_lo = split_columns_ ? share(n_panels_, thread) : 0;
    r.q_hi = split_columns_ ? share(n_panels_, thread + 1) : n_panels_;
    const int p_lo = split_columns_ ? 0 : share(row_panels_, thread);
    const int p_hi = split_columns_ ? row_panels_ : share(row_panels_, thread + 1);
    r.i_begin = p_lo * MR_;
    r.i_end = std::min(p_hi * MR_, M_);
    return r;
  }

 private:
  int M_, MR_, n_panels_, row_panels_;
  bool split_columns_;
};

// The row sums of op(A) that SgemmExtras::a_row_sums asks for, over all K-chunks: taken by the thread that
// owns column 0, in a buffer of its own (zeroed here; `storage` is the driver's per-thread vector, grown
// once), and added to the caller's sums once the product is done. Null when no sums are wanted from this
// thread.
class ThreadRowSums {
 public:
  ThreadRowSums(const SgemmExtras& extras, const ThreadRect& rect, std::vector<float>& storage)
      : out_(rect.q_lo == 0 ? extras.a_row_sums : nullptr), i_begin_(rect.i_begin), i_end_(rect.i_end) {
    if (out_ == nullptr) return;
    const size_t rows = static_cast<size_t>(i_end_ - i_begin_);
    if (storage.size() < rows + 16) storage.resize(rows + 16);
    // 64-byte aligned, for the packing loops' vector loads and stores
    const auto addr = reinterpret_cast<uintptr_t>(storage.data());
    sums_ = reinterpret_cast<float*>((addr + 63) & ~static_cast<uintptr_t>(63));
    std::fill(sums_, sums_ + rows, 0.f);
  }
  // The sums of rows i0 .. of the thread's part (null when none are taken).
  float* at(int i0) const { return sums_ == nullptr ? nullptr : sums_ + (i0 - i_begin_); }
  bool wanted() const { return sums_ != nullptr; }
  void add_to_output() const {
    if (sums_ != nullptr)
      for (int i = i_begin_; i < i_end_; ++i) out_[i] += sums_[i - i_begin_];
  }

 private:
  float* out_;
  float* sums_ = nullptr;
  int i_begin_, i_end_;
};

// SgemmExtras::c_row_squares over one thread's rows (a partition by rows only, so that each row's blocks come to one
// thread, in column order): each finished block's squares added into its rows' lanes (add_squares), a row's total
// written once its last column is in. `storage` is the driver's per-thread vector, grown once.
class ThreadRowSquares {
 public:
  ThreadRowSquares(const SgemmExtras& extras, const ThreadRect& rect, int N, std::vector<double>& storage)
      : out_(extras.c_row_squares), N_(N), i_begin_(rect.i_begin) {
    if (out_ == nullptr) return;
    const size_t values = static_cast<size_t>(rect.i_end - rect.i_begin) * kSquareLanes;
    if (storage.size() < values) storage.resize(values);
    lanes_ = storage.data();
  }
  void add_block(const float* C, long ldc, int i0, int rows, int j0, int cols) const {
    if (out_ == nullptr) return;
    double* lanes = lanes_ + static_cast<long>(i0 - i_begin_) * kSquareLanes;
    if (j0 == 0) std::fill_n(lanes, static_cast<long>(rows) * kSquareLanes, 0.0);
    add_squares_rows(lanes, C + i0 * ldc + j0, ldc, rows, cols, j0);
    if (j0 + cols == N_)
      for (int r = 0; r < rows; ++r) out_[i0 + r] = lanes_total(lanes + static_cast<long>(r) * kSquareLanes);
  }

 private:
  double* out_;
  double* lanes_ = nullptr;
  int N_, i_begin_;
};

}  // namespace blocklab::kernels
