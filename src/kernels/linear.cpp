#include "kernels/linear.h"

#include "kernels/gemm.h"

#include "util/profiler.h"

namespace blocklab::kernels {

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  BLOCKLAB_PROFILE("linear_forward");
  // out (N,OC) = inp (N,C) @ weight^T (C,OC)
  gemm<T>(false, true, N, OC, C, T(1), inp, C, weight, C, T(0), out, OC);
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      T* row = out + static_cast<long>(n) * OC;
      for (int o = 0; o < OC; ++o) row[o] += bias[o];
    }
  }
}

template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N,
                     int C, int OC) {
  BLOCKLAB_PROFILE("linear_backward");
  // forward: out = inp @ weight^T + bias
  // dinp (N,C) += dout (N,OC) @ weight (OC,C)
  if (dinp != nullptr) gemm<T>(false, false, N, C, OC, T(1), dout, OC, weight, C, T(1), dinp, C);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
  if (dweight != nullptr) gemm<T>(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  // dbias (OC) += sum over rows of dout. Columns are split across threads; each column sums its
  // rows in order, so the result does not depend on the thread count.
  if (dbias != nullptr) {
    constexpr int kColumnBlock = 64;
    const int blocks = (OC + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
      const int o0 = blk * kColumnBlock;
      const int o1 = o0 + kColumnBlock < OC ? o0 + kColumnBlock : OC;
      T acc[kColumnBlock] = {};
      for (int n = 0; n < N; ++n) {
        const T* row = dout + static_cast<long>(n) * OC;
        for (int o = o0; o < o1; ++o) acc[o - o0] += row[o];
      }
      for (int o = o0; o < o1; ++o) dbias[o] += acc[o - o0];
    }
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int, int, int);
template void linear_forward<double>(double*, const double*, const double*, const double*, int, int, int);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int,
                                     int, int);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int, int, int);

}  // namespace blocklab::kernels
