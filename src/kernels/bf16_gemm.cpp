#include "kernels/bf16_gemm.h"

#include "kernels/isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#elif defined(__aarch64__)
#include "kernels/bf16_gemm_neon.h"
#if defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16_onednn.h"
#include "kernels/gemm_partition.h"
#include "kernels/gemm_prefetch.h"
#include "kernels/transpose16.h"
#include "util/openmp.h"
#include "util/profiler.h"

namespace blocklab::kernels {

namespace {

#if defined(__x86_64__)
#define BLOCKLAB_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// Register tile 12 x 32 floats (24 accumulators), K-chunks of 256 (128 bf16 pairs), row blocks of 96.
constexpr int kMr = 12, kNr = 32, kKc = 512, kMc = 96;
constexpr int kPairsPerChunk = kKc / 2;
static_assert(kKc % 32 == 0 && kMc % kMr == 0);

// Packed operands hold bf16 pairs along k as 32-bit words: (x[k], x[k+1]) with x[k] in the low half, the
// layout vdpbf16ps multiplies pairwise. An odd K gets a zero partner.
//   A, not transposed: rows of the block as they are, pairs along each row: Ab[r][kp], kPairsPerChunk words a row.
//   A, transposed:     MR-row panels, Ap[p][kp][r] (an MR-word column of pairs per kp), as sgemm's packed A.
//   B:                 NR-column panels, Bp[q][kp][j].

inline void prefetch(const float* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

// (lo[t], hi[t]) for t = 0..15 as 32-bit words.
BLOCKLAB_BF16_TARGET inline __m512i interleave_rows(__m512 lo, __m512 hi) {
  alignas(64) static const uint16_t order[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  // cvtne2ps(hi, lo): words 0..15 = bf16(lo), words 16..31 = bf16(hi)
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  return _mm512_permutexvar_epi16(_mm512_load_si512(order), both);
}

// 32 consecutive floats as 16 pairs, in order (n < 32: the first n, zero-padded).
BLOCKLAB_BF16_TARGET inline __m512i pairs_of(const float* src, int n) {
  if (n >= 32) return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 16), _mm512_loadu_ps(src));
  const __mmask16 m0 = static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(n <= 16 ? 0 : (1u << (n - 16)) - 1);
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, src + 16), _mm512_maskz_loadu_ps(m0, src));
}

// Not transposed: Ab[r][kp] for rows i0 .. i0+rows of op(A) = A, over k0 .. k0+kc; rows up to the next
// multiple of MR are zero (a partial panel reads them).
BLOCKLAB_BF16_TARGET void pack_a_rows(uint32_t* Ab, const float* A, int lda, int i0, int rows, int k0, int kc) {
  const int kpc = (kc + 1) / 2;
  for (int r = 0; r < rows; ++r) {
    const float* src = A + static_cast<long>(i0 + r) * lda + k0;
    uint32_t* dst = Ab + static_cast<long>(r) * kPairsPerChunk;
    for (int k = 0; k < kc; k += 32) _mm512_storeu_si512(dst + k / 2, pairs_of(src + k, kc - k));
  }
  const int padded = (rows + kMr - 1) / kMr * kMr;
  for (int r = rows; r < padded; ++r) std::fill_n(Ab + static_cast<long>(r) * kPairsPerChunk, kpc, 0u);
}

