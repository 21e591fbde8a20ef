#include "kernels/linear_gelu.h"

#include <type_traits>

#include "kernels/elementwise.h"
#include "kernels/fast_math.h"
#include "kernels/gelu.h"
#include "kernels/gelu_tanh.h"
#include "kernels/sgemm.h"
#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
// The elementwise steps on one finished block of a row-major (N, ld) product.
struct GeluBlock {
  float* out;        // forward: receives gelu(pre); backward: holds the product dact, turned into dpre in place
  const float* pre;  // the pre-activation (forward: the product itself)
  int ld;
};

// out = op(out, pre) elementwise over the block (rows i0 .. i0+rows, columns j0 .. j0+cols)
template <typename Op>
inline __attribute__((always_inline)) void update_block(const GeluBlock& b, int i0, int rows, int j0, int cols, Op op) {
  for (int i = i0; i < i0 + rows; ++i) {
    const float* pre = b.pre + static_cast<long>(i) * b.ld + j0;
    float* out = b.out + static_cast<long>(i) * b.ld + j0;
    for (int j = 0; j < cols; ++j) out[j] = op(out[j], pre[j]);
  }
}

template <GeluForm kForm>
BLOCKLAB_ALWAYS_INLINE float gelu_of(float x) {
  if constexpr (kForm == GeluForm::Erf)
    return gelu_value(x);
  else
    return gelu_tanh_value(x);
}

template <GeluForm kForm>
BLOCKLAB_ALWAYS_INLINE float gelu_derivative_of(float x) {
  if constexpr (kForm == GeluForm::Erf)
    return gelu_derivative(x);
  else
    return gelu_tanh_derivative(x);
}

template <GeluForm kForm>
void gelu_of_block(void* context, int i0, int rows, int j0, int cols) {
  on_isa([&](auto) {
    update_block(*static_cast<const GeluBlock*>(context), i0, rows, j0, cols,
                 [](float, float pre) { return gelu_of<kForm>(pre); });
  });
}

template <GeluForm kForm>
void gelu_derivative_times_block(void* context, int i0, int rows, int j0, int cols) {
  on_isa([&](auto) {
    update_block(*static_cast<const GeluBlock*>(context), i0, rows, j0, cols,
                 [](float dact, float pre) { return dact * gelu_derivative_of<kForm>(pre); });
  });
}
}  // namespace

template <typename T>
void linear_gelu_forward(T* act, T* pre, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                         GemmPrecision precision, GeluForm form) {
  if constexpr (std::is_same_v<T, float>) {
    BLOCKLAB_PROFILE("linear_gelu_forward");
    GeluBlock block{act, pre, OC};
    if (sgemm_in(precision, false, true, N, OC, C, inp, C, weight, C, 0.f, pre, OC,
                 {.bias = bias,
                  .on_block_done = form == GeluForm::Erf ? gelu_of_block<GeluForm::Erf> : gelu_of_block<GeluForm::Tanh>,
                  .context = &block}))
      return;
  }
  linear_forward(pre, inp, weight, bias, N, C, OC, precision);
  if (form == GeluForm::Erf)
    gelu_forward(act, pre, static_cast<long>(N) * OC);
  else
    gelu_tanh_forward(act, pre, static_cast<long>(N) * OC);
}

template <typename T>
void gelu_linear_backward(T* dpre, T* dweight, T* dbias, const T* dout, const T* pre, const T* act, const T* weight,
                          int N, int C, int OC, GemmPrecision precision, GeluForm form) {
  if constexpr (std::is_same_v<T, float>) {
    bool fused = false;
    {
      BLOCKLAB_PROFILE("gelu_linear_backward");
      // dpre = (dout (N,OC) @ weight (OC,C)) * gelu'(pre), the product turned into dpre block by block
      GeluBlock block{dpre, pre, C};
      fused = sgemm_in(precision, false, false, N, C, OC, dout, OC, weight, C, 0.f, dpre, C,
                       {.on_block_done = form == GeluForm::Erf ? gelu_derivative_times_block<GeluForm::Erf>
                                                               : gelu_derivative_times_block<GeluForm::Tanh>,
                        .context = &block,
                        .block_input = pre,
                        .block_ld = C});
    }
    if (fused) {
      // the weight and bias terms
      linear_backward<T>(nullptr, dweight, dbias, dout, act, weight, N, C, OC, GradWrite::Accumulate, precision);
      return;
    }
  }
  linear_backward<T>(dpre, dweight, dbias, dout, act, weight, N, C, OC, GradWrite::Overwrite, precision);
  const long n = static_cast<long>(N) * C;
  if (form == GeluForm::Tanh) {
    gelu_tanh_backward(dpre, static_cast<const T*>(dpre), pre, n);
    return;
  }
  BLOCKLAB_PROFILE("gelu_backward");
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) dpre[i] = dpre[i] * gelu_derivative(pre[i]);
}

template void linear_gelu_forward<float>(float*, float*, const float*, const float*, const float*, int, int, int,
                                         GemmPrecision, GeluForm);
template void linear_gelu_forward<double>(double*, double*, const double*, const double*, const double*, int, int,
                                          int, GemmPrecision, GeluForm);
template void gelu_linear_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                          const float*, int, int, int, GemmPrecision, GeluForm);
template void gelu_linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                           const double*, int, int, int, GemmPrecision, GeluForm);

}  // namespace blocklab::kernels
