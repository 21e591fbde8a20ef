#pragma once
// The gradient's global L2 norm (what clipping and the metrics read), in the one order blocklab sums it: tensor by
// tensor in the parameter table's order, each tensor row by row (a matrix (shape[0], the rest); any other tensor one
// row), each row's squares in 16 double lanes by column added pairwise (kernels::sum_of_squares), the rows' sums then
// added in that order from zero, and the square root taken. A float's square is exact in double, so the result is the
// same at every instruction-set level and for any thread count.
//
// The backward's weight-gradient products take their rows' sums from each finished block of the product while it is
// in cache (kernels::SgemmExtras::c_row_squares) into rows_of(): norm() then sums only the other rows, reading them
// from memory, which gives the same bits as summing every row there. At GPT-2 size that pass read all 124M gradient
// values (about 45 ms a step at one thread on an AMX Xeon); now it reads biases, norms and learned positions (the
// model sums the token embedding's rows of its inputs; an untied embedding's other rows are zero).
#include <span>
#include <unordered_map>
#include <vector>

#include "model/parameters.h"

namespace blocklab {

class GradSquares {
 public:
  explicit GradSquares(const ParameterTable& table);

  // The row sums of the matrix tensor at arena offset `offset` (shape[0] values), for a kernel that writes them from
  // the last write of that gradient in this backward; from now on norm() takes them as they are.
  double* rows_of(long offset);
  // norm() sums every row again (the gradients were written: a backward begins, or a caller holds them mutably).
  void forget();
  // sqrt of the sum of squares of grads (the model's gradient arena), in the order above.
  template <typename T>
  double norm(std::span<const T> grads);

 private:
  struct Tensor {
    long offset, rows, cols, first_row;  // first_row: where its rows' sums start in sums_
    bool taken = false;                  // its rows' sums came from the backward
  };
  std::vector<Tensor> tensors_;
  std::vector<double> sums_;
  std::unordered_map<long, int> by_offset_;
};

}  // namespace blocklab
