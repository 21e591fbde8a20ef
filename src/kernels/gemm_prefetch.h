#pragma once
// What blocklab's packed GEMM drivers (sgemm.cpp, bf16_gemm.cpp) fetch ahead of their micro-kernels. Prefetching
// decides only when data reaches the cache: it changes no result.
#include <algorithm>
#include <cstdint>

#include "kernels/sgemm.h"

namespace blocklab::kernels {

// Software prefetch of what the next row block reads into L2, spread over the current block's micro-kernel calls.
// The weight-gradient GEMMs (A transposed: dout^T @ inp) read their operands as short rows (K-chunk rows of
// 0.4-1.5 KB, 0.5-2 KB apart) that the hardware prefetchers pick up late; in a training step both come from memory
// (dout from the kernel before, inp a saved activation): +8-12% on the step's shapes with operands from memory. The
// other products (A not transposed) prefetch the next block's rows of A and, at AVX2, within a K-chunk, of C
// (written next, so read for ownership): with operands cycled through memory, one thread at AVX2 (Zen 4), +1-15% by
// shape; two threads, -3% to +14%. The AVX-512 and bf16 kernels fetch their own tile of C at the start of each call
// (a Zen 5 ran those products slower at AVX-512 with the rows of C prefetched here as well, docs/speed.md), and
// their drivers prefetch the rows of A alone: on a Zen 4, +1-19% by shape from memory, 0-3% less with operands in
// cache. At every level, the block's part of what its on_block_done step reads (SgemmExtras::block_input: GELU's
// pre-activation in the MLP backward, a saved activation in memory) is prefetched while the block computes: that
// fused product ran 15-20% faster at AVX2 and AVX-512 (Intel Xeon, 1 and 2 threads).
class Prefetcher {
 public:
  // rows of row_bytes bytes from base, stride_bytes apart
  void add(const void* base, long stride_bytes, int rows, long row_bytes) {
    if (count_ == kMaxRegions || rows <= 0 || row_bytes <= 0) return;
    const auto first = reinterpret_cast<uintptr_t>(base) & ~uintptr_t{63};
    const auto last = (reinterpret_cast<uintptr_t>(base) + row_bytes - 1) & ~uintptr_t{63};
    const int lines = static_cast<int>((last - first) / 64 + 1);
    regions_[count_++] = {reinterpret_cast<const char*>(first), stride_bytes, rows, lines};
    total_lines_ += static_cast<long>(rows) * lines;
  }
  // the lines are issued in `calls` roughly equal parts
  void start(int calls) { per_call_ = calls <= 0 ? total_lines_ : (total_lines_ + calls - 1) / calls; }
  void step() {
    for (long n = 0; n < per_call_ && region_ < count_; ++n) {
      const Region& r = regions_[region_];
      __builtin_prefetch(r.base + static_cast<long>(row_) * r.stride + 64L * line_, 0, 2);  // to L2 (x86: prefetcht1)
      if (++line_ == r.lines) {
        line_ = 0;
        if (++row_ == r.rows) row_ = 0, ++region_;
      }
    }
  }

