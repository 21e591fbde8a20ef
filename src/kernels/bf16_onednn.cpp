#include "kernels/bf16_onednn.h"
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

// Tiles of C: row blocks of 64 (96 for tall C), column blocks of up to 512; both depend on (M, N) only.
// At most 96 rows (the per-block callback's contract) and column starts at multiples of 32.
int tile_rows(int M) { return M >= 768 ? 96 : 64; }
int tile_cols(int N) { return N <= 512 ? N : 512; }

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

// The primitives of one GEMM shape: a matmul for the full row tiles and one for the last (shorter) tile. They read
// B rounded to bf16 as stored, in place (a plain layout, strides (ldb, 1), or (1, ldb) when transposed), or, where
// B is not transposed and `blocked`, op(B) reordered into the blocked layout oneDNN prefers (chosen once, for the
// full tile) by a reorder that also rounds it from float. On plain operands oneDNN runs brgemm for some shapes
// (the source model's, on an AMX Xeon) and its gemm kernel (`gemm:jit`) for others (GPT-2's); the reorder, from a
// transposed source above all, costs more than it gains unless it serves many rows (see onednn_bf16_gemm).
// Created and run with one OpenMP thread in the calling thread, so that oneDNN's blocking (which may depend on its
// thread count) is the same for every caller; each caller passes its own scratchpad (the library's own is shared).
// M, N, K, lda, ldb, ldc, tile_n, ta, tb, blocked, beta
using Key = std::tuple<int, int, int, int, int, int, int, bool, bool, bool, bool>;

struct Tile {
  memory::desc a, b, c, scratchpad;  // b: op(B) as the matmul reads it
  dnnl::matmul matmul;
};
struct Plan {
  Tile full, last;  // last: the final row tile when tile_rows does not divide M
  memory::desc b_float;    // blocked: a column tile of B as given
  dnnl::reorder reorder_b;  // blocked: b_float into full.b
};

Tile make_tile(int m, int n, int k, int lda, int ldc, bool ta, bool accumulate, const memory::desc& b) {
  Tile t;
  t.a = memory::desc({m, k}, memory::data_type::bf16, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
  t.c = memory::desc({m, n}, memory::data_type::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.f);  // C = A B + C
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(t.a, b, t.c), attr, engine());
  t.b = pd.weights_desc();
  t.scratchpad = pd.scratchpad_desc();
  t.matmul = dnnl::matmul(pd);
  return t;
}

const Plan& plan(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, Plan> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const auto [M, N, K, lda, ldb, ldc, tn, ta, tb, blocked, accumulate] = key;
  const int tm = tile_rows(M);
  Plan p;
  const memory::desc b = blocked ? memory::desc({K, tn}, memory::data_type::bf16, memory::format_tag::any)
                                 : memory::desc({K, tn}, memory::data_type::bf16,
                                                tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
  p.full = make_tile(std::min(tm, M), tn, K, lda, ldc, ta, accumulate, b);
  if (M % tm != 0 && M > tm) p.last = make_tile(M % tm, tn, K, lda, ldc, ta, accumulate, p.full.b);
  if (blocked) {
    p.b_float = memory::desc({K, tn}, memory::data_type::f32, memory::dims{ldb, 1});
    p.reorder_b = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), p.b_float, engine(), p.full.b));
  }
  return cache.emplace(key, std::move(p)).first->second;
}

// n floats rounded to bf16 (to nearest even; float denormals to zero, as bf16_bits): with the CPU's own
// conversion where it has AVX512-BF16 (every AMX CPU does), else one at a time.
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_row_avx512(const float* x, uint16_t* out,
                                                                                          int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), (__m256i)h);
  }
  for (; i < n; ++i) out[i] = bf16_bits(x[i]);
}

#endif

void round_row(const float* x, uint16_t* out, int n) {
#if defined(__x86_64__)
  static const bool fast = cpu_has_avx512_bf16();
  if (fast) return round_row_avx512(x, out, n);
#endif
  for (int i = 0; i < n; ++i) out[i] = bf16_bits(x[i]);
}

