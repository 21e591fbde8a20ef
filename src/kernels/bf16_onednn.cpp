#include "kernels/bf16_onednn.h"

#include "kernels/adam.h"
#include "kernels/isa.h"

#ifdef BLOCKLAB_HAVE_ONEDNN

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "kernels/bf16_gemm.h"

namespace blocklab::kernels {

namespace {

using dnnl::memory;

// BLOCKLAB_ISA caps every kernel's instruction set (kernels/isa.h), oneDNN's too: the avx2 level at AVX2, the
// generic one at SSE4.1 (its lowest). The cap's level, or nullptr where the running level is the CPU's. oneDNN
// takes the cap only before it first looks at the CPU, so engine() sets it first.
const char* isa_cap() {
  static const char* cap = [] {
    if (isa() == cpu_isa()) return static_cast<const char*>(nullptr);
    dnnl::set_max_cpu_isa(isa() == Isa::Avx2 ? dnnl::cpu_isa::avx2 : dnnl::cpu_isa::sse41);
    return isa_name(isa());
  }();
  return cap;
}

dnnl::engine& engine() {
  static dnnl::engine e = [] {
    isa_cap();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

std::string version_text() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

// Whether oneDNN creates a bf16 matmul here (as make_tile asks for one: plain bf16 operands, a user
// scratchpad), tried once: the implementation it picks, or why there is none.
struct Probe {
  bool ok = false;
  std::string impl, why;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    std::string error;
    try {
      const memory::desc a({64, 128}, memory::data_type::bf16, memory::dims{128, 1});
      const memory::desc b({128, 128}, memory::data_type::bf16, memory::dims{1, 128});  // a transposed B
      const memory::desc c({64, 128}, memory::data_type::f32, memory::dims{128, 1});
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
      r.ok = true;
      r.impl = pd.impl_info_str();
      return r;
    } catch (const dnnl::error& e) {
      error = e.what();
    }
    __builtin_cpu_init();
    // oneDNN's bf16 kernels: AMX-BF16 tiles, AVX512-BF16 dot products, or (older CPUs) bf16 emulated with
    // AVX-512 (its "avx512_core": F, BW, VL, DQ); without any of them it has no bf16 matmul.
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
    const bool amx = cpu_has_amx_bf16();
    const std::string no_matmul = version_text() + " has no bf16 matmul";
    if (isa_cap() != nullptr)
      r.why = std::string("BLOCKLAB_ISA=") + isa_cap() + " caps oneDNN below AVX-512: " + no_matmul + " there";
    else if (!bf16 && !amx)
      r.why = std::string("this CPU has no AVX512-BF16 or AMX-BF16") + (avx512 ? "" : " (nor AVX-512)") + ": " +
              no_matmul + " for it";
    else
      r.why = no_matmul + " here (" + error + ")";
    for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
      if (const char* v = std::getenv(name); v != nullptr) r.why += std::string("; ") + name + "=" + v + " is set";
    return r;
  }();
  return p;
}

// The tiles of C: row tiles of up to 192 rows, as even as a multiple of 16 rows allows (all of M up to 256 rows);
// a tile spans C's width where C is dense (ldc = N) and there are several row tiles, else column tiles of up to
// 512 columns (from multiples of 32), so that two threads share a product of a few hundred rows. A product whose K
// is at least 16 times N (the tied head's input gradient, K = V) spans the width too: its one column panel of op(B)
// is B's plain rounded copy, the one the logits' product (B transposed) reads, so the head's weight is rounded once
// per version instead of once for each product (17-20 ms each at GPT-2's V = 50257; one 128 x 768 x 50257 tile runs
// as fast as two of 384 columns). All depend on (M, N, K, ldc) only, never on the thread count: oneDNN's blocking of
// K, and so the bits of C, depend on a tile's shape. The callbacks see blocks of at most 96 rows (the per-block
// contract).
int tile_rows(int M) {
  if (M <= 256) return M;
  const int tiles = (M + 191) / 192, per = (M + tiles - 1) / tiles;
  return (per + 15) / 16 * 16;
}
int tile_cols(int M, int N, int K, int ldc) {
  if (N <= 512 || (ldc == N && tile_rows(M) < M) || K >= 16L * N) return N;
  const int tiles = (N + 511) / 512, per = (N + tiles - 1) / tiles;
  return (per + 31) / 32 * 32;
}

// One tile's matmul: every operand dense, as oneDNN's AMX kernel (brgemm) takes them. Measured on an AMX Xeon
// with oneDNN 2.6, 1 thread: a matmul with a strided C or B (a tile of a larger matrix) runs its gemm kernel
// (`gemm:jit`): GPT-2's block products ran at 370-470 GFLOP/s in tiles of 96 x 512 of the operands as given,
// where dense row tiles of 192 rows run brgemm at 550-850. So A and B are rounded into dense panels
// (rounded_panels), and C is written into a dense scratch tile and then added to C, unless the tile spans C's
// width (then into C directly, accumulating by oneDNN's sum post-op).
// m, n, K, trans_a, trans_b, ldc (of the written tile: ldc or n), accumulate
using Key = std::tuple<int, int, int, bool, bool, int, bool>;

struct Tile {
  memory::desc a, b, c, scratchpad;
  dnnl::matmul matmul;
};

// Created on one OpenMP thread (oneDNN's blocking may depend on its thread count), once per shape; each
// caller runs it on one thread with its own scratchpad.
const Tile& tile_plan(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, Tile> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const auto [m, n, K, ta, tb, ldc, accumulate] = key;
  Tile t;
  t.a = memory::desc({m, K}, memory::data_type::bf16, ta ? memory::dims{1, m} : memory::dims{K, 1});
  t.b = memory::desc({K, n}, memory::data_type::bf16, tb ? memory::dims{1, K} : memory::dims{n, 1});
  t.c = memory::desc({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.f);  // C = A B + C
    attr.set_post_ops(ops);
  }
  const int outer = omp_get_max_threads();
  omp_set_num_threads(1);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(t.a, t.b, t.c), attr, engine());
  omp_set_num_threads(outer);
  t.scratchpad = pd.scratchpad_desc();
  t.matmul = dnnl::matmul(pd);
  return cache.emplace(key, std::move(t)).first->second;
}

// c's m rows (ldc apart) += rows of s (lds apart; lds = 0: the same row each time, a bias): 16 floats an
// instruction where the CPU has AVX-512 (every CPU oneDNN runs this path on), each sum the same float addition
// as one at a time. The compiler's own loop, at this file's baseline level, took 14-27% of a source-model forward
// product's call (2016 x 384 x 128 with its bias: 0.44 ms without, 0.53 with).
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void add_rows_avx512(float* c, long ldc, const float* s, long lds, int m, int n) {
  for (int i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    const float* si = s + i * lds;
    int j = 0;
    for (; j + 16 <= n; j += 16)
      _mm512_storeu_ps(ci + j, _mm512_add_ps(_mm512_loadu_ps(ci + j), _mm512_loadu_ps(si + j)));
    if (j < n) {
      const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
      _mm512_mask_storeu_ps(ci + j, tail,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(tail, ci + j), _mm512_maskz_loadu_ps(tail, si + j)));
    }
  }
}

#endif

void add_rows(float* c, long ldc, const float* s, long lds, int m, int n) {
#if defined(__x86_64__)
  static const bool fast = __builtin_cpu_supports("avx512f");
  if (fast) return add_rows_avx512(c, ldc, s, lds, m, n);
#endif
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) c[i * ldc + j] += s[i * lds + j];
}

