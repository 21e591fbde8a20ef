#include "model/stored_linear.h"

#include <algorithm>

#include "kernels/bf16_linear.h"
#include "kernels/gemm.h"
#include "kernels/sgemm.h"
#include "util/openmp.h"

namespace blocklab {

namespace {

// Float scratch for one converted row block of a weight: 1 Mi floats (4 MiB), small enough to stay
// in cache between conversion and GEMM (a 2560-wide weight goes in 409-row blocks). Measured on a
// 9728 x 2560 BF16 weight, 64 tokens: 1 Mi-float blocks beat 16 Mi (whole-matrix) and 64 Ki blocks.
constexpr int64_t kScratchFloats = int64_t{1} << 20;
// Up to this many rows, BF16 weights go through kernels::bf16_linear_forward instead. On a 9728 x 2560
// weight (2 shared cores): 9 rows 0.045 s fused against 0.27 s converting 4 MiB blocks for GEMM;
// at 32-33 rows the fused kernel (0.12 s) falls behind the tiled GEMM below (0.09 s).
constexpr int kFewRows = 16;
// Per-thread tile of converted rows for more rows than that: 256 Ki floats (1 MiB), about 100 rows of a
// 2560-wide weight.
constexpr int64_t kTileFloats = int64_t{1} << 18;

// Stored rows [row0, row0 + count) of m (rows of length in, or out when transposed) as float in `out`.
void convert_rows(float* out, const StoredMatrix& m, int64_t row0, int64_t count) {
  const int64_t row_len = m.transposed ? m.out : m.in;
  io::convert_to_float(m.dtype, m.bytes.data() + row0 * row_len * static_cast<int64_t>(io::dtype_size(m.dtype)), out,
                       static_cast<std::size_t>(count * row_len));
}

}  // namespace

void stored_linear(float* out, const float* inp, const StoredMatrix& m, const float* bias, int N,
                   std::vector<float>& scratch, int64_t block_floats) {
  const int OC = m.out, C = m.in;
  const auto address = reinterpret_cast<uintptr_t>(m.bytes.data());
  const bool f32_in_place = m.dtype == io::DType::F32 && address % alignof(float) == 0;
  const bool defaults = block_floats == 0;
  if (N == 0) {
    // nothing to multiply
  } else if (f32_in_place) {
    const auto* W = reinterpret_cast<const float*>(m.bytes.data());
    if (m.transposed) {
      kernels::gemm<float>(false, false, N, OC, C, 1.0f, inp, C, W, OC, 0.0f, out, OC);  // W (C, OC)
    } else {
      kernels::gemm<float>(false, true, N, OC, C, 1.0f, inp, C, W, C, 0.0f, out, OC);  // W (OC, C)
    }
  } else if (defaults && !m.transposed && m.dtype == io::DType::BF16 && N <= kFewRows &&
             address % alignof(uint16_t) == 0) {
    // Few rows (a short prompt): read the BF16 weight once, in place, without a float copy.
    const std::size_t need = static_cast<std::size_t>(omp_get_max_threads()) * C;
    if (scratch.size() < need) scratch.resize(need);
    kernels::bf16_linear_forward(out, inp, reinterpret_cast<const uint16_t*>(m.bytes.data()), N, C, OC, scratch.data());
  } else if (defaults && !m.transposed && kernels::sgemm_isa() != kernels::SgemmIsa::None) {
    // Many rows: one parallel region for the whole weight. Each thread converts a tile of output rows
    // into its own slice of the scratch and multiplies it with a GEMM that runs on that thread alone
    // (a nested region), so there is one synchronisation per weight instead of two per block.
    const int threads = omp_get_max_threads();
    const int64_t rows = std::clamp<int64_t>(kTileFloats / C, 1, OC);
    const std::size_t need = static_cast<std::size_t>(threads) * rows * C;
    if (scratch.size() < need) scratch.resize(need);
    const int64_t tiles = (OC + rows - 1) / rows;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t r0 = tile * rows;
      const int n_rows = static_cast<int>(std::min(rows, OC - r0));
      float* s = scratch.data() + static_cast<std::size_t>(omp_get_thread_num()) * rows * C;
      convert_rows(s, m, r0, n_rows);
      // out[:, r0:r0+n] = inp @ W[r0:r0+n, :]^T
      kernels::gemm<float>(false, true, N, n_rows, C, 1.0f, inp, C, s, C, 0.0f, out + r0, OC);
    }
  } else {
    const int64_t row_len = m.transposed ? OC : C;  // stored row length
    const int64_t stored_rows = m.transposed ? C : OC;
    const int64_t budget = block_floats > 0 ? block_floats : kScratchFloats;
    const int64_t block = std::clamp<int64_t>(budget / row_len, 1, stored_rows);
    if (scratch.size() < static_cast<std::size_t>(block * row_len)) scratch.resize(block * row_len);
    for (int64_t r0 = 0; r0 < stored_rows; r0 += block) {
      const int rows = static_cast<int>(std::min(block, stored_rows - r0));
      convert_rows(scratch.data(), m, r0, rows);
      if (m.transposed) {
        // out (N, OC) += inp[:, r0:r0+rows] @ W[r0:r0+rows, :]
        kernels::gemm<float>(false, false, N, OC, rows, 1.0f, inp + r0, C, scratch.data(), OC, r0 == 0 ? 0.0f : 1.0f,
                             out, OC);
      } else {
        // out[:, r0:r0+rows] = inp @ W[r0:r0+rows, :]^T
        kernels::gemm<float>(false, true, N, rows, C, 1.0f, inp, C, scratch.data(), C, 0.0f, out + r0, OC);
      }
    }
  }
  if (bias != nullptr) {
    for (int n = 0; n < N; ++n) {
      float* row = out + static_cast<long>(n) * OC;
      for (int o = 0; o < OC; ++o) row[o] += bias[o];
    }
  }
}

void StoredLinearSource::forward(float* out, const float* inp, int N, Work& work) const {
  if (parts_.size() == 1) {
    stored_linear(out, inp, parts_[0], nullptr, N, work.scratch);
    return;
  }
  int total = 0;
  for (const StoredMatrix& m : parts_) total += m.out;
  int col = 0;
  for (const StoredMatrix& m : parts_) {
    work.part.resize(static_cast<size_t>(N) * m.out);
    stored_linear(work.part.data(), inp, m, nullptr, N, work.scratch);
    for (int n = 0; n < N; ++n)
      std::copy_n(work.part.data() + static_cast<long>(n) * m.out, m.out, out + static_cast<long>(n) * total + col);
    col += m.out;
  }
}

}  // namespace blocklab