// Transposed (A stored (K, M), op(A)[i][k] = A[k][i]): Ap[p][kp][r]. With row_sums, also
// row_sums[i - i0] += op(A)[i][k] in k order, in float (the caller keeps the sums across K-chunks).
// A pair of A's rows at a time across all the block's panels: each row's stretch of the block is read in one
// pass (panel by panel, each row gave 48 bytes to a panel and the next panel's came a whole walk later).
BLOCKLAB_BF16_TARGET void pack_a_panels(uint32_t* Ap, const float* A, int lda, int i0, int rows, int k0, int kc,
                                        float* row_sums) {
  constexpr int kPanels = kMc / kMr;
  const int kpc = (kc + 1) / 2, panels = (rows + kMr - 1) / kMr;
  __mmask16 mask[kPanels];
  __m512 sums[kPanels];
  for (int p = 0; p < panels; ++p) {
    mask[p] = static_cast<__mmask16>((1u << std::min(kMr, rows - p * kMr)) - 1);
    sums[p] = row_sums == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[p], row_sums + p * kMr);
  }
  const __mmask16 panel_words = static_cast<__mmask16>((1u << kMr) - 1);
  for (int kp = 0; kp < kpc; ++kp) {
    const int k = k0 + 2 * kp;
    const bool second = 2 * kp + 1 < kc;
    const float* row0 = A + static_cast<long>(k) * lda + i0;
    const float* row1 = row0 + lda;
    for (int p = 0; p < panels; ++p) {
      const __m512 x0 = _mm512_maskz_loadu_ps(mask[p], row0 + p * kMr);
      const __m512 x1 = second ? _mm512_maskz_loadu_ps(mask[p], row1 + p * kMr) : _mm512_setzero_ps();
      if (row_sums != nullptr) {
        sums[p] = _mm512_add_ps(sums[p], x0);
        if (second) sums[p] = _mm512_add_ps(sums[p], x1);
      }
      _mm512_mask_storeu_epi32(Ap + (static_cast<long>(p) * kpc + kp) * kMr, panel_words, interleave_rows(x0, x1));
    }
  }
  if (row_sums != nullptr)
    for (int p = 0; p < panels; ++p) _mm512_mask_storeu_ps(row_sums + p * kMr, mask[p], sums[p]);
}

// B not transposed (stored (K, N)): the panels of columns j0 .. j0 + cols (panel_words apart, the last one
// zero beyond cols), a pair of B's rows at a time across all of them. Each pair of rows is read as two
// contiguous stretches, which memory streams; panel by panel, a panel's 128 bytes of each row were 2 lines of
// a different page per row, and the walk was slower than the arithmetic even from L3.
BLOCKLAB_BF16_TARGET void pack_b_plain_rows(uint32_t* dst, long panel_words, const float* B, int ldb, int j0, int cols,
                                            int k0, int kc) {
  const int kpc = (kc + 1) / 2;
  const __m512 z = _mm512_setzero_ps();
  for (int kp = 0; kp < kpc; ++kp) {
    const float* r0 = B + static_cast<long>(k0 + 2 * kp) * ldb + j0;
    const bool second = 2 * kp + 1 < kc;
    const float* r1 = r0 + ldb;
    uint32_t* d = dst + kp * kNr;
    int j = 0;
    for (; j + kNr <= cols; j += kNr, d += panel_words) {
      _mm512_storeu_si512(d, interleave_rows(_mm512_loadu_ps(r0 + j), second ? _mm512_loadu_ps(r1 + j) : z));
      _mm512_storeu_si512(d + 16,
                          interleave_rows(_mm512_loadu_ps(r0 + j + 16), second ? _mm512_loadu_ps(r1 + j + 16) : z));
    }
    if (j < cols) {  // the last panel, zero beyond cols
      const int left = cols - j;
      const __mmask16 m0 = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1);
      const __mmask16 m1 = static_cast<__mmask16>(left <= 16 ? 0 : (1u << (left - 16)) - 1);
      _mm512_storeu_si512(d, interleave_rows(_mm512_maskz_loadu_ps(m0, r0 + j),
                                             second ? _mm512_maskz_loadu_ps(m0, r1 + j) : z));
      _mm512_storeu_si512(d + 16, interleave_rows(_mm512_maskz_loadu_ps(m1, r0 + j + 16),
                                                  second ? _mm512_maskz_loadu_ps(m1, r1 + j + 16) : z));
    }
  }
}