// A rows x cols matrix (leading dimension ld) into `out` as dense panels of `width` columns (the last one
// narrower): panel p holds columns c0 = p * width on, as a rows x w row-major block at out + c0 * rows; width = cols
// gives the plain dense matrix (leading dimension cols). put(source, destination, w) writes a row's w values.
template <typename T, typename Put>
void to_panels(const T* x, int rows, int cols, long ld, int width, std::vector<uint16_t>& out, Put put) {
  out.resize(static_cast<size_t>(rows) * cols);
  uint16_t* o = out.data();
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r)
    for (int c0 = 0; c0 < cols; c0 += width) {
      const int w = std::min(width, cols - c0);
      put(x + static_cast<size_t>(r) * ld + c0, o + static_cast<size_t>(c0) * rows + static_cast<size_t>(r) * w, w);
    }
}

// Float values rounded to bf16 into the panels.
void rounded_panels(const float* x, int rows, int cols, int ld, int width, std::vector<uint16_t>& out) {
  to_panels(x, rows, cols, ld, width, out, [](const float* in, uint16_t* to, int w) { round_to_bf16(in, to, w); });
}

// A dense bf16 matrix (leading dimension cols) copied into the panels.
void copied_panels(const uint16_t* x, int rows, int cols, int width, std::vector<uint16_t>& out) {
  to_panels(x, rows, cols, cols, width, out, [](const uint16_t* in, uint16_t* to, int w) { std::copy_n(in, w, to); });
}

