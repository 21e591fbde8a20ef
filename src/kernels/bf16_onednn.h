#pragma once
// The bf16 GEMM through oneDNN's matmul (Debian: libdnnl-dev), the library PyTorch's CPU autocast runs: on
// a CPU with AMX-BF16 tiles oneDNN multiplies with them (brgemm with AMX), elsewhere with AVX512-BF16 or
// its own fallbacks. blocklab has no AMX kernel of its own; this is its AMX path.
//
// Same contract as bf16_gemm (bf16_gemm.h): C = bf16(op(A)) @ bf16(op(B)) + beta C with float accumulation,
// beta in {0, 1}, the extras (bias added last, float row sums of op(A) in k order, per-block callbacks).
// Results do not depend on the thread count: both operands are rounded to bf16 elementwise, C is cut into
// tiles whose shapes depend only on (M, N, ldc), and each tile is one single-threaded oneDNN matmul over all of
// K on dense operands, so each element's sum is the same computation whichever thread runs its tile. They differ from
// blocklab's own kernel's in the last bits (oneDNN sums K in its own blocking).
#include <string>

#include "kernels/sgemm.h"

namespace blocklab::kernels {

// Whether this build has oneDNN (CMake found libdnnl-dev).
bool onednn_available();
// Whether oneDNN can multiply bf16 here: the build has it and it creates a bf16 matmul for this CPU (tried
// once, then cached). oneDNN has one only where the CPU has AVX-512 (its bf16 kernels want AVX512-BF16 or
// AMX-BF16); BLOCKLAB_ISA=avx2 or generic caps oneDNN there too. When false and `why` is given, *why says
// why in one line, naming what the CPU lacks, e.g. "this CPU has no AVX512-BF16 or AMX-BF16 (nor AVX-512):
// oneDNN 2.6.3 has no bf16 matmul for it".
bool onednn_bf16_available(std::string* why = nullptr);
// "oneDNN 2.6.3 (brg:avx512_core_amx_bf16)": the library's version and the implementation its matmul picks
// on this CPU for a bf16 product; where it has none, onednn_bf16_available's reason; "not built with oneDNN"
// otherwise.
const std::string& onednn_description();
// False (and does nothing) when onednn_bf16_available() is false or beta is not 0 or 1; the first call that
// declines for want of a bf16 matmul prints onednn_bf16_available's reason on stderr.
bool onednn_bf16_gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B,
                      int ldb, float beta, float* C, int ldc, const SgemmExtras& extras = {});

}  // namespace blocklab::kernels