// B transposed (stored (N, K)): Bp[kp][j] = (B[j0+j][k0+2kp], B[j0+j][k0+2kp+1]) for one NR-column panel, zero
// beyond cols.
BLOCKLAB_BF16_TARGET void pack_b_panel_transposed(uint32_t* dst, const float* B, int ldb, int j0, int cols, int k0,
                                                  int kc) {
  const int kpc = (kc + 1) / 2;
  // B stored (N, K): the pairs of column j are consecutive in row j of B. 16 columns by 16 pairs at a time:
  // each column's 32 floats become 16 pairs in a register, and a 16 x 16 transpose turns the columns into rows
  // of dst (16 loads, 64 shuffles and 16 stores per 256 pairs, where a scalar scatter takes a store per pair).
  for (int jj = 0; jj < kNr; jj += 16) {
    const int n = std::clamp(cols - jj, 0, 16);
    for (int k = 0; k < kc; k += 32) {
      __m512 r[16];
      const float* src = B + static_cast<long>(j0 + jj) * ldb + k0 + k;
      if (n == 16 && kc - k >= 32) {
        // whole rows: their next 64 floats are asked for now (the rows are ldb apart, and a
        // transposing walk keeps too few misses in flight for memory to keep up on its own)
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) {
          prefetch(src + static_cast<long>(j) * ldb + 64);
          prefetch(src + static_cast<long>(j) * ldb + 80);
          r[j] = _mm512_castsi512_ps(pairs_of(src + static_cast<long>(j) * ldb, 32));
        }
      } else {
        for (int j = 0; j < 16; ++j)
          r[j] = j < n ? _mm512_castsi512_ps(pairs_of(src + static_cast<long>(j) * ldb, kc - k)) : _mm512_setzero_ps();
      }
      transpose16(r);
      const int pairs = std::min(16, kpc - k / 2);
      for (int t = 0; t < pairs; ++t) _mm512_storeu_ps(reinterpret_cast<float*>(dst + (k / 2 + t) * kNr + jj), r[t]);
    }
  }
}

// Columns j0 .. j0 + cols of op(B) over k0 .. k0 + kc as consecutive NR-column panels (the last zero beyond cols).
BLOCKLAB_BF16_TARGET void pack_b_block(uint32_t* Bp, const float* B, int ldb, bool trans, int j0, int cols, int k0,
                                       int kc) {
  const long panel_words = static_cast<long>(kNr) * ((kc + 1) / 2);
  if (!trans) {
    pack_b_plain_rows(Bp, panel_words, B, ldb, j0, cols, k0, kc);
    return;
  }
  for (int j = 0; j < cols; j += kNr, Bp += panel_words)
    pack_b_panel_transposed(Bp, B, ldb, j0 + j, std::min(kNr, cols - j), k0, kc);
}

// C[0:mr, 0:nr] = (accumulate ? C : 0) + A (MR x 2kpc) @ B (2kpc x NR), then + bias[0:nr] when bias is not
// null. A: element pair (r, kp) at A[kp * MR + r] (a panel) or A[r * lda + kp] (kRowsA: rows of pairs).
template <bool kRowsA>
BLOCKLAB_BF16_TARGET void kernel_bf16(int kpc, const uint32_t* A, long lda, const uint32_t* Bp, float* C, int ldc,
                                      int mr, int nr, bool accumulate, const float* bias) {
  __m512 acc[kMr][2];
  for (int r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  prefetch_tile(C, ldc, mr);  // read (accumulate) or written at the end
  for (int kp = 0; kp < kpc; ++kp) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(Bp + kp * kNr);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(Bp + kp * kNr + 16);
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(kRowsA ? A[r * lda + kp] : A[kp * kMr + r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(nr <= 16 ? 0 : nr >= 32 ? 0xFFFF : (1u << (nr - 16)) - 1);
  const __m512 bias0 = bias == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, bias);
  const __m512 bias1 = bias == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, bias + 16);
  for (int r = 0; r < mr; ++r) {
    float* c = C + static_cast<long>(r) * ldc;
    if (accumulate) {
      acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, c));
      acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, c + 16));
    }
    if (bias != nullptr) {
      acc[r][0] = _mm512_add_ps(acc[r][0], bias0);
      acc[r][1] = _mm512_add_ps(acc[r][1], bias1);
    }
    _mm512_mask_storeu_ps(c, m0, acc[r][0]);
    _mm512_mask_storeu_ps(c + 16, m1, acc[r][1]);
  }
}

