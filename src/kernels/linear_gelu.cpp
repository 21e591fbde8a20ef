#include "kernels/linear_gelu.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/fast_math.h"
#include "kernels/gelu.h"
#include "kernels/gelu_tanh.h"
#include "kernels/sgemm.h"
#include "kernels/tile_sums.h"
#include "util/error.h"
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

// forward, keeping the derivative: out = gelu(pre), then pre = gelu'(pre) in place (one evaluation of erf and of
// the exponential serves both: the two inlined forms share them)
template <GeluForm kForm>
void gelu_and_derivative_block(void* context, int i0, int rows, int j0, int cols) {
  on_isa([&](auto) {
    const GeluBlock& b = *static_cast<const GeluBlock*>(context);
    for (int i = i0; i < i0 + rows; ++i) {
      float* pre = const_cast<float*>(b.pre) + static_cast<long>(i) * b.ld + j0;
      float* out = b.out + static_cast<long>(i) * b.ld + j0;
      for (int j = 0; j < cols; ++j) {
        const float x = pre[j];
        out[j] = gelu_of<kForm>(x);
        pre[j] = gelu_derivative_of<kForm>(x);
      }
    }
  });
}

// The forward keeping the derivative, with gelu(pre) written rounded to bf16 into `act` (the float act's place, as
// uint16; round_to_bf16 in chunks of a row, each first computed in float as gelu_and_derivative_block does).
struct RoundedGeluBlock {
  uint16_t* act;
  float* pre;
  int ld;
};

// (on_product_block: the product's block arrives in a scratch tile; pre and act are written only here)
template <GeluForm kForm>
void gelu_rounded_and_derivative_tile(void* context, const float* tile, long ld, int i0, int rows, int j0, int cols) {
  const RoundedGeluBlock& b = *static_cast<const RoundedGeluBlock*>(context);
  constexpr int kChunk = 256;
  alignas(64) float value[kChunk];
  for (int r = 0; r < rows; ++r) {
    const float* product = tile + r * ld;
    float* pre = b.pre + static_cast<long>(i0 + r) * b.ld + j0;
    uint16_t* act = b.act + static_cast<long>(i0 + r) * b.ld + j0;
    for (int c0 = 0; c0 < cols; c0 += kChunk) {
      const int n = std::min(kChunk, cols - c0);
      on_isa([&](auto) {
        for (int j = 0; j < n; ++j) {
          const float x = product[c0 + j];
          value[j] = gelu_of<kForm>(x);
          pre[c0 + j] = gelu_derivative_of<kForm>(x);
        }
      });
      round_to_bf16(value, act + c0, n);
    }
  }
}

// The backward's product times the saved derivative, from the scratch tile into dpre (GeluBlock: out = dpre).
void times_saved_derivative_tile(void* context, const float* tile, long ld, int i0, int rows, int j0, int cols) {
  const GeluBlock& b = *static_cast<const GeluBlock*>(context);
  on_isa([&](auto) {
    for (int r = 0; r < rows; ++r) {
      const float* product = tile + r * ld;
      const float* derivative = b.pre + static_cast<long>(i0 + r) * b.ld + j0;
      float* out = b.out + static_cast<long>(i0 + r) * b.ld + j0;
      for (int j = 0; j < cols; ++j) out[j] = product[j] * derivative[j];
    }
  });
}

// The same, dpre written rounded to bf16 (it feeds only fc1's products), and the float dpre's column sums (fc1's
// bias gradient) taken here, tile by tile (kernels/tile_sums.h).
struct RoundedDpreTiles {
  uint16_t* dpre;
  const float* derivative;
  int ld;
  const TileColumnSums* sums;
};

void times_saved_derivative_rounded_tile(void* context, const float* tile, long ld, int i0, int rows, int j0,
                                         int cols) {
  const RoundedDpreTiles& b = *static_cast<const RoundedDpreTiles*>(context);
  constexpr int kChunk = 256;
  alignas(64) float value[kChunk];
  float* sums = b.sums->tile(i0, j0, cols);
  for (int r = 0; r < rows; ++r) {
    const float* product = tile + r * ld;
    const float* derivative = b.derivative + static_cast<long>(i0 + r) * b.ld + j0;
    uint16_t* out = b.dpre + static_cast<long>(i0 + r) * b.ld + j0;
    for (int c0 = 0; c0 < cols; c0 += kChunk) {
      const int n = std::min(kChunk, cols - c0);
      on_isa([&](auto) {
        for (int j = 0; j < n; ++j) value[j] = product[c0 + j] * derivative[c0 + j];
        if (sums != nullptr)
          for (int j = 0; j < n; ++j) sums[c0 + j] += value[j];
      });
      round_to_bf16(value, out + c0, n);
    }
  }
}