 private:
  struct Region {
    const char* base;
    long stride;
    int rows, lines;
  };
  static constexpr int kMaxRegions = 4;
  Region regions_[kMaxRegions];
  int count_ = 0, region_ = 0, row_ = 0, line_ = 0;
  long total_lines_ = 0, per_call_ = 0;
};

// A place in the driver's walk over one thread's part of C: a row block of the column panels [qa, qb) in the K-chunk
// at k0 (k0 = K: the walk is over).
struct BlockAt {
  int qa, qb, i0, k0;
};

// The block a driver's walk visits after `at` (rows [i_begin, i_end) in row blocks of MC, K in chunks of KC): the
// next row block, else the first of the next K-chunk, else the first of the next column block (`next_columns()`,
// asked only then: BlockAt{qa, qb, i_begin, 0}, or none left), else the end (k0 = K).
template <int KC, int MC, class NextColumns>
BlockAt next_block(const BlockAt& at, int i_begin, int i_end, int K, NextColumns&& next_columns) {
  if (at.i0 + MC < i_end) return {at.qa, at.qb, at.i0 + MC, at.k0};
  if (at.k0 + KC < K) return {at.qa, at.qb, i_begin, at.k0 + KC};
  const BlockAt columns = next_columns();
  return columns.qa < columns.qb ? columns : BlockAt{at.qa, at.qb, i_begin, K};
}

// Fetches a micro-kernel's tile of C (rows of up to 32 floats, ldc apart) into L1 while its products run: C rarely
// stays in cache between K-chunks (a few MB at 252 rows and 3072 columns), and the tile's rows are misses that wait
// at the end of every call otherwise (Zen 4: +10-18% on the source model's products with K = 128 at AVX-512, a few
// percent on most others; bf16 likewise).
inline void prefetch_tile(const float* C, int ldc, int rows) {
  for (int r = 0; r < rows; ++r) {
    const char* c = reinterpret_cast<const char*>(C + static_cast<long>(r) * ldc);
    __builtin_prefetch(c, 0, 3);  // x86: prefetcht0
    __builtin_prefetch(c + 64, 0, 3);
    __builtin_prefetch(c + 127, 0, 3);
  }
}

// With A not transposed, what of the next row block a driver prefetches: nothing, its rows of A, or its rows of A and,
// in the same K-chunk, its rows of C (for a kernel that does not fetch its own tile of C).
enum class PlainPrefetch { None, ARows, ARowsAndC };

// What the next row block reads, for a Prefetcher to fetch while this block computes: its rows of A (with A not
// transposed, only where `plain` says so), and when it starts the next K-chunk that chunk's rows of B, or else, where
// `plain` says so, its rows of C. On the last chunk also this block's part of what its on_block_done step reads.
// MR x NR: the register tile; KC, MC: the driver's K-chunk and row block. (The next chunk's B with A not transposed:
// GPT-2's dX products with K = 2304 and 3072 in bf16, +2-4% in the step on a Zen 4; fp32 unchanged.)
template <int MR, int NR, int KC, int MC>
void plan_prefetch(Prefetcher& prefetch, const BlockAt& at, const BlockAt& next, int i_end, int rows, bool last_chunk,
                   bool trans_a, bool trans_b, PlainPrefetch plain, int N, int K, const float* A, int lda,
                   const float* B, int ldb, const float* C, int ldc, const SgemmExtras& extras) {
  const bool same_chunk = next.k0 == at.k0 && next.qa == at.qa;
  const int k0n = next.k0, i0n = next.i0;
  if (k0n < K && (trans_a || plain != PlainPrefetch::None)) {
    const int kcn = std::min(KC, K - k0n), rows_n = std::min(MC, i_end - i0n);
    const int jn_begin = next.qa * NR, jn_end = std::min(next.qb * NR, N);
    if (trans_a)
      prefetch.add(A + static_cast<long>(k0n) * lda + i0n, 4L * lda, kcn, 4L * rows_n);
    else
      prefetch.add(A + static_cast<long>(i0n) * lda + k0n, 4L * lda, rows_n, 4L * kcn);
    if (!same_chunk) {
      if (trans_b)
        prefetch.add(B + static_cast<long>(jn_begin) * ldb + k0n, 4L * ldb, jn_end - jn_begin, 4L * kcn);
      else
        prefetch.add(B + static_cast<long>(k0n) * ldb + jn_begin, 4L * ldb, kcn, 4L * (jn_end - jn_begin));
    } else if (!trans_a && plain == PlainPrefetch::ARowsAndC) {
      prefetch.add(C + static_cast<long>(i0n) * ldc + jn_begin, 4L * ldc, rows_n, 4L * (jn_end - jn_begin));
    }
  }
  const int j_begin = at.qa * NR, j_end = std::min(at.qb * NR, N);
  if (last_chunk && extras.block_input != nullptr)
    prefetch.add(extras.block_input + at.i0 * extras.block_ld + j_begin, 4L * extras.block_ld, rows,
                 4L * (j_end - j_begin));
  prefetch.start((at.qb - at.qa) * ((rows + MR - 1) / MR));
}

}  // namespace blocklab::kernels