// The peak loop: 12 independent vdpbf16ps chains (enough to cover its latency on two pipes), kept in registers by
// an empty asm statement per step so that the loop is neither folded nor sent through memory.
constexpr int kDotChains = 12;
BLOCKLAB_BF16_TARGET long dot_loop(long steps, float* sink) {
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3c003c00), b = (__m512bh)_mm512_set1_epi32(0x3c003c00);  // 2^-7
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  __m512 c6 = c0, c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
#define BLOCKLAB_DOT(c)          \
  c = _mm512_dpbf16_ps(c, a, b); \
  asm volatile("" : "+v"(c))
  for (long s = 0; s < steps; ++s) {
    BLOCKLAB_DOT(c0); BLOCKLAB_DOT(c1); BLOCKLAB_DOT(c2); BLOCKLAB_DOT(c3);
    BLOCKLAB_DOT(c4); BLOCKLAB_DOT(c5); BLOCKLAB_DOT(c6); BLOCKLAB_DOT(c7);
    BLOCKLAB_DOT(c8); BLOCKLAB_DOT(c9); BLOCKLAB_DOT(c10); BLOCKLAB_DOT(c11);
  }
#undef BLOCKLAB_DOT
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                                   _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)),
                                                 _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11))));
  _mm512_storeu_ps(sink, sum);
  return 32L * kDotChains;  // 16 float lanes, two products each
}
constexpr const char* kDotInstruction = "vdpbf16ps";

#elif defined(__aarch64__)
// The AArch64 kernel (bf16_gemm_neon.cpp, compiled for the bf16 extension): BFDOT by element on 12 x 8 tiles.
using neon_bf16::kMc;
using neon_bf16::kMr;
using neon_bf16::kNr;
using neon_bf16::kKc;
using neon_bf16::kPairsPerChunk;
using neon_bf16::pack_a_panels;
using neon_bf16::pack_a_rows;
void pack_b_block(uint32_t* Bp, const float* B, int ldb, bool trans, int j0, int cols, int k0, int kc) {
  const long panel_words = static_cast<long>(kNr) * ((kc + 1) / 2);
  for (int j = 0; j < cols; j += kNr, Bp += panel_words)
    neon_bf16::pack_b_panel(Bp, B, ldb, trans, j0 + j, std::min(kNr, cols - j), k0, kc);
}
constexpr int kDotChains = neon_bf16::kDotChains;
long dot_loop(long steps, float* sink) { return neon_bf16::dot_loop(steps, sink); }
constexpr const char* kDotInstruction = "bfdot";

template <bool kRowsA>
void kernel_bf16(int kpc, const uint32_t* A, long lda, const uint32_t* Bp, float* C, int ldc, int mr, int nr,
                 bool accumulate, const float* bias) {
  if constexpr (kRowsA)
    neon_bf16::kernel_rows(kpc, A, lda, Bp, C, ldc, mr, nr, accumulate, bias);
  else
    neon_bf16::kernel_panel(kpc, A, Bp, C, ldc, mr, nr, accumulate, bias);
}

#endif  // __aarch64__

#if defined(__x86_64__) || defined(__aarch64__)
uint32_t* aligned_words(std::vector<uint32_t>& v, size_t words) {
  if (v.size() < words + 16) v.resize(words + 16);
  auto addr = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<uint32_t*>((addr + 63) & ~static_cast<uintptr_t>(63));
}

// The driver of sgemm (sgemm.cpp: run) with both operands always packed, as bf16 pairs: the same for both
// architectures, with their packing and kernels above. The thread's columns go in blocks whose packed B (at most
// kL2BlockBytes) stays in L2 while the row blocks pass; within a row block each panel of A stays in L1 while the
// block's B panels stream past it from L2. (Packing all of the thread's N up front, as before, sent every row
// block's B through L3 or memory at the wide products: the MLP's 3072 columns, the head's 50257.) Each C
// element still sums its K-chunks in order: the blocking does not change a bit.
constexpr long kL2BlockBytes = 512 * 1024;

constexpr int kBlockPanels =
    static_cast<int>(std::max(1L, kL2BlockBytes / (static_cast<long>(kNr) * kPairsPerChunk * 4)));