// backward with the derivative saved: out = dact * gelu'
void times_saved_derivative_block(void* context, int i0, int rows, int j0, int cols) {
  on_isa([&](auto) {
    update_block(*static_cast<const GeluBlock*>(context), i0, rows, j0, cols,
                 [](float dact, float derivative) { return dact * derivative; });
  });
}

// The backward with the derivative saved, where the bf16 products take rounded operands: dout rounded once for
// both products (its column sums into dbias in the same pass).
void gelu_linear_backward_rounded(float* dpre, float* dweight, float* dbias, const float* dout, const float* derivative,
                                  const float* act, const float* weight, int N, int C, int OC,
                                  double* dweight_squares) {
  const uint16_t* d16 = nullptr;
  {
    BLOCKLAB_PROFILE("gelu_linear_backward");
    d16 = rounded_for_backward(dout, N, OC, dbias);
    GeluBlock block{dpre, derivative, C};
    const bool done = sgemm_in(GemmPrecision::Bf16, false, false, N, C, OC, nullptr, OC, weight, C, 0.f, dpre, C,
                               {.context = &block, .a_bf16 = d16, .on_product_block = times_saved_derivative_tile});
    BLOCKLAB_CHECK(done, "gelu_linear_backward: the bf16 GEMMs here do not take rounded operands");
  }
  linear_weight_backward_rounded(dweight, d16, act, nullptr, N, C, OC, dweight_squares);
}
}  // namespace

template <typename T>
GeluSaved linear_gelu_forward(T* act, T* pre, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                              GemmPrecision precision, GeluForm form, bool want_derivative) {
  if constexpr (std::is_same_v<T, float>) {
    BLOCKLAB_PROFILE("linear_gelu_forward");
    GeluBlock block{act, pre, OC};
    const bool erf = form == GeluForm::Erf;
    void (*epilogue)(void*, int, int, int, int) =
        want_derivative ? (erf ? gelu_and_derivative_block<GeluForm::Erf> : gelu_and_derivative_block<GeluForm::Tanh>)
                        : (erf ? gelu_of_block<GeluForm::Erf> : gelu_of_block<GeluForm::Tanh>);
    if (sgemm_in(precision, false, true, N, OC, C, inp, C, weight, C, 0.f, pre, OC,
                 {.bias = bias, .on_block_done = epilogue, .context = &block}))
      return want_derivative ? GeluSaved::Derivative : GeluSaved::PreActivation;
  }
  linear_forward(pre, inp, weight, bias, N, C, OC, precision);
  if (form == GeluForm::Erf)
    gelu_forward(act, pre, static_cast<long>(N) * OC);
  else
    gelu_tanh_forward(act, pre, static_cast<long>(N) * OC);
  return GeluSaved::PreActivation;
}