// A rows x cols float matrix (leading dimension ld) rounded to bf16 into `out`, same layout.
void round_to_bf16(const float* x, int rows, int cols, int ld, std::vector<uint16_t>& out) {
  out.resize(static_cast<size_t>(rows - 1) * ld + cols);
  uint16_t* o = out.data();
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) round_row(x + static_cast<size_t>(r) * ld, o + static_cast<size_t>(r) * ld, cols);
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

// B as the matmuls read it, for one thread: rounded to bf16 as stored, or (blocked) op(B) rounded and reordered,
// one buffer per column tile. A call without a version converts into its thread's scratch copy every time; one
// with a version (SgemmExtras::b_version) keeps its conversion in one of two slots (the tied head's weight is B in
// two products: the logits' and the input gradient's) for later calls with the same B, shape and version,
// replacing the least recently used slot. A slot holds up to one weight's bf16 copy (77 MB for GPT-2's head).
struct ConvertedB {
  const float* B = nullptr;
  int K = 0, N = 0, ldb = 0;
  bool trans_b = false, blocked = false;
  uint64_t version = 0, last_use = 0;
  bool ready = false;  // `rounded` or `tiles` hold this B at this version
  std::vector<uint16_t> rounded;
  std::vector<memory::desc> layouts;  // blocked: each column tile's layout and values
  std::vector<std::vector<unsigned char>> tiles;
};