// rounded_panels of a transposed A (x: rows x cols as stored; op(A)'s rows are its columns) that also adds each
// column's float values, summed in k order from zero, to sums[c], in the same pass over x: add_row_sums' order, so
// the same bits, without reading A from memory a second time (a weight gradient's dout: 4 MB for the source model's
// fc1).
void rounded_panels_and_column_sums(const float* x, int rows, int cols, int ld, int width, std::vector<uint16_t>& out,
                                    float* sums) {
  out.resize(static_cast<size_t>(rows) * cols);
  for (int c0 = 0; c0 < cols; c0 += width) {
    const int w = std::min(width, cols - c0);
    round_to_bf16_and_sum_columns(x + c0, ld, rows, w, out.data() + static_cast<size_t>(c0) * rows, w, sums + c0);
  }
}

// a_row_sums[i] += the float values of op(A)'s row i summed in k order from zero, for rows i0 .. i0+m.
void add_row_sums(bool trans_a, const float* A, int lda, int K, int i0, int m, float* a_row_sums) {
  if (trans_a) {  // op(A)[i][k] = A[k][i]: rows side by side, so k outer keeps each row's order
    float sums[128];
    for (int r0 = 0; r0 < m; r0 += 128) {
      const int n = std::min(128, m - r0);
      std::fill(sums, sums + n, 0.f);
      for (int k = 0; k < K; ++k) {
        const float* a = A + static_cast<size_t>(k) * lda + i0 + r0;
        for (int r = 0; r < n; ++r) sums[r] += a[r];
      }
      for (int r = 0; r < n; ++r) a_row_sums[i0 + r0 + r] += sums[r];
    }
  } else {
    for (int i = i0; i < i0 + m; ++i) {
      float s = 0.f;
      for (int k = 0; k < K; ++k) s += A[static_cast<size_t>(i) * lda + k];
      a_row_sums[i] += s;
    }
  }
}

// B as the matmuls read it, for one thread: B as stored (rows x cols, leading dimension ldb) rounded into dense
// panels of `width` columns (op(B)'s column tiles; a transposed B's are whole rows, so its panels are the plain
// rounded matrix, as are those of a B read as stored in one column tile). A call without a version converts into
// its thread's scratch copy every time; one with a version (SgemmExtras::b_version) keeps its conversion in one of
// two slots for later calls with the same B, layout and version; a new version of a kept B and layout takes its
// slot again (its memory, already touched: a fresh 77 MB buffer cost 0.5 s of page faults here), another B the
// least recently used slot. The tied head's weight, B in the logits' product (transposed) and in the input
// gradient's (as stored, one column tile), is rounded once per version for both, into one slot: 77 MB at GPT-2's
// V = 50257, where the two layouts took a slot each.
struct ConvertedB {
  const float* B = nullptr;
  int rows = 0, cols = 0, ldb = 0, width = 0;
  uint64_t version = 0, last_use = 0;
  bool ready = false;  // `rounded` holds this B at this version
  std::vector<uint16_t> rounded;
};

ConvertedB& converted_b(const float* B, int rows, int cols, int ldb, int width, uint64_t version) {
  static thread_local ConvertedB scratch;
  static thread_local std::array<ConvertedB, 2> kept;
  static thread_local uint64_t uses = 0;
  if (version == 0) return scratch;
  ConvertedB* slot = nullptr;    // this B, layout and version
  ConvertedB* earlier = nullptr;  // this B and layout at an earlier version: its slot is taken again
  for (ConvertedB& c : kept)
    if (c.B == B && c.rows == rows && c.cols == cols && c.ldb == ldb && c.width == width)
      (c.ready && c.version == version ? slot : earlier) = &c;
  if (slot == nullptr) {
    const auto older = [](const ConvertedB& x, const ConvertedB& y) { return x.last_use < y.last_use; };
    slot = earlier != nullptr ? earlier : &*std::min_element(kept.begin(), kept.end(), older);
    slot->ready = false;
    slot->B = B, slot->rows = rows, slot->cols = cols, slot->ldb = ldb, slot->width = width;
    slot->version = version;
  }
  slot->last_use = ++uses;
  return *slot;
}

}  // namespace

bool onednn_available() { return true; }

bool onednn_bf16_available(std::string* why) {
  const Probe& p = probe();
  if (!p.ok && why != nullptr) *why = p.why;
  return p.ok;
}

