#include "kernels/linear_glu.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/isa.h"
#include "kernels/sgemm.h"
#include "kernels/tile_sums.h"
#include "util/error.h"
#include "util/profiler.h"

namespace blocklab::kernels {

namespace {
// What an epilogue needs of the (N, 2I) [value | gate] matrix and the (N, I) tensor beside it.
struct GluBlock {
  float* out;        // forward: act (N, I); backward: dpre (N, 2I), whose value half holds the product dact
  const float* pre;  // (N, 2I): value columns 0 .. I-1, gate columns I .. 2I-1
  int I;
  GluKind kind;
};

// forward: the gate product's block (its columns j0 .. j0+cols are gate units) is done, and value's long before
void glu_of_block(void* context, int i0, int rows, int j0, int cols) {
  const GluBlock& b = *static_cast<const GluBlock*>(context);
  const long pre_ld = 2L * b.I;
  const float* value = b.pre + i0 * pre_ld + j0;
  glu_forward_rows(b.out + static_cast<long>(i0) * b.I + j0, b.I, value, pre_ld, value + b.I, pre_ld, rows, cols,
                   b.kind);
}

// The same where the gate's product arrives in a scratch tile (on_product_block: the oneDNN path, which would
// otherwise copy the tile into the strided C first): the gate written into `pre` and act from the tile.
void glu_of_tile(void* context, const float* tile, long ld, int i0, int rows, int j0, int cols) {
  const GluBlock& b = *static_cast<const GluBlock*>(context);
  const long pre_ld = 2L * b.I;
  float* value = const_cast<float*>(b.pre) + i0 * pre_ld + j0;
  for (int r = 0; r < rows; ++r) std::copy_n(tile + r * ld, cols, value + r * pre_ld + b.I);
  glu_forward_rows(b.out + static_cast<long>(i0) * b.I + j0, b.I, value, pre_ld, tile, ld, rows, cols, b.kind);
}

// backward: the block of dact = dout @ weight in dpre's value half becomes dvalue there and dgate beside it
void glu_gradient_of_block(void* context, int i0, int rows, int j0, int cols) {
  const GluBlock& b = *static_cast<const GluBlock*>(context);
  const long pre_ld = 2L * b.I, at = i0 * pre_ld + j0;
  glu_backward_rows(b.out + at, b.out + at + b.I, b.out + at, pre_ld, b.pre + at, b.pre + at + b.I, pre_ld, rows, cols,
                    b.kind);
}

// The same from a scratch tile of dact (on_product_block)
void glu_gradient_of_tile(void* context, const float* tile, long ld, int i0, int rows, int j0, int cols) {
  const GluBlock& b = *static_cast<const GluBlock*>(context);
  const long pre_ld = 2L * b.I, at = i0 * pre_ld + j0;
  glu_backward_rows(b.out + at, b.out + at + b.I, tile, ld, b.pre + at, b.pre + at + b.I, pre_ld, rows, cols, b.kind);
}

// The rounded forms' tiles: act (forward) or dpre (backward) written rounded to bf16, each chunk of a row first
// computed in float as glu_of_tile and glu_gradient_of_tile compute it; in the backward the float dpre's column sums
// (fc1's bias gradient) taken too, tile by tile (kernels/tile_sums.h).
struct RoundedGluTiles {
  uint16_t* out;  // forward: act (N, I); backward: dpre (N, 2I)
  float* pre;     // (N, 2I)
  int I;
  GluKind kind;
  const TileColumnSums* sums;  // backward: 2I wide (forward: none)
};

constexpr int kRoundChunk = 256;

void rounded_glu_of_tile(void* context, const float* tile, long ld, int i0, int rows, int j0, int cols) {
  const RoundedGluTiles& b = *static_cast<const RoundedGluTiles*>(context);
  const long pre_ld = 2L * b.I;
  alignas(64) float act[kRoundChunk];
  for (int r = 0; r < rows; ++r) {
    const float* gate = tile + r * ld;
    float* value = b.pre + (i0 + r) * pre_ld + j0;
    std::copy_n(gate, cols, value + b.I);
    uint16_t* out = b.out + static_cast<long>(i0 + r) * b.I + j0;
    for (int c0 = 0; c0 < cols; c0 += kRoundChunk) {
      const int n = std::min(kRoundChunk, cols - c0);
      glu_forward_rows(act, 0, value + c0, 0, gate + c0, 0, 1, n, b.kind);
      round_to_bf16(act, out + c0, n);
    }
  }
}

void rounded_glu_gradient_of_tile(void* context, const float* tile, long ld, int i0, int rows, int j0, int cols) {
  const RoundedGluTiles& b = *static_cast<const RoundedGluTiles*>(context);
  const long pre_ld = 2L * b.I;
  alignas(64) float dvalue[kRoundChunk], dgate[kRoundChunk];
  float* value_sums = b.sums->tile(i0, j0, cols);
  float* gate_sums = b.sums->tile(i0, b.I + j0, cols);
  for (int r = 0; r < rows; ++r) {
    const float* value = b.pre + (i0 + r) * pre_ld + j0;
    uint16_t* out = b.out + (i0 + r) * pre_ld + j0;
    for (int c0 = 0; c0 < cols; c0 += kRoundChunk) {
      const int n = std::min(kRoundChunk, cols - c0);
      glu_backward_rows(dvalue, dgate, tile + r * ld + c0, 0, value + c0, value + b.I + c0, 0, 1, n, b.kind);
      if (value_sums != nullptr)
        on_isa([&](auto) {
          for (int j = 0; j < n; ++j) value_sums[c0 + j] += dvalue[j];
          for (int j = 0; j < n; ++j) gate_sums[c0 + j] += dgate[j];
        });
      round_to_bf16(dvalue, out + c0, n);
      round_to_bf16(dgate, out + b.I + c0, n);
    }
  }
}

// The bf16 products that take rounded operands (oneDNN's) also hand over their product's tiles (on_product_block)
// and read a weight's rounded copy; the others do neither.
bool takes_product_tiles(GemmPrecision precision) {
  return precision == GemmPrecision::Bf16 && bf16_gemm_takes_rounded_operands();
}
}  // namespace

template <typename T>
void linear_glu_forward(T* act, T* pre, const T* inp, const T* weight, const T* bias, int N, int C, int I, GluKind kind,
                        GemmPrecision precision, const uint16_t* weight_bf16) {
  if constexpr (std::is_same_v<T, float>) {
    BLOCKLAB_PROFILE("linear_glu_forward");
    const long I2 = 2L * I;
    const bool tiles = takes_product_tiles(precision);
    const uint16_t* w16 = tiles ? weight_bf16 : nullptr;
    // value = inp @ weight[0:I]^T + bias[0:I] into pre's first I columns
    if (sgemm_in(precision, false, true, N, I, C, inp, C, weight, C, 0.f, pre, static_cast<int>(I2),
                 {.bias = bias, .b_bf16 = w16})) {
      // gate likewise into the last I columns, each finished block turned into act with its value block
      GluBlock block{act, pre, I, kind};
      const bool done =
          sgemm_in(precision, false, true, N, I, C, inp, C, weight + static_cast<long>(I) * C, C, 0.f, pre + I,
                   static_cast<int>(I2),
                   {.bias = bias == nullptr ? nullptr : bias + I,
                    .on_block_done = tiles ? nullptr : glu_of_block,
                    .context = &block,
                    .block_input = pre,
                    .block_ld = I2,
                    .b_bf16 = w16 == nullptr ? nullptr : w16 + static_cast<long>(I) * C,
                    .on_product_block = tiles ? glu_of_tile : nullptr});
      BLOCKLAB_CHECK(done, "linear_glu_forward: the gate's product found no GEMM that its value's product found");
      return;
    }
  }
  linear_forward(pre, inp, weight, bias, N, C, 2 * I, precision, 0, weight_bf16);
  glu_forward(act, static_cast<const T*>(pre), N, I, kind);
}

template <typename T>
void glu_linear_backward(T* dpre, T* dweight, T* dbias, const T* dout, const T* pre, const T* act, const T* weight,
                         int N, int I, int OC, GluKind kind, GemmPrecision precision, const uint16_t* weight_bf16,
                         T* dact, double* dweight_squares) {
  if constexpr (std::is_same_v<T, float>) {
    // dact (N,I) = dout (N,OC) @ weight (OC,I) into dpre's value half, each block turned into dvalue and dgate
    GluBlock block{dpre, pre, I, kind};
    SgemmExtras extras{.on_block_done = glu_gradient_of_block,
                       .context = &block,
                       .block_input = pre + I,  // the gate, which both gradients read
                       .block_ld = 2L * I};
    const int ldc = 2 * I;
    if (takes_product_tiles(precision)) {
      // dout rounded once for both products (its column sums into dbias), as linear_backward does; dact's tiles
      // handed over instead of copied into dpre first
      const uint16_t* d16 = nullptr;
      {
        BLOCKLAB_PROFILE("glu_linear_backward");
        d16 = rounded_for_backward(dout, N, OC, dbias);
        extras.on_block_done = nullptr;
        extras.on_product_block = glu_gradient_of_tile;
        extras.a_bf16 = d16;
        extras.b_bf16 = weight_bf16;
        const bool done = sgemm_in(GemmPrecision::Bf16, false, false, N, I, OC, nullptr, OC, weight, I, 0.f, dpre,
                                   ldc, extras);
        BLOCKLAB_CHECK(done, "glu_linear_backward: the bf16 GEMMs here do not take rounded operands");
      }
      if (dweight != nullptr) linear_weight_backward_rounded(dweight, d16, act, nullptr, N, I, OC, dweight_squares);
      return;
    }
    bool fused = false;
    {
      BLOCKLAB_PROFILE("glu_linear_backward");
      fused = sgemm_in(precision, false, false, N, I, OC, dout, OC, weight, I, 0.f, dpre, ldc, extras);
    }
    if (fused) {  // the weight and bias terms
      linear_backward<T>(nullptr, dweight, dbias, dout, act, weight, N, I, OC, GradWrite::Accumulate, precision, 0,
                         nullptr, dweight_squares);
      return;
    }
  }
  // unfused: the product, then the GLU's backward
  std::vector<T> room;
  if (dact == nullptr) {
    room.resize(static_cast<size_t>(N) * I);
    dact = room.data();
  }
  linear_backward<T>(dact, dweight, dbias, dout, act, weight, N, I, OC, GradWrite::Overwrite, precision, 0,
                     weight_bf16, dweight_squares);
  glu_backward(dpre, static_cast<const T*>(dact), pre, N, I, kind);
}

void linear_glu_forward_rounded_act(uint16_t* act, float* pre, const float* inp, const float* weight,
                                    const float* bias, int N, int C, int I, GluKind kind,
                                    const uint16_t* weight_bf16) {
  BLOCKLAB_PROFILE("linear_glu_forward");
  const long I2 = 2L * I;
  RoundedGluTiles tiles{act, pre, I, kind, nullptr};
  const uint16_t* gate_bf16 = weight_bf16 == nullptr ? nullptr : weight_bf16 + static_cast<long>(I) * C;
  const bool done =
      takes_product_tiles(GemmPrecision::Bf16) &&
      sgemm_in(GemmPrecision::Bf16, false, true, N, I, C, inp, C, weight, C, 0.f, pre, static_cast<int>(I2),
               {.bias = bias, .b_bf16 = weight_bf16}) &&
      sgemm_in(GemmPrecision::Bf16, false, true, N, I, C, inp, C, weight + static_cast<long>(I) * C, C, 0.f, nullptr,
               static_cast<int>(I2),
               {.bias = bias == nullptr ? nullptr : bias + I,
                .context = &tiles,
                .b_bf16 = gate_bf16,
                .on_product_block = rounded_glu_of_tile});
  BLOCKLAB_CHECK(done, "linear_glu_forward_rounded_act: the bf16 GEMMs here do not take rounded operands");
}

void glu_linear_backward_rounded_dpre(uint16_t* dpre, float* dpre_bias, float* dweight, float* dbias,
                                      const float* dout, const float* pre, const uint16_t* act, const float* weight,
                                      int N, int I, int OC, GluKind kind, const uint16_t* weight_bf16,
                                      double* dweight_squares) {
  BLOCKLAB_CHECK(takes_product_tiles(GemmPrecision::Bf16),
                 "glu_linear_backward_rounded_dpre: the bf16 GEMMs here do not take rounded operands");
  const uint16_t* d16 = nullptr;
  {
    BLOCKLAB_PROFILE("glu_linear_backward");
    d16 = rounded_for_backward(dout, N, OC, dbias);
    const long I2 = 2L * I;
    const TileColumnSums sums(dpre_bias != nullptr, N, I2);
    RoundedGluTiles tiles{dpre, const_cast<float*>(pre), I, kind, &sums};
    const bool done = sgemm_in(GemmPrecision::Bf16, false, false, N, I, OC, nullptr, OC, weight, I, 0.f, nullptr,
                               static_cast<int>(I2),
                               {.context = &tiles,
                                .a_bf16 = d16,
                                .b_bf16 = weight_bf16,
                                .on_product_block = rounded_glu_gradient_of_tile});
    BLOCKLAB_CHECK(done, "glu_linear_backward_rounded_dpre: the bf16 GEMMs here do not take rounded operands");
    sums.add_to(dpre_bias);
  }
  if (dweight != nullptr) linear_weight_backward_rounded(dweight, d16, nullptr, act, N, I, OC, dweight_squares);
}

template void linear_glu_forward<float>(float*, float*, const float*, const float*, const float*, int, int, int,
                                        GluKind, GemmPrecision, const uint16_t*);
template void linear_glu_forward<double>(double*, double*, const double*, const double*, const double*, int, int, int,
                                         GluKind, GemmPrecision, const uint16_t*);
template void glu_linear_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                         const float*, int, int, int, GluKind, GemmPrecision, const uint16_t*, float*,
                                         double*);
template void glu_linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                          const double*, int, int, int, GluKind, GemmPrecision, const uint16_t*,
                                          double*, double*);

}  // namespace blocklab::kernels