void run(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float beta,
         float* C, int ldc, const SgemmExtras& extras) {
  const bool nested = omp_in_parallel() != 0;
  const GemmPartition partition(M, N, kMr, kNr, nested ? 1 : omp_get_max_threads(), extras.c_row_squares != nullptr);
#pragma omp parallel if (!nested)
  {
    static thread_local std::vector<uint32_t> a_storage, b_storage;
    static thread_local std::vector<float> sums_storage;
    static thread_local std::vector<double> squares_storage;
    const ThreadRect rect = partition.rect(omp_get_thread_num(), omp_get_num_threads());
    const int q_lo = rect.q_lo, q_hi = rect.q_hi, i_begin = rect.i_begin, i_end = rect.i_end;
    if (!rect.empty()) {
      // column blocks of equal shares of the thread's panels
      const int panels = q_hi - q_lo, n_blocks = (panels + kBlockPanels - 1) / kBlockPanels;
      const auto block_begin = [&](int b) { return q_lo + static_cast<int>(static_cast<long>(panels) * b / n_blocks); };
      uint32_t* Ap = aligned_words(a_storage, static_cast<size_t>(kMc) * kPairsPerChunk);
      uint32_t* Bp =
          aligned_words(b_storage, static_cast<size_t>((panels + n_blocks - 1) / n_blocks) * kNr * kPairsPerChunk);
      const ThreadRowSums sums(extras, rect, sums_storage);
      const ThreadRowSquares squares(extras, rect, N, squares_storage);
      for (int cb = 0; cb < n_blocks; ++cb) {
        const int qa = block_begin(cb), qb = block_begin(cb + 1);
        for (int k0 = 0; k0 < K; k0 += kKc) {
          const int kc = std::min(kKc, K - k0), kpc = (kc + 1) / 2;
          const bool accumulate = k0 > 0 || beta != 0.f;
          const bool last_chunk = k0 + kc == K;
          pack_b_block(Bp, B, ldb, trans_b, qa * kNr, std::min(qb * kNr, N) - qa * kNr, k0, kc);
          for (int i0 = i_begin; i0 < i_end; i0 += kMc) {
            const int rows = std::min(kMc, i_end - i0);
            if (trans_a)  // the row sums on the first column block only
              pack_a_panels(Ap, A, lda, i0, rows, k0, kc, cb == 0 ? sums.at(i0) : nullptr);
            else
              pack_a_rows(Ap, A, lda, i0, rows, k0, kc);
            const BlockAt at{qa, qb, i0, k0};
            const BlockAt next = next_block<kKc, kMc>(at, i_begin, i_end, K, [&] {
              return cb + 1 < n_blocks ? BlockAt{qb, block_begin(cb + 2), i_begin, 0} : BlockAt{};
            });
            Prefetcher prefetch;
            plan_prefetch<kMr, kNr, kKc, kMc>(prefetch, at, next, i_end, rows, last_chunk, trans_a, trans_b,
                                              PlainPrefetch::ARows, N, K, A, lda, B, ldb, C, ldc, extras);
            for (int p = 0; p * kMr < rows; ++p) {
              const int mr = std::min(kMr, rows - p * kMr);
              for (int q = qa; q < qb; ++q) {
                const int j0 = q * kNr, nr = std::min(kNr, N - j0);
                const float* bias = last_chunk && extras.bias != nullptr ? extras.bias + j0 : nullptr;
                const uint32_t* b_panel = Bp + static_cast<long>(q - qa) * kNr * kpc;
                float* c = C + static_cast<long>(i0 + p * kMr) * ldc + j0;
                if (trans_a)
                  kernel_bf16<false>(kpc, Ap + static_cast<long>(p) * kMr * kpc, 0, b_panel, c, ldc, mr, nr,
                                     accumulate, bias);
                else
                  kernel_bf16<true>(kpc, Ap + static_cast<long>(p) * kMr * kPairsPerChunk, kPairsPerChunk, b_panel, c,
                                    ldc, mr, nr, accumulate, bias);
                prefetch.step();
              }
            }
            if (last_chunk) {
              const int j_begin = qa * kNr, j_end = std::min(qb * kNr, N);
              if (extras.on_block_done != nullptr)
                extras.on_block_done(extras.context, i0, rows, j_begin, j_end - j_begin);
              squares.add_block(C, ldc, i0, rows, j_begin, j_end - j_begin);
            }
          }
        }
      }
      sums.add_to_output();
    }
  }
}
#else
// No bf16 kernel for this architecture: bf16_isa() is None and run() is never reached.
void run(bool, bool, int, int, int, const float*, int, const float*, int, float, float*, int, const SgemmExtras&) {}
#endif