const std::string& onednn_description() {
  static const std::string d = probe().ok ? version_text() + " (" + probe().impl + ")" : probe().why;
  return d;
}

bool onednn_bf16_gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B,
                      int ldb, float beta, float* C, int ldc, const SgemmExtras& extras) {
  if (!onednn_bf16_available()) {
    static const bool noticed = [] {
      std::fprintf(stderr, "blocklab: precision bf16: GEMMs run in fp32 (oneDNN declined: %s)\n", probe().why.c_str());
      return true;
    }();
    (void)noticed;
    return false;
  }
  if (beta != 0.f && beta != 1.f) return false;
  if (M <= 0 || N <= 0) return true;
  if (K <= 0) return sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, extras);  // C = beta C (+ bias)
  if (extras.on_product_block != nullptr && extras.c_row_squares != nullptr) return false;
  // with c_row_squares, tiles of whole rows: each row's squares summed by the thread that has its tile
  const int tm = tile_rows(M), tn = extras.c_row_squares != nullptr ? N : tile_cols(M, N, K, ldc);
  const int row_tiles = (M + tm - 1) / tm, col_tiles = (N + tn - 1) / tn;
  const int m_last = M - (row_tiles - 1) * tm, n_last = N - (col_tiles - 1) * tn;
  const bool accumulate = beta != 0.f;
  // op(A)'s row tiles, dense: A's rows as stored (A is (M,K)), or, transposed (A is (K,M)), its column panels of tm
  // (a row tile is a K x m block). op(B)'s column tiles likewise: B's rows (transposed, (N,K)), or its column
  // panels of tn ((K,N)). Tile (rt, jt) reads A's rounded copy from rt * tm * K and B's from jt * tn * K.
  // An operand given rounded (extras.a_bf16, b_bf16) is read where it lies when it is the dense panel the tiles read
  // (A not transposed, or transposed in one row tile; B transposed, or in one column tile), else copied into the
  // panels: oneDNN's brgemm kernel reads dense panels only, and its gemm kernel, which takes a strided op(A) in
  // place, ran GPT-2's weight gradients (K = 252) up to 1.7x slower (the tied head's, 50257 x 768 x 128, most).
  static thread_local std::vector<uint16_t> a16;
  const bool a_copied = extras.a_bf16 != nullptr && trans_a && tm < M;
  if (a_copied) copied_panels(extras.a_bf16, K, M, tm, a16);
  const bool sums_while_rounding = extras.a_row_sums != nullptr && trans_a && extras.a_bf16 == nullptr;
  if (sums_while_rounding)
    rounded_panels_and_column_sums(A, K, M, lda, tm, a16, extras.a_row_sums);
  else if (extras.a_bf16 == nullptr)
    rounded_panels(A, trans_a ? K : M, trans_a ? M : K, lda, trans_a ? tm : K, a16);
  // B: this call's own conversion, or one kept from an earlier call with the same B and version
  const int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N, b_width = trans_b ? K : tn;
  const uint16_t* b_data = extras.b_bf16;
  if (b_data == nullptr || b_width < b_cols) {
    ConvertedB& b = converted_b(B, b_rows, b_cols, ldb, b_width, extras.b_bf16 != nullptr ? 0 : extras.b_version);
    if (extras.b_bf16 != nullptr) {
      copied_panels(extras.b_bf16, b_rows, b_cols, b_width, b.rounded);
    } else if (!b.ready) {
      rounded_panels(B, b_rows, b_cols, ldb, b_width, b.rounded);
      b.ready = extras.b_version != 0;
    }
    b_data = b.rounded.data();
  }
  // C's tiles are written in place where one spans a dense C, else into a dense scratch tile and then added (or,
  // with on_product_block, handed to it there)
  const bool handed = extras.on_product_block != nullptr;
  if (handed && accumulate) return false;
  const bool in_place = !handed && col_tiles == 1 && ldc == N;
  auto key = [&](int m, int n) { return Key{m, n, K, trans_a, trans_b, in_place ? ldc : n, in_place && accumulate}; };
  const Tile* plans[2][2] = {{&tile_plan(key(tm, tn)), &tile_plan(key(tm, n_last))},
                             {&tile_plan(key(m_last, tn)), &tile_plan(key(m_last, n_last))}};
  const uint16_t* a_data = extras.a_bf16 != nullptr && !a_copied ? extras.a_bf16 : a16.data();
  const bool nested = omp_in_parallel() != 0;
  const int tiles = row_tiles * col_tiles;
  // Each thread takes a run of consecutive tiles. Where op(B) is the larger operand (N > M: a layer's weight
  // times a few hundred rows, the head's logits), column tiles go outer, so that a tile of op(B) is read from
  // memory once and stays in L2 for the row tiles; otherwise row tiles go outer (a weight gradient, the head's
  // 50257 x 768 one above all). Which thread computes a tile changes no result.
  const bool columns_outer = N > M;
