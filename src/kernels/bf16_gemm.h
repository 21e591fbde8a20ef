#pragma once
// Mixed-precision GEMM for bf16 training: operands rounded to bfloat16, products accumulated in float.
//
//   C (M,N) = bf16(op(A)) (M,K) @ bf16(op(B)) (K,N) + beta * C,   row-major, beta in {0, 1}
//
// The operands stay float in memory; each is rounded to bf16 (round to nearest even, as the CPU's
// vcvtne2ps2bf16 does) while it is packed, and an AVX512-BF16 micro-kernel (vdpbf16ps: two bf16 products
// added into one float lane per instruction) accumulates 12 x 32 register tiles in float. Products of two
// bf16 values are exact in float, so the result differs from a double-precision product of the rounded
// operands only by the float accumulation. Blocking, threading and the extras (bias, row sums of op(A),
// per-block callbacks) are those of sgemm (sgemm.h): every C element is computed by one thread in the same
// order for any thread count, so results do not depend on it. The bias and the row sums use the float
// values (they are not rounded).
//
// On AArch64 CPUs with the BF16 extension the same scheme runs a NEON kernel (BFDOT by element, 12 x 8 tiles).
//
// Chosen at run time (CPUID): on a CPU with AMX-BF16 tiles (Intel Sapphire Rapids and later) the product runs
// in oneDNN's matmul, which uses them (bf16_onednn.h; where the build has oneDNN); on other CPUs with
// AVX512-BF16 (AMD Zen 4/5) in the kernel above; on an Intel core without AMX, and without AVX512-BF16, bf16
// runs the float GEMMs. BLOCKLAB_GEMM=onednn or avx512_bf16 forces a path where it can run; fp32 (or blas,
// avx2) turns the bf16 kernels off.
#include <cstdint>

#include "kernels/sgemm.h"
#include "util/bit_cast.h"

namespace blocklab::kernels {

// The precision of a linear layer's products: float, or operands rounded to bf16 with float accumulation.
enum class GemmPrecision { Fp32, Bf16 };
const char* to_string(GemmPrecision);

// None: bf16 GEMMs run in fp32; Avx512Bf16: the kernel above; OneDnn: oneDNN's matmul (AMX where present);
// NeonBf16: the AArch64 kernel (BFDOT: two bf16 products into a float lane, as vdpbf16ps).
enum class Bf16Isa { None, Avx512Bf16, OneDnn, NeonBf16 };

// The bf16 kernel this CPU and environment allow (None: bf16 GEMMs run in fp32).
Bf16Isa bf16_isa();
// One line for people: the path that runs and why, e.g. "avx512_bf16 (no AMX on this CPU)",
// "onednn: oneDNN 2.6.3 (brg:avx512_core_amx_bf16) (AMX-BF16 present)" or "fp32 (no AVX512-BF16 on this CPU; ...)".
const char* bf16_isa_description();
// Whether the CPU reports AMX-BF16 tiles (CPUID leaf 7: AMX-TILE and AMX-BF16).
bool cpu_has_amx_bf16();
// AVX512-BF16 (with the AVX-512 F, BW and VL it needs): blocklab's own bf16 kernel can run.
bool cpu_has_avx512_bf16();
// AArch64 with the BF16 extension (HWCAP2_BF16: BFDOT, BFMMLA): the NEON bf16 kernel can run.
bool cpu_has_neon_bf16();

// Returns false (and does nothing) when bf16_isa() is None; the caller then runs the float GEMM. The first
// such call prints a one-line notice on stderr. With extras.b_version, the oneDNN path keeps its conversion of B
// (rounded to bf16, in the dense panels its tiles read) for the next call that gives the same B and version (the
// tied head's weight, in several row chunks of a step); blocklab's own kernels convert B as they go and ignore it.
bool bf16_gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc, const SgemmExtras& extras = {});

// One thread's register-only loop of the bf16 dot instruction the kernel multiplies with (vdpbf16ps on x86,
// BFDOT on AArch64): `steps` times a number of independent accumulators, each one instruction, and the sum
// stored to sink[0..15]. Returns the multiply-adds per step (0, doing nothing, where the CPU lacks the
// instruction); kernels/peak.h times it as the machine's bf16 peak.
long bf16_dot_loop(long steps, float* sink);
// The instruction bf16_dot_loop times ("vdpbf16ps", "bfdot"; "" where there is none) and its accumulators.
const char* bf16_dot_instruction();
int bf16_dot_chains();

// Whether bf16_gemm takes operands already rounded to bf16 (SgemmExtras::a_bf16, b_bf16): where it runs in
// oneDNN, whose tiles read rounded dense copies anyway. A model may then keep an activation that only products read
// (the MLP's hidden activation) in bf16: half the memory written and read, no rounding pass, the same bits.
bool bf16_gemm_takes_rounded_operands();

// out[i] = bf16_bits(x[i]) for n values: the rounding every bf16 path applies to its operands (vcvtneps2bf16, 16
// values an instruction, where the CPU has AVX512-BF16).
void round_to_bf16(const float* x, uint16_t* out, long n);
// round_to_bf16 with stores that bypass the caches where the CPU has AVX512-BF16 (non-temporal, fenced before it
// returns): for a copy that is not read again soon (the optimizer's rounded weights: ordinary stores into memory
// that is not in cache first read each line they write, and took twice as long at GPT-2 size). The same bits.
void round_to_bf16_streamed(const float* x, uint16_t* out, long n);

// x (rows x cols, leading dimension ld) rounded to bf16 as round_to_bf16 rounds, into out (leading dimension ldo);
// with sums, sums[c] += column c's float values summed in row order from zero, in the same pass: a linear layer's
// bias gradient from dout, in the order every GEMM here sums op(A)'s rows (SgemmExtras::a_row_sums), so the same
// bits. Threads take strips of 64 columns, each down all rows: every sum keeps its order for any thread count.
void round_to_bf16_and_sum_columns(const float* x, long ld, int rows, int cols, uint16_t* out, long ldo, float* sums);

// A version for SgemmExtras::b_version, never returned before in this process (from 1; thread-safe).
uint64_t new_operand_version();

// The float product in the given precision: bf16_gemm where asked for and available, else sgemm. False
// when neither has a kernel on this CPU (the caller then uses BLAS).
inline bool sgemm_in(GemmPrecision precision, bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda,
                     const float* B, int ldb, float beta, float* C, int ldc, const SgemmExtras& extras = {}) {
  if (precision == GemmPrecision::Bf16 && bf16_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, extras))
    return true;
  return sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, extras);
}

// x rounded to the nearest bf16 (ties to even), as a float: what the kernels multiply. NaN stays NaN; like
// vcvtne2ps2bf16, float denormals become zero of the same sign.
inline uint16_t bf16_bits(float x) {
  const uint32_t u = bit_cast<uint32_t>(x);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // zero, denormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN, quieted
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_round(float x) { return bit_cast<float>(static_cast<uint32_t>(bf16_bits(x)) << 16); }

}  // namespace blocklab::kernels
