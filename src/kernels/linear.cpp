#include "kernels/linear.h"

#include <type_traits>
#include <vector>

#include "kernels/adam.h"
#include "kernels/gemm.h"
#include "kernels/sgemm.h"
#include "util/error.h"
#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
// The separate passes for what blocklab's sgemm folds into the product; used in double precision and
// where the CPU has no sgemm micro-kernel. Both give the same result bit for bit as the folded version.

// out[n][o] += bias[o]
template <typename T>
void add_bias_to_rows(T* out, const T* bias, int N, int OC) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    T* row = out + static_cast<long>(n) * OC;
    for (int o = 0; o < OC; ++o) row[o] += bias[o];
  }
}

// dbias[o] += sum over n of dout[n][o]. Columns are split across threads; each column sums its rows in
// order from zero, so the result does not depend on the thread count.
template <typename T>
void add_column_sums(T* dbias, const T* dout, int N, int OC) {
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
// linear_backward's products with dout given rounded (nullptr dinp or dweight: skipped), inp as floats or
// (inp_bf16) rounded: the one place the rounded-operand backward products are spelled out.
void rounded_dout_products(float* dinp, float* dweight, const uint16_t* dout, const float* inp,
                           const uint16_t* inp_bf16, const float* weight, int N, int C, int OC, GradWrite dinp_write,
                           uint64_t weight_version, const uint16_t* weight_bf16, double* dweight_squares) {
  const float beta = dinp_write == GradWrite::Accumulate ? 1.f : 0.f;
  bool done = dinp == nullptr || sgemm_in(GemmPrecision::Bf16, false, false, N, C, OC, nullptr, OC, weight, C, beta,
                                          dinp, C, {.b_version = weight_version, .a_bf16 = dout, .b_bf16 = weight_bf16});
  done = done && (dweight == nullptr || sgemm_in(GemmPrecision::Bf16, true, false, OC, C, N, nullptr, OC, inp, C, 1.f,
                                                 dweight, C,
                                                 {.a_bf16 = dout, .b_bf16 = inp_bf16,
                                                  .c_row_squares = dweight_squares}));
  BLOCKLAB_CHECK(done, "linear_backward: the bf16 GEMMs here do not take rounded operands");
}

// A weight's bf16 copy where this product reads it (bf16 products that take rounded operands), else nullptr.
const uint16_t* taken(const uint16_t* weight_bf16, GemmPrecision precision) {
  return precision == GemmPrecision::Bf16 && weight_bf16 != nullptr && bf16_gemm_takes_rounded_operands() ? weight_bf16
                                                                                                         : nullptr;
}
}  // namespace

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                    GemmPrecision precision, uint64_t weight_version, const uint16_t* weight_bf16) {
  BLOCKLAB_PROFILE("linear_forward");
  // out (N,OC) = inp (N,C) @ weight^T (C,OC) + bias, the bias added in the GEMM's last store
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_in(precision, false, true, N, OC, C, inp, C, weight, C, 0.f, out, OC,
                 {.bias = bias, .b_version = weight_version, .b_bf16 = taken(weight_bf16, precision)}))
      return;
  }
  gemm<T>(false, true, N, OC, C, T(1), inp, C, weight, C, T(0), out, OC);
  if (bias != nullptr) add_bias_to_rows(out, bias, N, OC);
}