ConvertedB& converted_b(const float* B, int K, int N, int ldb, bool trans_b, bool blocked, uint64_t version) {
  static thread_local ConvertedB scratch;
  static thread_local std::array<ConvertedB, 2> kept;
  static thread_local uint64_t uses = 0;
  if (version == 0) return scratch;
  ConvertedB* slot = nullptr;
  for (ConvertedB& c : kept)
    if (c.ready && c.B == B && c.K == K && c.N == N && c.ldb == ldb && c.trans_b == trans_b && c.blocked == blocked &&
        c.version == version)
      slot = &c;
  if (slot == nullptr) {
    slot = &*std::min_element(kept.begin(), kept.end(),
                              [](const ConvertedB& x, const ConvertedB& y) { return x.last_use < y.last_use; });
    slot->ready = false;
    slot->B = B, slot->K = K, slot->N = N, slot->ldb = ldb, slot->trans_b = trans_b, slot->blocked = blocked;
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
  static thread_local std::vector<uint16_t> a16;
  // Stored shapes: A is (M,K) or, transposed, (K,M); B is (K,N) or, transposed, (N,K).
  round_to_bf16(A, trans_a ? K : M, trans_a ? M : K, lda, a16);
  const int tm = tile_rows(M), tn = tile_cols(N);
  const int row_tiles = (M + tm - 1) / tm, col_tiles = (N + tn - 1) / tn;
  const uint16_t* a_data = a16.data();
  const bool nested = omp_in_parallel() != 0;
  const int outer = omp_get_max_threads();
  omp_set_num_threads(1);  // oneDNN plans and runs every tile on one thread
  // B not transposed is reordered into the blocked layout where that serves many rows: a kept copy (the head's
  // weight, over its row chunks) or tall C with a B of more than 64K values. Measured on an AMX Xeon, 1 thread:
  // GPT-2's step at 8x128 (2040 rows) ran 4805-5230 ms with it and 5233-5722 read in place (the head's input
  // gradient, 147 rows a chunk, 292 against 417 ms); at 4x32 (252 rows) 860-879 read in place and 887-904
  // reordered, and the source model's (2016 rows, B at most 128 x 512) 364-375 and 379-389.
  const bool blocked = !trans_b && (extras.b_version != 0 || (M >= 768 && static_cast<long>(K) * N > (1L << 16)));
  std::vector<const Plan*> plans(col_tiles);
  for (int jt = 0; jt < col_tiles; ++jt) {
    const int n = std::min(tn, N - jt * tn);
    plans[jt] = &plan(Key{M, n, K, lda, ldb, ldc, n, trans_a, trans_b, blocked, beta != 0.f});
  }
  omp_set_num_threads(outer);
  // B as the matmuls read it: this call's own conversion, or one kept from an earlier call with the same B and
  // version (blocked: ready when every tile's layout matches this call's plans)
  ConvertedB& b = converted_b(B, K, N, ldb, trans_b, blocked, extras.b_version);
  bool ready = b.ready && (!blocked || b.layouts.size() == static_cast<size_t>(col_tiles));
  for (int jt = 0; ready && blocked && jt < col_tiles; ++jt) ready = b.layouts[jt] == plans[jt]->full.b;
  if (!ready) {
    b.ready = false;
    if (!blocked) {
      round_to_bf16(B, trans_b ? N : K, trans_b ? K : N, ldb, b.rounded);
    } else {
      omp_set_num_threads(1);
      static thread_local dnnl::stream stream(engine());
      b.tiles.resize(std::max(b.tiles.size(), static_cast<size_t>(col_tiles)));
      b.layouts.assign(col_tiles, memory::desc());
      for (int jt = 0; jt < col_tiles; ++jt) {  // op(B)'s column tiles into the matmul's layout
        const Plan& p = *plans[jt];
        b.tiles[jt].resize(p.full.b.get_size());
        b.layouts[jt] = p.full.b;
        memory src(p.b_float, engine(), const_cast<float*>(B) + jt * tn);
        memory dst(p.full.b, engine(), b.tiles[jt].data());
        p.reorder_b.execute(stream, src, dst);
      }
      stream.wait();
      omp_set_num_threads(outer);
    }
    b.ready = extras.b_version != 0;
  }
  auto b_tile = [&b, blocked, trans_b, tn, ldb](int jt) -> void* {  // column tile jt of op(B), as the matmul reads it
    if (blocked) return b.tiles[jt].data();
    return b.rounded.data() + (trans_b ? static_cast<size_t>(jt) * tn * ldb : static_cast<size_t>(jt) * tn);
  };
  const int tiles = row_tiles * col_tiles;
  // Each thread takes a run of consecutive tiles. Where op(B) is the larger operand (N > M: a layer's weight
  // times a few hundred rows, the head's logits), column tiles go outer, so that a tile of op(B) is read from
  // memory once and stays in L2 for the row tiles; otherwise row tiles go outer (a weight gradient, the head's
  // 50257 x 768 one above all). Which thread computes a tile changes no result.
  const bool columns_outer = N > M;
#pragma omp parallel if (!nested)
  {
    omp_set_num_threads(1);
    static thread_local dnnl::stream tile_stream(engine());
    static thread_local std::vector<unsigned char> tile_scratch;
#pragma omp for schedule(static)
    for (int t = 0; t < tiles; ++t) {
      const int rt = columns_outer ? t % row_tiles : t / col_tiles, jt = columns_outer ? t / row_tiles : t % col_tiles;
      const int i0 = rt * tm, j0 = jt * tn;
      const int m = std::min(tm, M - i0), n = std::min(tn, N - j0);
      const Plan& p = *plans[jt];
      const Tile& tile = m == tm || M <= tm ? p.full : p.last;
      const uint16_t* a_tile = a_data + (trans_a ? static_cast<size_t>(i0) : static_cast<size_t>(i0) * lda);
      float* c_tile = C + static_cast<size_t>(i0) * ldc + j0;
      if (tile_scratch.size() < tile.scratchpad.get_size()) tile_scratch.resize(tile.scratchpad.get_size());
      memory a_mem(tile.a, engine(), const_cast<uint16_t*>(a_tile)), b_mem(tile.b, engine(), b_tile(jt));
      memory c_mem(tile.c, engine(), c_tile), scratch_mem(tile.scratchpad, engine(), tile_scratch.data());
      tile.matmul.execute(tile_stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem},
                                        {DNNL_ARG_SCRATCHPAD, scratch_mem}});
      tile_stream.wait();
      if (extras.bias != nullptr)
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) c_tile[static_cast<size_t>(i) * ldc + j] += extras.bias[j0 + j];
      if (extras.a_row_sums != nullptr && j0 == 0) add_row_sums(trans_a, A, lda, K, i0, m, extras.a_row_sums);
      if (extras.on_block_done != nullptr) extras.on_block_done(extras.context, i0, m, j0, n);
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
