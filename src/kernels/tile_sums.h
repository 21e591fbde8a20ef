#pragma once
// Column sums of a product's values taken tile by tile in a GEMM epilogue (on_product_block), where the values are
// written rounded and never read again in float: a linear layer's bias gradient from the float d_pre its fused
// backward rounds (kernels/linear_gelu.cpp, linear_glu.cpp). Each tile sums its rows in order from zero into a slot of
// its own (tiles start at multiples of 16 rows, so a slot per 16 rows holds every tile), and add_to() then adds the
// slots in row order: the same sums for any thread count, since the tiles' shapes do not depend on it.
#include <algorithm>
#include <vector>

namespace blocklab::kernels {

class TileColumnSums {
 public:
  // For a product of `rows` rows and sums `width` wide; nothing is summed unless `wanted`. The storage is this
  // thread's, reused by its next TileColumnSums.
  TileColumnSums(bool wanted, int rows, long width) : slots_(rows / 16 + 1), width_(width) {
    if (!wanted) return;
    static thread_local std::vector<float> partials;
    static thread_local std::vector<char> used;
    partials.resize(static_cast<size_t>(slots_) * width_);
    used.assign(slots_, 0);
    partials_ = partials.data(), used_ = used.data();
  }
  // The zeroed sums of the tile that starts at row i0, columns [j0, j0 + cols); nullptr when none are wanted. Tiles
  // call it from any thread; no two ask for the same slot and columns.
  float* tile(int i0, long j0, int cols) const {
    if (partials_ == nullptr) return nullptr;
    used_[i0 / 16] = 1;
    float* sums = partials_ + static_cast<long>(i0 / 16) * width_ + j0;
    std::fill_n(sums, cols, 0.f);
    return sums;
  }
  // out[j] += the slots' sums of column j, added in row order (out: nullptr when none were wanted)
  void add_to(float* out) const {
    if (partials_ == nullptr) return;
    std::vector<float> total(static_cast<size_t>(width_), 0.f);
    for (int slot = 0; slot < slots_; ++slot)
      if (used_[slot])
        for (long j = 0; j < width_; ++j) total[j] += partials_[static_cast<size_t>(slot) * width_ + j];
    for (long j = 0; j < width_; ++j) out[j] += total[j];
  }

 private:
  int slots_;
  long width_;
  float* partials_ = nullptr;
  char* used_ = nullptr;
};

}  // namespace blocklab::kernels