template <typename T>
void gelu_linear_backward(T* dpre, T* dweight, T* dbias, const T* dout, const T* pre, const T* act, const T* weight,
                          int N, int C, int OC, GemmPrecision precision, GeluForm form, GeluSaved saved,
                          double* dweight_squares) {
  const bool derivative_saved = saved == GeluSaved::Derivative;
  if constexpr (std::is_same_v<T, float>) {
    if (derivative_saved && precision == GemmPrecision::Bf16 && bf16_gemm_takes_rounded_operands()) {
      gelu_linear_backward_rounded(dpre, dweight, dbias, dout, pre, act, weight, N, C, OC, dweight_squares);
      return;
    }
    bool fused = false;
    {
      BLOCKLAB_PROFILE("gelu_linear_backward");
      // dpre = (dout (N,OC) @ weight (OC,C)) * gelu'(pre), the product turned into dpre block by block
      GeluBlock block{dpre, pre, C};
      void (*epilogue)(void*, int, int, int, int) =
          derivative_saved ? times_saved_derivative_block
                           : (form == GeluForm::Erf ? gelu_derivative_times_block<GeluForm::Erf>
                                                    : gelu_derivative_times_block<GeluForm::Tanh>);
      fused = sgemm_in(precision, false, false, N, C, OC, dout, OC, weight, C, 0.f, dpre, C,
                       {.on_block_done = epilogue, .context = &block, .block_input = pre, .block_ld = C});
    }
    if (fused) {
      // the weight and bias terms
      linear_backward<T>(nullptr, dweight, dbias, dout, act, weight, N, C, OC, GradWrite::Accumulate, precision, 0,
                         nullptr, dweight_squares);
      return;
    }
  }
  linear_backward<T>(dpre, dweight, dbias, dout, act, weight, N, C, OC, GradWrite::Overwrite, precision, 0, nullptr,
                     dweight_squares);
  const long n = static_cast<long>(N) * C;
  if (derivative_saved) {
    BLOCKLAB_PROFILE("gelu_backward");
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) dpre[i] = dpre[i] * pre[i];
    return;
  }
  if (form == GeluForm::Tanh) {
    gelu_tanh_backward(dpre, static_cast<const T*>(dpre), pre, n);
    return;
  }
  BLOCKLAB_PROFILE("gelu_backward");
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) dpre[i] = dpre[i] * gelu_derivative(pre[i]);
}

void linear_gelu_forward_rounded_act(uint16_t* act, float* pre, const float* inp, const float* weight,
                                     const float* bias, int N, int C, int OC, GeluForm form,
                                     const uint16_t* weight_bf16) {
  BLOCKLAB_PROFILE("linear_gelu_forward");
  RoundedGeluBlock block{act, pre, OC};
  void (*epilogue)(void*, const float*, long, int, int, int, int) =
      form == GeluForm::Erf ? gelu_rounded_and_derivative_tile<GeluForm::Erf>
                            : gelu_rounded_and_derivative_tile<GeluForm::Tanh>;
  const bool done = sgemm_in(GemmPrecision::Bf16, false, true, N, OC, C, inp, C, weight, C, 0.f, pre, OC,
                             {.bias = bias, .context = &block, .b_bf16 = weight_bf16, .on_product_block = epilogue});
  BLOCKLAB_CHECK(done && bf16_gemm_takes_rounded_operands(),
                 "linear_gelu_forward_rounded_act: the bf16 GEMMs here do not take rounded operands");
}

void gelu_linear_backward_rounded_dpre(uint16_t* dpre, float* dpre_bias, float* dweight, float* dbias,
                                       const float* dout, const float* derivative, const uint16_t* act,
                                       const float* weight, int N, int C, int OC, const uint16_t* weight_bf16,
                                       double* dweight_squares) {
  const uint16_t* d16 = nullptr;
  {
    BLOCKLAB_PROFILE("gelu_linear_backward");
    d16 = rounded_for_backward(dout, N, OC, dbias);
    const TileColumnSums sums(dpre_bias != nullptr, N, C);
    RoundedDpreTiles tiles{dpre, derivative, C, &sums};
    const SgemmExtras extras{.context = &tiles,
                             .a_bf16 = d16,
                             .b_bf16 = weight_bf16,
                             .on_product_block = times_saved_derivative_rounded_tile};
    const bool done =
        sgemm_in(GemmPrecision::Bf16, false, false, N, C, OC, nullptr, OC, weight, C, 0.f, nullptr, C, extras);
    BLOCKLAB_CHECK(done, "gelu_linear_backward_rounded_dpre: the bf16 GEMMs here do not take rounded operands");
    sums.add_to(dpre_bias);
  }
  linear_weight_backward_rounded(dweight, d16, nullptr, act, N, C, OC, dweight_squares);
}

template GeluSaved linear_gelu_forward<float>(float*, float*, const float*, const float*, const float*, int, int, int,
                                              GemmPrecision, GeluForm, bool);
template GeluSaved linear_gelu_forward<double>(double*, double*, const double*, const double*, const double*, int, int,
                                               int, GemmPrecision, GeluForm, bool);
template void gelu_linear_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                          const float*, int, int, int, GemmPrecision, GeluForm, GeluSaved, double*);
template void gelu_linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                           const double*, int, int, int, GemmPrecision, GeluForm, GeluSaved, double*);

}  // namespace blocklab::kernels
