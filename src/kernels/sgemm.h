#pragma once
// blocklab's own single-precision GEMM for the shapes of this workload (tall-skinny: thousands of
// token rows times a few hundred columns), with AVX-512, AVX2, NEON and WebAssembly SIMD128 micro-kernels chosen
// at run time.
//
//   C (M,N) = op(A) (M,K) @ op(B) (K,N) + beta * C,   row-major, beta in {0, 1}
//
// Blocking: K is cut into chunks of 256; within a chunk, B is taken in NR-column panels and A in MR-row
// panels, and an MR x NR register tile accumulates over the chunk from zero, one fused multiply-add per k in
// order, before the chunk's sum is added to C. The narrower kernels pack operands (contiguous, zero-padded)
// only where they are not already: a transposed operand, a partial panel; a panel of B stays in L1 while the
// A panels pass. The AVX-512 kernel's 256 x 32 panel of B alone fills a 32 KB L1, so there C's columns are
// walked in blocks of up to 768 whose B is always packed and stays in L2, and a 12-row panel of A stays in L1
// while the block's B panels pass (sgemm.cpp: run). Blocking decides only where operands are read from: every
// C element sums the same products in the same order at every level with FMA (AVX2, AVX-512: the same bits)
// and for any thread count. Each thread owns a rectangle of C (rows or columns, one parallel region per
// call); every C element is computed by one thread, so results are independent of the thread count.
#include <cstdint>

namespace blocklab::kernels {

enum class SgemmIsa { None, Generic, Avx2, Avx512, Neon, WasmSimd128 };

// The micro-kernel of the running instruction-set level (kernels/isa.h: the CPU's best, capped by
// BLOCKLAB_ISA); None: use BLAS. BLOCKLAB_GEMM=blas forces None, BLOCKLAB_GEMM=avx2 caps the GEMM at AVX2.
SgemmIsa sgemm_isa();
const char* sgemm_isa_name(SgemmIsa);

// Work folded into the product so that a linear layer needs no extra pass over its (N, OC) data.
struct SgemmExtras {
  // C[i][j] += bias[j] after the product is complete (the bias of a linear layer's forward). Added last,
  // so the result equals a separate bias pass bit for bit.
  const float* bias = nullptr;
  // a_row_sums[i] += sum over k of op(A)[i][k], summed in k order from zero and then added (the bias
  // gradient of a linear layer, where op(A) = dout^T), computed while A is packed.
  float* a_row_sums = nullptr;
  // Called once for every finished block of C (rows i0 .. i0+rows, columns j0 .. j0+cols, bias added)
  // right after its last K-chunk, by the thread that computed it, while the block is still in cache
  // (at most kMc = 96 rows; with AVX-512 at most 768 columns): an elementwise step that follows the product
  // (an activation) runs there instead of in another pass over memory. Blocks do not overlap and together
  // cover C; j0 is always a multiple of the register tile's width (32 floats with AVX-512, 16 with AVX2, 8
  // with NEON and the baseline kernel), and so is cols unless the block ends at column N.
  void (*on_block_done)(void* context, int i0, int rows, int j0, int cols) = nullptr;
  void* context = nullptr;
  // A hint for on_block_done: the (M, block_ld) row-major matrix it reads beside C (GELU's pre-activation,
  // for the derivative). Each block's part of it is prefetched into L2 while the block's product runs, so
  // that the step finds it in cache instead of in memory. Changes no result.
  const float* block_input = nullptr;
  long block_ld = 0;
  // Nonzero: a promise that B (this pointer, shape and leading dimension) holds the values it held in every
  // earlier call given the same version, so that a path which converts B before multiplying (oneDNN's bf16
  // path rounds it into dense panels) may reuse the converted copy. Versions come from new_operand_version()
  // (bf16_gemm.h), one per state of B: a model takes a new one for its weights at every forward. 0: no promise.
  // Changes no result.
  uint64_t b_version = 0;
  // bf16 paths that take rounded operands (bf16_gemm_takes_rounded_operands(), bf16_gemm.h) only: an operand given
  // already rounded to bf16 (bf16_bits of each value) in place of its float values, which the call then neither
  // reads nor rounds: A or B as stored, dense: (M, K) row-major or, transposed, (K, M); B (K, N) or (N, K). The float
  // pointer may then be null, unless a_row_sums needs A. sgemm and blocklab's own bf16 kernels refuse them.
  const uint16_t* a_bf16 = nullptr;
  const uint16_t* b_bf16 = nullptr;
  // Those paths only, too: instead of writing C, hand each finished block of the product (bias added) to this
  // callback (with `context`) in a scratch tile, rows x cols floats ld apart, for it to write its results wherever
  // they go; C is neither read nor written (beta must be 0), and on_block_done is not called. On the oneDNN path the
  // AMX tiles' stores into a large C leave its memory traffic exposed; an epilogue that writes the outputs itself
  // overlaps them with its arithmetic (GELU's forward at the source model: 2.0 -> 1.4 ms a layer).
  void (*on_product_block)(void* context, const float* block, long ld, int i0, int rows, int j0, int cols) = nullptr;
  // Not null (M values): c_row_squares[i] = the sum of squares of row i of C as the call leaves it, in
  // sum_of_squares's order (kernels/adam.h: the same bits), taken from each finished block while it is in cache (after
  // on_block_done): a weight gradient's share of the gradient's norm without a pass over it from memory. The threads
  // then split C by rows only. Not with on_product_block.
  double* c_row_squares = nullptr;
};

// Returns false (and does nothing) when no micro-kernel is available. One OpenMP parallel region per
// call: each thread packs what its rectangle of C needs (B per K-chunk and column block, A per row block)
// and runs all K-chunks of it.
bool sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
           float beta, float* C, int ldc, const SgemmExtras& extras = {});

}  // namespace blocklab::kernels