template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N,
                     int C, int OC, GradWrite dinp_write, GemmPrecision precision, uint64_t weight_version,
                     const uint16_t* weight_bf16, double* dweight_squares) {
  BLOCKLAB_PROFILE("linear_backward");
  // forward: out = inp @ weight^T + bias
  // dinp (N,C) (+)= dout (N,OC) @ weight (OC,C)
  const T beta = dinp_write == GradWrite::Accumulate ? T(1) : T(0);
  if constexpr (std::is_same_v<T, float>) {
    if (precision == GemmPrecision::Bf16 && dinp != nullptr && dweight != nullptr &&
        bf16_gemm_takes_rounded_operands()) {  // dout rounded once for both products, its column sums beside
      rounded_dout_products(dinp, dweight, rounded_for_backward(dout, N, OC, dbias), inp, nullptr, weight, N, C, OC,
                            dinp_write, weight_version, taken(weight_bf16, precision), dweight_squares);
      return;
    }
    if (dinp != nullptr && sgemm_in(precision, false, false, N, C, OC, dout, OC, weight, C, beta, dinp, C,
                                    {.b_version = weight_version, .b_bf16 = taken(weight_bf16, precision)}))
      dinp = nullptr;
  }
  if (dinp != nullptr) gemm<T>(false, false, N, C, OC, T(1), dout, OC, weight, C, beta, dinp, C);
  // dweight (OC,C) += dout^T (OC,N) @ inp (N,C); dbias (OC) += column sums of dout = row sums of
  // dout^T, which the sgemm takes while it packs dout^T.
  if constexpr (std::is_same_v<T, float>) {
    if (dweight != nullptr && sgemm_in(precision, true, false, OC, C, N, dout, OC, inp, C, 1.f, dweight, C,
                                       {.a_row_sums = dbias, .c_row_squares = dweight_squares}))
      return;
  }
  if (dweight != nullptr) gemm<T>(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  if (dweight != nullptr && dweight_squares != nullptr) row_sums_of_squares(dweight, OC, C, C, dweight_squares);
  if (dbias != nullptr) add_column_sums(dbias, dout, N, OC);
}

const uint16_t* rounded_for_backward(const float* dout, int N, int OC, float* dbias) {
  static thread_local std::vector<uint16_t> copy;
  copy.resize(static_cast<size_t>(N) * OC);
  round_to_bf16_and_sum_columns(dout, OC, N, OC, copy.data(), OC, dbias);
  return copy.data();
}

void linear_forward_rounded_input(float* out, const uint16_t* inp, const float* weight, const float* bias, int N, int C,
                                  int OC, uint64_t weight_version, const uint16_t* weight_bf16) {
  BLOCKLAB_PROFILE("linear_forward");
  const bool done = sgemm_in(GemmPrecision::Bf16, false, true, N, OC, C, nullptr, C, weight, C, 0.f, out, OC,
                             {.bias = bias, .b_version = weight_version, .a_bf16 = inp, .b_bf16 = weight_bf16});
  BLOCKLAB_CHECK(done, "linear_forward_rounded_input: the bf16 GEMMs here do not take rounded operands");
}

void linear_backward_rounded_dout(float* dinp, float* dweight, const uint16_t* dout, const float* inp,
                                  const float* weight, int N, int C, int OC, GradWrite dinp_write,
                                  const uint16_t* weight_bf16, double* dweight_squares) {
  BLOCKLAB_PROFILE("linear_backward");
  rounded_dout_products(dinp, dweight, dout, inp, nullptr, weight, N, C, OC, dinp_write, 0, weight_bf16,
                        dweight_squares);
}

void linear_weight_backward_rounded(float* dweight, const uint16_t* dout, const float* inp, const uint16_t* inp_bf16,
                                    int N, int C, int OC, double* dweight_squares) {
  BLOCKLAB_PROFILE("linear_backward");
  rounded_dout_products(nullptr, dweight, dout, inp, inp_bf16, nullptr, N, C, OC, GradWrite::Overwrite, 0, nullptr,
                        dweight_squares);
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int, int, int, GemmPrecision,
                                    uint64_t, const uint16_t*);
template void linear_forward<double>(double*, const double*, const double*, const double*, int, int, int,
                                     GemmPrecision, uint64_t, const uint16_t*);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int,
                                     int, int, GradWrite, GemmPrecision, uint64_t, const uint16_t*, double*);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int, int, int, GradWrite, GemmPrecision, uint64_t, const uint16_t*, double*);

}  // namespace blocklab::kernels