bool cpuid_amx_bf16() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return (d & (1u << 24)) != 0 && (d & (1u << 22)) != 0;  // AMX-TILE, AMX-BF16
#else
  return false;
#endif
}

struct Dispatch {
  Bf16Isa isa = Bf16Isa::None;
  std::string description;
};

bool cpu_is_intel() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return false;
  return b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;  // "Genu" "ineI" "ntel"
#else
  return false;
#endif
}

// The path, from the CPU, BLOCKLAB_ISA and BLOCKLAB_GEMM (a cap below avx512 turns both bf16 kernels off):
//   AMX-BF16 and oneDNN in the build      -> oneDNN (its AMX kernels)
//   AVX512-BF16, not an Intel core         -> blocklab's kernel (faster than fp32 on AMD Zen 4/5)
//   otherwise                              -> fp32, with the reason (on Intel cores, AVX512-BF16 dot products
//                                             without AMX are not faster than the float FMA kernels)
// BLOCKLAB_GEMM=onednn or avx512_bf16 forces that path where it can run; fp32, blas or avx2 turn bf16 off.
Dispatch detect() {
  Dispatch d;
  const char* forced = std::getenv("BLOCKLAB_GEMM");
  const std::string choice = forced == nullptr ? "" : forced;
  const std::string cap_text = std::string("BLOCKLAB_ISA caps the kernels at ") + isa_name(isa());
#if defined(__aarch64__)
  // AArch64: the BFDOT kernel where the CPU has BF16 and BLOCKLAB_ISA leaves the NEON level on
  if (choice == "fp32" || choice == "blas")
    d.description = "fp32 (BLOCKLAB_GEMM=" + choice + ")";
  else if (!cpu_has_neon_bf16())
    d.description = "fp32 (no BF16 on this CPU: BFDOT needs Armv8.6-A or a core that lists bf16)";
  else if (isa() != Isa::Neon)
    d.description = "fp32 (" + cap_text + ")";
  else {
    d.isa = Bf16Isa::NeonBf16;
    d.description = "neon_bf16 (BFDOT)";
  }
  return d;
#endif
  const bool bf16_cpu = cpu_has_avx512_bf16();
  const bool capped = isa() != Isa::Avx512;  // BLOCKLAB_ISA below avx512 (kernels/isa.h)
  const bool bf16 = bf16_cpu && !capped;
  const bool amx = cpuid_amx_bf16(), intel = cpu_is_intel();
  const std::string amx_text = amx ? "AMX-BF16 present" : "no AMX on this CPU";
  auto own = [&](const std::string& why) {
    d.isa = Bf16Isa::Avx512Bf16;
    d.description = "avx512_bf16 (" + why + ")";
  };
  auto onednn = [&](const std::string& why) {
    d.isa = Bf16Isa::OneDnn;
    d.description = "onednn: " + onednn_description() + " (" + why + ")";
  };
  if (choice == "fp32" || choice == "blas" || choice == "avx2") {
    d.description = "fp32 (BLOCKLAB_GEMM=" + choice + "; " + amx_text + ")";
  } else if (choice == "onednn") {
    if (onednn_available() && capped)  // oneDNN's bf16 matmul needs AVX-512 (its probe declines below it)
      d.description = "fp32 (BLOCKLAB_GEMM=onednn, but " +
                      (cpu_isa() == Isa::Avx512 ? cap_text : std::string("this CPU has no AVX-512")) + "; " +
                      amx_text + ")";
    else if (onednn_available())
      onednn("BLOCKLAB_GEMM=onednn; " + amx_text);
    else
      d.description = "fp32 (BLOCKLAB_GEMM=onednn, but this build has no oneDNN: " + onednn_description() + "; " +
                      amx_text + ")";
  } else if (choice == "avx512_bf16") {
    if (bf16)
      own("BLOCKLAB_GEMM=avx512_bf16; " + amx_text);
    else if (bf16_cpu)
      d.description = "fp32 (BLOCKLAB_GEMM=avx512_bf16, but " + cap_text + "; " + amx_text + ")";
    else
      d.description = "fp32 (BLOCKLAB_GEMM=avx512_bf16, but this CPU has no AVX512-BF16; " + amx_text + ")";
  } else if (amx && !capped && onednn_available()) {
    onednn("AMX-BF16 present");
  } else if (bf16 && !intel) {
    own(amx_text);
  } else if (bf16_cpu && capped) {
    d.description = "fp32 (" + cap_text + "; " + amx_text + ")";
  } else if (bf16) {
    d.description = std::string("fp32 (an Intel core: AVX512-BF16 dot products are not faster than fp32 there; ") +
                    (amx ? "AMX-BF16 present, but this build has no oneDNN for it" : "no AMX on this CPU") + ")";
  } else {
    d.description = "fp32 (no AVX512-BF16 on this CPU; " + amx_text + ")";
  }
  return d;
}

