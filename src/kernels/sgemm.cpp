#include "kernels/sgemm.h"

#include "kernels/fast_math.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace blocklab::kernels {

namespace {

constexpr int kKc = 256;  // K-chunk: an MR x KC panel of A and a KC x NR panel of B stay in L1/L2
constexpr int kMc = 96;   // rows of A per task (a multiple of both MR values)

// ---------------------------------------------------------------------------------------------------
// Packing. Panels are zero-padded to full MR/NR so micro-kernels never branch on edges.

// Ap[p][k][r] = op(A)[i0 + p*MR + r][k0 + k]
template <int MR>
BLOCKLAB_MULTIVERSION void pack_a(float* Ap, const float* A, int lda, bool trans, int i0, int rows, int k0, int kc) {
  for (int p = 0; p * MR < rows; ++p) {
    float* dst = Ap + static_cast<long>(p) * MR * kc;
    const int r_end = std::min(MR, rows - p * MR);
    for (int k = 0; k < kc; ++k) {
      float* d = dst + k * MR;
      if (trans) {  // A stored (K, M): op(A)[i][k] = A[k][i], contiguous in i
        const float* src = A + static_cast<long>(k0 + k) * lda + i0 + p * MR;
        for (int r = 0; r < r_end; ++r) d[r] = src[r];
      } else {
        const float* src = A + static_cast<long>(i0 + p * MR) * lda + k0 + k;
        for (int r = 0; r < r_end; ++r) d[r] = src[static_cast<long>(r) * lda];
      }
      for (int r = r_end; r < MR; ++r) d[r] = 0.f;
    }
  }
}

// Bp[q][k][j] = op(B)[k0 + k][q*NR + j]
template <int NR>
BLOCKLAB_MULTIVERSION void pack_b_panel(float* dst, const float* B, int ldb, bool trans, int j0, int cols, int k0, int kc) {
  if (trans) {  // B stored (N, K): op(B)[k][j] = B[j][k]
    for (int j = 0; j < cols; ++j) {
      const float* src = B + static_cast<long>(j0 + j) * ldb + k0;
      for (int k = 0; k < kc; ++k) dst[k * NR + j] = src[k];
    }
    for (int j = cols; j < NR; ++j)
      for (int k = 0; k < kc; ++k) dst[k * NR + j] = 0.f;
  } else {
    for (int k = 0; k < kc; ++k) {
      const float* src = B + static_cast<long>(k0 + k) * ldb + j0;
      float* d = dst + k * NR;
      if (cols == NR) {
        for (int j = 0; j < NR; ++j) d[j] = src[j];  // fixed trip count: a couple of vector moves
      } else {
        for (int j = 0; j < cols; ++j) d[j] = src[j];
        for (int j = cols; j < NR; ++j) d[j] = 0.f;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Micro-kernels: C[0:mr, 0:nr] = (accumulate ? C : 0) + Ap (MR x kc) @ Bp (kc x NR)

template <int MR, int NR>
void store_tile(float* C, int ldc, const float* tile, int mr, int nr, bool accumulate) {
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) {
      float& c = C[static_cast<long>(r) * ldc + j];
      c = accumulate ? c + tile[r * NR + j] : tile[r * NR + j];
    }
}

constexpr int kMr512 = 12, kNr512 = 32;

__attribute__((target("avx512f"))) void kernel_avx512(int kc, const float* Ap, const float* Bp, float* C, int ldc,
                                                      int mr, int nr, bool accumulate) {
  __m512 acc[kMr512][2];
  for (int r = 0; r < kMr512; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(Bp + k * kNr512);
    const __m512 b1 = _mm512_load_ps(Bp + k * kNr512 + 16);
    const float* a = Ap + k * kMr512;
#pragma GCC unroll 12
    for (int r = 0; r < kMr512; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  if (nr == kNr512) {
    for (int r = 0; r < mr; ++r) {
      float* c = C + static_cast<long>(r) * ldc;
      if (accumulate) {
        acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_loadu_ps(c));
        acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_loadu_ps(c + 16));
      }
      _mm512_storeu_ps(c, acc[r][0]);
      _mm512_storeu_ps(c + 16, acc[r][1]);
    }
  } else {
    const __mmask16 m0 = static_cast<__mmask16>(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
    const __mmask16 m1 = static_cast<__mmask16>(nr <= 16 ? 0 : nr >= 32 ? 0xFFFF : (1u << (nr - 16)) - 1);
    for (int r = 0; r < mr; ++r) {
      float* c = C + static_cast<long>(r) * ldc;
      if (accumulate) {
        acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, c));
        acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, c + 16));
      }
      _mm512_mask_storeu_ps(c, m0, acc[r][0]);
      _mm512_mask_storeu_ps(c + 16, m1, acc[r][1]);
    }
  }
}

constexpr int kMr256 = 6, kNr256 = 16;

__attribute__((target("avx2,fma"))) void kernel_avx2(int kc, const float* Ap, const float* Bp, float* C, int ldc,
                                                     int mr, int nr, bool accumulate) {
  __m256 acc[kMr256][2];
  for (int r = 0; r < kMr256; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(Bp + k * kNr256);
    const __m256 b1 = _mm256_load_ps(Bp + k * kNr256 + 8);
    const float* a = Ap + k * kMr256;
#pragma GCC unroll 6
    for (int r = 0; r < kMr256; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  if (nr == kNr256) {
    for (int r = 0; r < mr; ++r) {
      float* c = C + static_cast<long>(r) * ldc;
      if (accumulate) {
        acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(c));
        acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(c + 8));
      }
      _mm256_storeu_ps(c, acc[r][0]);
      _mm256_storeu_ps(c + 8, acc[r][1]);
    }
  } else {
    alignas(32) float tile[kMr256 * kNr256];
    for (int r = 0; r < kMr256; ++r) {
      _mm256_store_ps(tile + r * kNr256, acc[r][0]);
      _mm256_store_ps(tile + r * kNr256 + 8, acc[r][1]);
    }
    store_tile<kMr256, kNr256>(C, ldc, tile, mr, nr, accumulate);
  }
}

// ---------------------------------------------------------------------------------------------------
// Driver

float* aligned_buffer(std::vector<float>& v, size_t floats) {
  if (v.size() < floats + 16) v.resize(floats + 16);
  auto addr = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<float*>((addr + 63) & ~static_cast<uintptr_t>(63));
}

template <int MR, int NR, typename Kernel>
void run(Kernel kernel, bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B,
         int ldb, float beta, float* C, int ldc) {
  // Packing buffers per thread, grown once and reused: no allocation in steady state.
  static thread_local std::vector<float> b_storage;
  static thread_local std::vector<float> a_storage;
  const int n_panels = (N + NR - 1) / NR;
  const int threads = omp_get_max_threads();
  // Tasks: row blocks of kMc x column blocks; split columns only when there are too few row blocks to
  // keep every thread busy. The split never changes what any single C element sums, or in which order.
  const int row_blocks = (M + kMc - 1) / kMc;
  int col_blocks = 1;
  if (row_blocks < 2 * threads) col_blocks = std::min(n_panels, (2 * threads + row_blocks - 1) / row_blocks);
  const int panels_per_col_block = (n_panels + col_blocks - 1) / col_blocks;
  const int tasks = row_blocks * col_blocks;

  for (int k0 = 0; k0 < K; k0 += kKc) {
    const int kc = std::min(kKc, K - k0);
    const bool accumulate = k0 > 0 || beta != 0.f;
    float* Bp = aligned_buffer(b_storage, static_cast<size_t>(n_panels) * NR * kc);
#pragma omp parallel for schedule(static)
    for (int q = 0; q < n_panels; ++q)
      pack_b_panel<NR>(Bp + static_cast<long>(q) * NR * kc, B, ldb, trans_b, q * NR, std::min(NR, N - q * NR), k0, kc);
#pragma omp parallel for schedule(static)
    for (int task = 0; task < tasks; ++task) {
      const int ib = task / col_blocks, jb = task % col_blocks;
      const int i0 = ib * kMc, rows = std::min(kMc, M - i0);
      const int q_begin = jb * panels_per_col_block, q_end = std::min(n_panels, q_begin + panels_per_col_block);
      if (q_begin >= q_end) continue;
      float* Ap = aligned_buffer(a_storage, static_cast<size_t>(kMc) * kc);
      pack_a<MR>(Ap, A, lda, trans_a, i0, rows, k0, kc);
      for (int q = q_begin; q < q_end; ++q) {
        const int j0 = q * NR, nr = std::min(NR, N - j0);
        for (int p = 0; p * MR < rows; ++p) {
          const int mr = std::min(MR, rows - p * MR);
          kernel(kc, Ap + static_cast<long>(p) * MR * kc, Bp + static_cast<long>(q) * NR * kc,
                 C + static_cast<long>(i0 + p * MR) * ldc + j0, ldc, mr, nr, accumulate);
        }
      }
    }
  }
}

SgemmIsa detect_isa() {
  const char* forced = std::getenv("BLOCKLAB_GEMM");
  const std::string choice = forced == nullptr ? "" : forced;
  if (choice == "blas") return SgemmIsa::None;
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512 && choice != "avx2") return SgemmIsa::Avx512;
  if (avx2) return SgemmIsa::Avx2;
  return SgemmIsa::None;
}

}  // namespace

SgemmIsa sgemm_isa() {
  static const SgemmIsa isa = detect_isa();
  return isa;
}

const char* sgemm_isa_name(SgemmIsa isa) {
  switch (isa) {
    case SgemmIsa::Avx512: return "avx512";
    case SgemmIsa::Avx2: return "avx2";
    case SgemmIsa::None: break;
  }
  return "blas";
}

bool sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
           float beta, float* C, int ldc) {
  if (beta != 0.f && beta != 1.f) return false;
  if (M <= 0 || N <= 0) return true;
  if (K <= 0) {
    if (beta == 0.f)
      for (int i = 0; i < M; ++i) std::fill(C + static_cast<long>(i) * ldc, C + static_cast<long>(i) * ldc + N, 0.f);
    return true;
  }
  switch (sgemm_isa()) {
    case SgemmIsa::Avx512:
      run<kMr512, kNr512>(kernel_avx512, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
      return true;
    case SgemmIsa::Avx2:
      run<kMr256, kNr256>(kernel_avx2, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
      return true;
    case SgemmIsa::None: break;
  }
  return false;
}

}  // namespace blocklab::kernels