#pragma omp parallel if (!nested)
  {
    omp_set_num_threads(1);  // oneDNN runs every tile on one thread
    static thread_local dnnl::stream tile_stream(engine());
    static thread_local std::vector<unsigned char> tile_scratch;
    static thread_local std::vector<float> c_scratch;
#pragma omp for schedule(static)
    for (int t = 0; t < tiles; ++t) {
      const int rt = columns_outer ? t % row_tiles : t / col_tiles, jt = columns_outer ? t / row_tiles : t % col_tiles;
      const int i0 = rt * tm, j0 = jt * tn;
      const int m = std::min(tm, M - i0), n = std::min(tn, N - j0);
      const Tile& tile = *plans[rt == row_tiles - 1][jt == col_tiles - 1];
      float* c_tile = handed ? nullptr : C + static_cast<size_t>(i0) * ldc + j0;  // handed: C unused (may be null)
      if (!in_place && c_scratch.size() < static_cast<size_t>(m) * n) c_scratch.resize(static_cast<size_t>(m) * n);
      float* out = in_place ? c_tile : c_scratch.data();
      if (tile_scratch.size() < tile.scratchpad.get_size()) tile_scratch.resize(tile.scratchpad.get_size());
      memory a_mem(tile.a, engine(), const_cast<uint16_t*>(a_data + static_cast<size_t>(i0) * K));
      memory b_mem(tile.b, engine(), const_cast<uint16_t*>(b_data + static_cast<size_t>(j0) * K));
      memory c_mem(tile.c, engine(), out), scratch_mem(tile.scratchpad, engine(), tile_scratch.data());
      tile.matmul.execute(tile_stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem},
                                        {DNNL_ARG_SCRATCHPAD, scratch_mem}});
      tile_stream.wait();
      if (handed) {
        if (extras.bias != nullptr) add_rows(out, n, extras.bias + j0, 0, m, n);
        if (extras.a_row_sums != nullptr && j0 == 0 && !sums_while_rounding)
          add_row_sums(trans_a, A, lda, K, i0, m, extras.a_row_sums);
        extras.on_product_block(extras.context, out, n, i0, m, j0, n);
        continue;
      }
      if (!in_place && accumulate)  // C = A B + C, as oneDNN's sum post-op adds
        add_rows(c_tile, ldc, out, n, m, n);
      else if (!in_place)
        for (int i = 0; i < m; ++i)
          std::copy_n(out + static_cast<size_t>(i) * n, n, c_tile + static_cast<size_t>(i) * ldc);
      if (extras.bias != nullptr) add_rows(c_tile, ldc, extras.bias + j0, 0, m, n);
      if (extras.a_row_sums != nullptr && j0 == 0 && !sums_while_rounding)
        add_row_sums(trans_a, A, lda, K, i0, m, extras.a_row_sums);
      if (extras.on_block_done != nullptr)
        for (int r0 = 0; r0 < m; r0 += 96) extras.on_block_done(extras.context, i0 + r0, std::min(96, m - r0), j0, n);
      if (extras.c_row_squares != nullptr)  // a tile of whole rows (tn = N)
        row_sums_of_squares(C + static_cast<size_t>(i0) * ldc, m, N, ldc, extras.c_row_squares + i0, false);
    }
  }
  return true;
}

}  // namespace blocklab::kernels

#else  // built without oneDNN

namespace blocklab::kernels {

bool onednn_available() { return false; }
const std::string& onednn_description() {
#if defined(__x86_64__)
  static const std::string d = "not built with oneDNN (apt-get install libdnnl-dev, then rebuild)";
#else
  static const std::string d = "not built with oneDNN (used on x86-64 only, for AMX)";
#endif
  return d;
}
bool onednn_bf16_available(std::string* why) {
  if (why != nullptr) *why = onednn_description();
  return false;
}
bool onednn_bf16_gemm(bool, bool, int, int, int, const float*, int, const float*, int, float, float*, int,
                      const SgemmExtras&) {
  return false;
}

}  // namespace blocklab::kernels

#endif