const Dispatch& dispatch() {
  static const Dispatch d = detect();
  return d;
}

}  // namespace

const char* to_string(GemmPrecision precision) { return precision == GemmPrecision::Bf16 ? "bf16" : "fp32"; }

Bf16Isa bf16_isa() { return dispatch().isa; }

long bf16_dot_loop(long steps, float* sink) {
#if defined(__x86_64__)
  if (cpu_has_avx512_bf16()) return dot_loop(steps, sink);
#elif defined(__aarch64__)
  if (cpu_has_neon_bf16()) return dot_loop(steps, sink);
#endif
  (void)steps, (void)sink;
  return 0;
}

const char* bf16_dot_instruction() {
#if defined(__x86_64__) || defined(__aarch64__)
  if (bf16_dot_loop(0, std::array<float, 16>{}.data()) > 0) return kDotInstruction;
#endif
  return "";
}

int bf16_dot_chains() {
#if defined(__x86_64__) || defined(__aarch64__)
  return kDotChains;
#else
  return 0;
#endif
}
const char* bf16_isa_description() { return dispatch().description.c_str(); }
bool cpu_has_amx_bf16() { return cpuid_amx_bf16(); }
bool cpu_has_neon_bf16() {
#if defined(__aarch64__) && defined(__linux__)
  return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#else
  return false;
#endif
}
bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // avx512bf16 in CPUID leaf 7 subleaf 1 (EAX bit 5); __builtin_cpu_supports knows it as "avx512bf16".
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool bf16_gemm_takes_rounded_operands() { return bf16_isa() == Bf16Isa::OneDnn; }

#if defined(__x86_64__)
namespace {
BLOCKLAB_BF16_TARGET void round_to_bf16_avx512(const float* x, uint16_t* out, long n) {
  long i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), (__m256i)h);
  }
  for (; i < n; ++i) out[i] = bf16_bits(x[i]);
}

BLOCKLAB_BF16_TARGET void round_to_bf16_streamed_avx512(const float* x, uint16_t* out, long n) {
  long i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(out + i) % 32 != 0; ++i) out[i] = bf16_bits(x[i]);
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), (__m256i)h);
  }
  for (; i < n; ++i) out[i] = bf16_bits(x[i]);
  _mm_sfence();
}
}  // namespace
#endif

void round_to_bf16(const float* x, uint16_t* out, long n) {
#if defined(__x86_64__)
  static const bool fast = cpu_has_avx512_bf16();
  if (fast) return round_to_bf16_avx512(x, out, n);
#endif
  for (long i = 0; i < n; ++i) out[i] = bf16_bits(x[i]);
}

void round_to_bf16_streamed(const float* x, uint16_t* out, long n) {
#if defined(__x86_64__)
  static const bool fast = cpu_has_avx512_bf16();
  if (fast) return round_to_bf16_streamed_avx512(x, out, n);
#endif
  round_to_bf16(x, out, n);
}

