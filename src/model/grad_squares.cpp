#include "model/grad_squares.h"

#include <cmath>

#include "kernels/adam.h"
#include "util/error.h"

namespace blocklab {

GradSquares::GradSquares(const ParameterTable& table) {
  long rows_so_far = 0;
  for (const ParamSpec& p : table.specs()) {
    const long rows = p.shape.size() >= 2 && p.shape[0] > 0 ? static_cast<long>(p.shape[0]) : 1;
    by_offset_[p.offset] = static_cast<int>(tensors_.size());
    tensors_.push_back({p.offset, rows, p.numel / rows, rows_so_far});
    rows_so_far += rows;
  }
  sums_.assign(rows_so_far, 0.0);
}

double* GradSquares::rows_of(long offset) {
  const auto it = by_offset_.find(offset);
  BLOCKLAB_CHECK(it != by_offset_.end(), "GradSquares: no tensor starts at this offset");
  Tensor& t = tensors_[it->second];
  t.taken = true;
  return sums_.data() + t.first_row;
}

void GradSquares::forget() {
  for (Tensor& t : tensors_) t.taken = false;
}

template <typename T>
double GradSquares::norm(std::span<const T> grads) {
  for (const Tensor& t : tensors_) {
    if (t.taken) continue;
    BLOCKLAB_CHECK(t.offset + t.rows * t.cols <= static_cast<long>(grads.size()), "GradSquares: arena too small");
    const T* x = grads.data() + t.offset;
    if (t.rows == 1)
      sums_[t.first_row] = kernels::sum_of_squares(x, t.cols);
    else
      kernels::row_sums_of_squares(x, t.rows, t.cols, t.cols, sums_.data() + t.first_row);
  }
  double total = 0;
  for (const double s : sums_) total += s;
  return std::sqrt(total);
}

template double GradSquares::norm<float>(std::span<const float>);
template double GradSquares::norm<double>(std::span<const double>);

}  // namespace blocklab