namespace {
constexpr int kSumStrip = 64;  // columns a thread rounds and sums down all rows

void round_and_sum_strip(const float* x, long ld, int rows, uint16_t* out, long ldo, int n, float* sums) {
  float acc[kSumStrip] = {};
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    for (int c = 0; c < n; ++c) {
      acc[c] += xr[c];
      out[r * ldo + c] = bf16_bits(xr[c]);
    }
  }
  if (sums != nullptr)
    for (int c = 0; c < n; ++c) sums[c] += acc[c];
}

#if defined(__x86_64__)
BLOCKLAB_BF16_TARGET void round_and_sum_strip_avx512(const float* x, long ld, int rows, uint16_t* out, long ldo, int n,
                                                     float* sums) {
  constexpr int kRegs = kSumStrip / 16;
  __m512 acc[kRegs];
  __mmask16 mask[kRegs];
  for (int k = 0; k < kRegs; ++k) {
    acc[k] = _mm512_setzero_ps();
    const int lanes = std::clamp(n - 16 * k, 0, 16);
    mask[k] = static_cast<__mmask16>((1u << lanes) - 1);
  }
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    uint16_t* o = out + r * ldo;
#pragma GCC unroll 4
    for (int k = 0; k < kRegs; ++k) {
      const __m512 v = _mm512_maskz_loadu_ps(mask[k], xr + 16 * k);
      acc[k] = _mm512_add_ps(acc[k], v);
      _mm256_mask_storeu_epi16(o + 16 * k, mask[k], (__m256i)_mm512_cvtneps_pbh(v));
    }
  }
  if (sums == nullptr) return;
  alignas(64) float total[kSumStrip];
  for (int k = 0; k < kRegs; ++k) _mm512_store_ps(total + 16 * k, acc[k]);
  for (int c = 0; c < n; ++c) sums[c] += total[c];
}
#endif
}  // namespace

void round_to_bf16_and_sum_columns(const float* x, long ld, int rows, int cols, uint16_t* out, long ldo, float* sums) {
#if defined(__x86_64__)
  static const bool fast = cpu_has_avx512_bf16();
#endif
  const int strips = (cols + kSumStrip - 1) / kSumStrip;
#pragma omp parallel for schedule(static) if (static_cast<long>(rows) * cols > 32768)
  for (int t = 0; t < strips; ++t) {
    const int c0 = t * kSumStrip, n = std::min(kSumStrip, cols - c0);
    float* s = sums != nullptr ? sums + c0 : nullptr;
#if defined(__x86_64__)
    if (fast) {
      round_and_sum_strip_avx512(x + c0, ld, rows, out + c0, ldo, n, s);
      continue;
    }
#endif
    round_and_sum_strip(x + c0, ld, rows, out + c0, ldo, n, s);
  }
}

uint64_t new_operand_version() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool bf16_gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc, const SgemmExtras& extras) {
  if (bf16_isa() == Bf16Isa::None) {
    static const bool noticed = [] {
      std::fprintf(stderr, "blocklab: precision bf16: GEMMs run in %s\n", bf16_isa_description());
      return true;
    }();
    (void)noticed;
    return false;
  }
  if (beta != 0.f && beta != 1.f) return false;
  if (M <= 0 || N <= 0) return true;
  if (K <= 0) {  // C = beta C (+ bias): no operand is read
    if (extras.on_product_block != nullptr) return false;
    SgemmExtras empty = extras;
    empty.a_bf16 = empty.b_bf16 = nullptr;
    return sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, empty);
  }
  // bench --profile: each call's time by shape
  const ScopedGemmTimer report(omp_in_parallel() ? nullptr : Profiler::active(), trans_a, trans_b, M, N, K);
  if (bf16_isa() == Bf16Isa::OneDnn) return onednn_bf16_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, extras);
  if (extras.a_bf16 != nullptr || extras.b_bf16 != nullptr || extras.on_product_block != nullptr) return false;
  run(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, extras);
  return true;
}

}  // namespace blocklab::kernels
