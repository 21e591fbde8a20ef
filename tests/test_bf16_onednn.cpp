// The bf16 GEMM through oneDNN (the AMX path): against a double-precision product of the operands rounded
// to bf16 for every transpose and tile edge, the extras (bias added last, row sums, callbacks covering C
// once), and bit-identical results for any thread count and inside a parallel region. Skips, saying why,
// where the build has no oneDNN or oneDNN has no bf16 matmul for this CPU (no AVX-512: AMD Zen 2/3, Intel
// client cores; or BLOCKLAB_ISA caps the kernels below it).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "gemm_reference.h"
#include "kernels/bf16_gemm.h"
#include "kernels/bf16_onednn.h"
#include "kernels/linear_gelu.h"
#include "kernels/linear_glu.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::kernels;
using blocklab::testing::BlockCount;
using blocklab::testing::random_floats;
using Case = blocklab::testing::GemmCase;

#define SKIP_WITHOUT_ONEDNN()                                                                \
  if (std::string why; !onednn_bf16_available(&why)) GTEST_SKIP() << "no oneDNN bf16 matmul: " << why

class OneDnnBf16Gemm : public ::testing::TestWithParam<Case> {};

TEST_P(OneDnnBf16Gemm, MatchesDoubleProductOfRoundedOperands) {
  SKIP_WITHOUT_ONEDNN();
  blocklab::testing::expect_matches_reference(
      GetParam(), [](auto... args) { return onednn_bf16_gemm(args...); }, bf16_round);
}

// Dense operands: C's tiles span its width where there are several row tiles, and oneDNN writes them in place
// (beta = 1 by its sum post-op) instead of into a scratch tile added to C.
TEST_P(OneDnnBf16Gemm, DenseOperandsMatchDoubleProductOfRoundedOperands) {
  SKIP_WITHOUT_ONEDNN();
  blocklab::testing::expect_matches_reference(
      GetParam(), [](auto... args) { return onednn_bf16_gemm(args...); }, bf16_round, true);
}

// With a version B's rounded copy is kept for later calls (a slot of its own).
TEST_P(OneDnnBf16Gemm, WithAVersionMatchesDoubleProductOfRoundedOperands) {
  SKIP_WITHOUT_ONEDNN();
  blocklab::testing::expect_matches_reference(
      GetParam(),
      [](bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float beta, float* C,
         int ldc) {
        return onednn_bf16_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, {.b_version = new_operand_version()});
      },
      bf16_round);
}

// Tile edges: one row tile up to M = 256, else tiles of up to 192 rows (800: 5 of 160; 300: 160 and 140); column
// tiles of up to 512 (600: 2 of 320; 1030: 3 of 352 and a last of 326) where there is one row tile or C is padded,
// but one column tile from K = 16 N on (544 columns, K = 8704: the tied head's input gradient).
INSTANTIATE_TEST_SUITE_P(Shapes, OneDnnBf16Gemm,
                         ::testing::Values(Case{1, 1, 1}, Case{13, 33, 17}, Case{65, 70, 257}, Case{130, 600, 40},
                                           Case{800, 40, 130}, Case{2, 1030, 9}, Case{300, 600, 33},
                                           Case{2, 544, 8704}),
                         [](const auto& info) {
                           return std::to_string(info.param.M) + "x" + std::to_string(info.param.N) + "x" +
                                  std::to_string(info.param.K);
                         });

// Operands given already rounded (SgemmExtras::a_bf16, b_bf16) give the bits of the same product from their float
// values, for every transpose, with C accumulated or overwritten: read in place, or copied into the tiles' panels
// (A transposed in several row tiles: M = 300, 800; B in several column tiles: N = 600, 1030). The float pointer is
// then never read (null here).
TEST_P(OneDnnBf16Gemm, RoundedOperandsGiveTheBitsOfFloatOnes) {
  SKIP_WITHOUT_ONEDNN();
  const Case c = GetParam();
  Rng rng(c.M * 7 + c.N);
  for (int t = 0; t < 16; ++t) {
    const bool tb = t & 1, accumulate = t & 2, rounded_a = t & 4, ta = t & 8;
    const auto A = random_floats(rng, static_cast<size_t>(c.M) * c.K);
    const auto B = random_floats(rng, static_cast<size_t>(c.K) * c.N);
    const auto C0 = random_floats(rng, static_cast<size_t>(c.M) * c.N);
    std::vector<uint16_t> a16(A.size()), b16(B.size());
    round_to_bf16(A.data(), a16.data(), static_cast<long>(A.size()));
    round_to_bf16(B.data(), b16.data(), static_cast<long>(B.size()));
    const int lda = ta ? c.M : c.K, ldb = tb ? c.K : c.N;
    const float beta = accumulate ? 1.f : 0.f;
    auto floats = C0, rounded = C0;
    ASSERT_TRUE(onednn_bf16_gemm(ta, tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, beta, floats.data(), c.N));
    SgemmExtras extras;
    (rounded_a ? extras.a_bf16 : extras.b_bf16) = rounded_a ? a16.data() : b16.data();
    ASSERT_TRUE(onednn_bf16_gemm(ta, tb, c.M, c.N, c.K, rounded_a ? nullptr : A.data(), lda,
                                 rounded_a ? B.data() : nullptr, ldb, beta, rounded.data(), c.N, extras));
    EXPECT_EQ(floats, rounded) << (rounded_a ? "A" : "B") << " rounded, ta " << ta << ", tb " << tb << ", beta "
                               << beta;
  }
}

// A given rounded (as stored, dense) for every transpose: op(A)'s row tiles of a transposed A are strided views of it.
TEST_P(OneDnnBf16Gemm, RoundedAMatchesDoubleProductOfRoundedOperands) {
  SKIP_WITHOUT_ONEDNN();
  blocklab::testing::expect_matches_reference(
      GetParam(),
      [](bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb, float beta, float* C,
         int ldc) {
        const int rows = ta ? K : M, cols = ta ? M : K;
        std::vector<uint16_t> a16(static_cast<size_t>(rows) * cols);
        round_to_bf16_and_sum_columns(A, lda, rows, cols, a16.data(), cols, nullptr);
        return onednn_bf16_gemm(ta, tb, M, N, K, nullptr, lda, B, ldb, beta, C, ldc, {.a_bf16 = a16.data()});
      },
      bf16_round);
}

TEST(OneDnnBf16Gemm, BiasRowSumsAndBlockCallbacks) {
  SKIP_WITHOUT_ONEDNN();
  const int N = 600, K = 70;
  Rng rng(9);
  for (int t = 0; t < 4; ++t) {  // M = 2016: the tall matrices' tiles
    const int ta = t & 1, M = t < 2 ? 200 : 2016;
    const auto A = random_floats(rng, static_cast<size_t>(M) * K), B = random_floats(rng, static_cast<size_t>(K) * N);
    const auto bias = random_floats(rng, N);
    const int lda = ta ? M : K;
    std::vector<float> plain(static_cast<size_t>(M) * N), with_bias(plain.size());
    ASSERT_TRUE(onednn_bf16_gemm(ta, false, M, N, K, A.data(), lda, B.data(), N, 0.f, plain.data(), N));
    BlockCount blocks(M, N, /*max_rows=*/96, /*column_step=*/32);
    std::vector<float> sums(M, 0.5f);
    SgemmExtras extras{.bias = bias.data(), .a_row_sums = sums.data(), .on_block_done = BlockCount::callback, .context = &blocks};
    ASSERT_TRUE(onednn_bf16_gemm(ta, false, M, N, K, A.data(), lda, B.data(), N, 0.f, with_bias.data(), N, extras));
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        const size_t at = static_cast<size_t>(i) * N + j;
        ASSERT_EQ(with_bias[at], plain[at] + bias[j]) << i << "," << j;  // added after the product, in float
        ASSERT_EQ(blocks.covered[at], 1) << i << "," << j;
      }
    EXPECT_TRUE(blocks.shapes_ok) << "a block of more than 96 rows, or not starting at a multiple of 32 columns";
    for (int i = 0; i < M; ++i) {
      float s = 0.f;
      for (int k = 0; k < K; ++k) s += ta ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
      EXPECT_EQ(sums[i], 0.5f + s) << "row " << i;
    }
  }
}

TEST(OneDnnBf16Gemm, ResultsDoNotDependOnTheThreadCount) {
  SKIP_WITHOUT_ONEDNN();
  Rng rng(5);
  // 800 x 600 x 512: tall C with a large B, which is reordered into the blocked layout where not transposed
  for (const Case c : {Case{500, 130, 300}, Case{128, 512, 2016}, Case{2016, 384, 128}, Case{800, 600, 512}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;  // B transposed is read in place, B as stored reordered
      const auto A = random_floats(rng, static_cast<size_t>(c.M) * c.K);
      const auto B = random_floats(rng, static_cast<size_t>(c.K) * c.N);
      const int lda = ta ? c.M : c.K, ldb = tb ? c.K : c.N;
      const std::string what = std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) +
                               " ta " + std::to_string(ta) + " tb " + std::to_string(tb);
      // C, then (A transposed: a weight gradient's dout) op(A)'s row sums, taken while A is rounded
      auto product = [&](int threads, bool nested) {
        set_num_threads(threads);
        std::vector<float> C(static_cast<size_t>(c.M) * c.N), sums(ta ? c.M : 0, 0.25f);
        const SgemmExtras extras{.a_row_sums = ta ? sums.data() : nullptr};
#pragma omp parallel num_threads(2) if (nested)
        {
          if (omp_get_thread_num() == 0) {
            EXPECT_TRUE(onednn_bf16_gemm(ta, tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, 0.f, C.data(), c.N,
                                         extras));
          }
        }
        C.insert(C.end(), sums.begin(), sums.end());
        return C;
      };
      const auto one = product(1, false);
      EXPECT_EQ(one, product(2, false)) << what;
      EXPECT_EQ(one, product(3, false)) << what;
      EXPECT_EQ(one, product(2, true)) << what << ": called inside a parallel region";
    }
  }
  set_num_threads(0);
}

// Where the CPU has AVX512-BF16, blocklab's own kernel and oneDNN multiply the same rounded operands: the
// results differ only by the order of the float sums.
TEST(OneDnnBf16Gemm, AgreesWithBlocklabsKernel) {
  SKIP_WITHOUT_ONEDNN();
  if (bf16_isa() != Bf16Isa::Avx512Bf16) GTEST_SKIP() << "blocklab's bf16 kernel does not run here: " << bf16_isa_description();
  const int M = 2016, N = 128, K = 512;
  Rng rng(3);
  const auto A = random_floats(rng, static_cast<size_t>(M) * K), B = random_floats(rng, static_cast<size_t>(N) * K);
  std::vector<float> ours(static_cast<size_t>(M) * N), theirs(ours.size());
  ASSERT_TRUE(bf16_gemm(false, true, M, N, K, A.data(), K, B.data(), K, 0.f, ours.data(), N));
  ASSERT_TRUE(onednn_bf16_gemm(false, true, M, N, K, A.data(), K, B.data(), K, 0.f, theirs.data(), N));
  double worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - theirs[i]));
  EXPECT_LT(worst, 1e-3) << "largest difference (entries are sums of 512 products of N(0,1) values, ~22 in size)";
}

// SgemmExtras::b_version: a call that names a version keeps B rounded and reordered, and a later call with the same
// B, shape and version multiplies that copy. Shown by breaking the promise on purpose: B changed under the same
// version still multiplies as it was (so the copy was kept, for both orientations of the tied head at once, and
// for another row count), a new version sees the change, and a call without a version never keeps anything.
TEST(OneDnnBf16Gemm, KeepsAVersionedBUntilTheVersionChanges) {
  SKIP_WITHOUT_ONEDNN();
  const int M = 130, N = 1030, K = 70, M2 = 65;  // 3 column tiles; 3 and 2 row tiles
  Rng rng(12);
  const auto A = random_floats(rng, static_cast<size_t>(M) * K);
  const auto A_nn = random_floats(rng, static_cast<size_t>(M) * N);  // the input-gradient product: (M,N) @ (N,K)
  const auto W0 = random_floats(rng, static_cast<size_t>(N) * K), W1 = random_floats(rng, W0.size());
  std::vector<float> W = W0;  // (N,K): the logits' product reads it transposed, the input gradient's as stored
  auto logits = [&](int m, uint64_t version) {
    std::vector<float> C(static_cast<size_t>(m) * N);
    EXPECT_TRUE(onednn_bf16_gemm(false, true, m, N, K, A.data(), K, W.data(), K, 0.f, C.data(), N,
                                 {.b_version = version}));
    return C;
  };
  auto d_input = [&](uint64_t version) {
    std::vector<float> C(static_cast<size_t>(M) * K);
    EXPECT_TRUE(onednn_bf16_gemm(false, false, M, K, N, A_nn.data(), N, W.data(), K, 0.f, C.data(), K,
                                 {.b_version = version}));
    return C;
  };
  const auto logits0 = logits(M, 0), logits0_short = logits(M2, 0), d_input0 = d_input(0);
  const uint64_t v = new_operand_version();
  EXPECT_EQ(logits(M, v), logits0) << "the first call with a version converts B as without one";
  EXPECT_EQ(d_input(v), d_input0);
  W = W1;  // the promise broken: same pointer, shape and version
  EXPECT_EQ(logits(M, v), logits0) << "the rounded copy of B was not kept";
  EXPECT_EQ(d_input(v), d_input0) << "the second orientation's copy was not kept beside the first";
  EXPECT_EQ(logits(M2, v), logits0_short) << "another row count did not reuse the copy";
  const auto logits1 = logits(M, 0), d_input1 = d_input(0);
  EXPECT_NE(logits1, logits0);
  const uint64_t v2 = new_operand_version();
  EXPECT_GT(v2, v);
  EXPECT_EQ(logits(M, v2), logits1) << "a new version must see B as it is now";
  EXPECT_EQ(d_input(v2), d_input1);
  W = W0;
  EXPECT_EQ(logits(M, 0), logits0) << "a call without a version used a kept copy";
  EXPECT_EQ(d_input(0), d_input0);
}

// The tied head's weight W (V, C) is B in two products, the logits' (x W^T: B transposed) and the input gradient's
// (dlogits W: B as stored, K = V >= 16 C, one column tile): both read W's plain rounded copy, so a version rounds it
// once. Shown by breaking the promise between the two: W changed after the logits' call still multiplies, in the
// input gradient's call, as it was.
TEST(OneDnnBf16Gemm, TheTiedHeadsTwoProductsRoundItsWeightOnce) {
  SKIP_WITHOUT_ONEDNN();
  const int rows = 24, C = 544, V = 16 * C;  // C over 512 columns: without the rule, two column tiles of 288 and 256
  Rng rng(13);
  const auto x = random_floats(rng, static_cast<size_t>(rows) * C);
  const auto d_logits = random_floats(rng, static_cast<size_t>(rows) * V);
  const auto W0 = random_floats(rng, static_cast<size_t>(V) * C), W1 = random_floats(rng, W0.size());
  std::vector<float> W = W0, logits(static_cast<size_t>(rows) * V), d_x(static_cast<size_t>(rows) * C);
  auto input_gradient = [&](uint64_t version) {
    EXPECT_TRUE(onednn_bf16_gemm(false, false, rows, C, V, d_logits.data(), V, W.data(), C, 0.f, d_x.data(), C,
                                 {.b_version = version}));
    return d_x;
  };
  const auto d_x0 = input_gradient(0);
  W = W1;
  const auto d_x1 = input_gradient(0);
  ASSERT_NE(d_x0, d_x1);
  W = W0;
  const uint64_t v = new_operand_version();
  ASSERT_TRUE(onednn_bf16_gemm(false, true, rows, V, C, x.data(), C, W.data(), C, 0.f, logits.data(), V,
                               {.b_version = v}));
  W = W1;  // the promise broken after the logits' product
  EXPECT_EQ(input_gradient(v), d_x0) << "the input gradient's product rounded W again instead of reading the "
                                        "logits' product's copy";
  EXPECT_EQ(input_gradient(new_operand_version()), d_x1);
}

namespace {
// How many of `rounded` are not the bf16 rounding of `values` (the same length).
long differ_from_rounding(const std::vector<uint16_t>& rounded, const std::vector<float>& values) {
  long differ = 0;
  for (size_t i = 0; i < values.size(); ++i) differ += rounded[i] != bf16_bits(values[i]);
  return differ;
}

// sums[j] == start + the sum of column j of the (rows, cols) matrix `values`, to the rounding of float sums of `rows`
// terms in another order (within ~rows eps of the sum of |x|).
void expect_column_sums(const std::vector<float>& sums, double start, const std::vector<float>& values, int rows,
                        int cols) {
  for (int j = 0; j < cols; ++j) {
    double sum = 0, magnitude = 0;
    for (int n = 0; n < rows; ++n) {
      sum += values[static_cast<size_t>(n) * cols + j];
      magnitude += std::fabs(values[static_cast<size_t>(n) * cols + j]);
    }
    EXPECT_NEAR(sums[j], start + sum, 2e-6 * magnitude) << j;
  }
}
// A rounded backward (`rounded(threads)`: its d_pre, weight gradient, bias gradient and fc1's bias gradient, the
// gradients started at 0.5, 0.25 and 0.125) against the float path's dpre, dw and db: the same for 1 and 2 threads,
// d_pre the float one rounded, dw and db bit for bit, fc1's bias gradient d_pre's column sums (width columns).
template <typename Rounded>
void expect_rounded_backward(Rounded&& rounded, const std::vector<float>& dpre, const std::vector<float>& dw,
                             const std::vector<float>& db, int N, int width) {
  const auto [dpre_r, dw_r, db_r, db1] = rounded(1);
  EXPECT_TRUE(rounded(2) == rounded(1)) << "the thread count changes the backward";
  EXPECT_EQ(differ_from_rounding(dpre_r, dpre), 0) << "of " << dpre.size() << " input gradients";
  EXPECT_EQ(dw, dw_r);
  EXPECT_EQ(db, db_r);
  expect_column_sums(db1, 0.125, dpre, N, width);
}
}  // namespace

// The MLP with its hidden tensors kept in bf16 (where the bf16 products take rounded operands): act is the float
// path's act rounded and pre its derivative; in the backward d_pre is the float path's rounded, fc1's bias gradient
// its column sums (per 192-row tile, then added: to float rounding of a sum in one order), fc2's weight terms those
// of the float act, and none of it depends on the thread count.
TEST(OneDnnBf16Gemm, GeluWithItsTensorsKeptRoundedGivesTheFloatPathsBits) {
  if (!bf16_gemm_takes_rounded_operands())
    GTEST_SKIP() << "the bf16 GEMMs here do not take rounded operands: " << bf16_isa_description();
  Rng rng(21);
  for (const Case c : {Case{2016, 512, 128}, Case{300, 1100, 48}}) {  // N, C, OC: fc1 (C -> I = N), fc2 (I -> OC)
    const int N = c.M, I = c.N, C = c.K, OC = c.K;
    const auto inp = random_floats(rng, static_cast<size_t>(N) * C);
    const auto w1 = random_floats(rng, static_cast<size_t>(I) * C);
    const auto b1 = random_floats(rng, I), w2 = random_floats(rng, static_cast<size_t>(OC) * I);
    const auto dout = random_floats(rng, static_cast<size_t>(N) * OC);
    for (const GeluForm form : {GeluForm::Erf, GeluForm::Tanh}) {
      std::vector<float> act(static_cast<size_t>(N) * I), pre(act.size()), pre_r(act.size());
      std::vector<uint16_t> act_r(act.size());
      ASSERT_EQ(linear_gelu_forward(act.data(), pre.data(), inp.data(), w1.data(), b1.data(), N, C, I,
                                    GemmPrecision::Bf16, form, true),
                GeluSaved::Derivative);
      linear_gelu_forward_rounded_act(act_r.data(), pre_r.data(), inp.data(), w1.data(), b1.data(), N, C, I, form);
      EXPECT_EQ(pre, pre_r);
      EXPECT_EQ(differ_from_rounding(act_r, act), 0) << "of " << act.size() << " activations";
      std::vector<float> dpre(act.size()), dw(w2.size(), 0.5f), db(OC, 0.25f);
      gelu_linear_backward(dpre.data(), dw.data(), db.data(), dout.data(), pre.data(), act.data(), w2.data(), N, I, OC,
                           GemmPrecision::Bf16, form, GeluSaved::Derivative);
      auto rounded = [&](int threads) {
        set_num_threads(threads);
        std::vector<uint16_t> dpre_r(act.size());
        std::vector<float> dw_r(w2.size(), 0.5f), db_r(OC, 0.25f), db1(I, 0.125f);
        gelu_linear_backward_rounded_dpre(dpre_r.data(), db1.data(), dw_r.data(), db_r.data(), dout.data(),
                                          pre_r.data(), act_r.data(), w2.data(), N, I, OC);
        set_num_threads(0);
        return std::make_tuple(dpre_r, dw_r, db_r, db1);
      };
      expect_rounded_backward(rounded, dpre, dw, db, N, I);
      // against the plain products: dpre = (dout W2) * gelu' and db the column sums of dout, bit for bit; dw from
      // dout's tiles as oneDNN's gemm kernel reads them in place, to float rounding of its other blocking
      std::vector<float> product(act.size()), dw_plain(w2.size(), 0.5f);
      ASSERT_TRUE(onednn_bf16_gemm(false, false, N, I, OC, dout.data(), OC, w2.data(), I, 0.f, product.data(), I));
      for (size_t i = 0; i < product.size(); ++i) ASSERT_EQ(dpre[i], product[i] * pre[i]) << i;
      ASSERT_TRUE(onednn_bf16_gemm(true, false, OC, I, N, dout.data(), OC, act.data(), I, 1.f, dw_plain.data(), I));
      for (int o = 0; o < OC; ++o) {
        float sum = 0.f;
        for (int n = 0; n < N; ++n) sum += dout[static_cast<size_t>(n) * OC + o];
        EXPECT_EQ(db[o], 0.25f + sum) << o;
      }
      for (size_t i = 0; i < dw.size(); ++i)
        ASSERT_NEAR(dw[i], dw_plain[i], 1e-5f * (1.f + std::fabs(dw_plain[i]))) << i;
    }
  }
}

// The gated MLP likewise (linear_glu.h): act the float path's act rounded and pre the same; in the backward d_pre the
// float path's rounded (both halves), fc1's bias gradient its column sums (per tile, then added: to float rounding of
// a sum in one order), fc2's weight terms those of the float act, none of it depending on the thread count.
TEST(OneDnnBf16Gemm, GluWithItsTensorsKeptRoundedGivesTheFloatPathsBits) {
  if (!bf16_gemm_takes_rounded_operands())
    GTEST_SKIP() << "the bf16 GEMMs here do not take rounded operands: " << bf16_isa_description();
  Rng rng(22);
  for (const Case c : {Case{2016, 512, 128}, Case{300, 550, 48}}) {  // N, I, C: fc1 (C -> 2I), fc2 (I -> OC = C)
    const int N = c.M, I = c.N, C = c.K, OC = c.K;
    const auto inp = random_floats(rng, static_cast<size_t>(N) * C);
    const auto w1 = random_floats(rng, static_cast<size_t>(2 * I) * C);
    const auto b1 = random_floats(rng, 2 * I), w2 = random_floats(rng, static_cast<size_t>(OC) * I);
    const auto dout = random_floats(rng, static_cast<size_t>(N) * OC);
    for (const GluKind kind : {GluKind::SwiGLU, GluKind::GeGLU}) {
      SCOPED_TRACE(kind == GluKind::SwiGLU ? "SwiGLU" : "GeGLU");
      std::vector<float> act(static_cast<size_t>(N) * I), pre(2 * act.size()), pre_r(pre.size(), 3.f);
      std::vector<uint16_t> act_r(act.size());
      linear_glu_forward(act.data(), pre.data(), inp.data(), w1.data(), b1.data(), N, C, I, kind, GemmPrecision::Bf16);
      linear_glu_forward_rounded_act(act_r.data(), pre_r.data(), inp.data(), w1.data(), b1.data(), N, C, I, kind);
      EXPECT_EQ(pre, pre_r);
      EXPECT_EQ(differ_from_rounding(act_r, act), 0) << "of " << act.size() << " activations";
      std::vector<float> dpre(pre.size()), dw(w2.size(), 0.5f), db(OC, 0.25f);
      glu_linear_backward(dpre.data(), dw.data(), db.data(), dout.data(), pre.data(), act.data(), w2.data(), N, I, OC,
                          kind, GemmPrecision::Bf16);
      auto rounded = [&](int threads) {
        set_num_threads(threads);
        std::vector<uint16_t> dpre_r(pre.size());
        std::vector<float> dw_r(w2.size(), 0.5f), db_r(OC, 0.25f), db1(2 * I, 0.125f);
        glu_linear_backward_rounded_dpre(dpre_r.data(), db1.data(), dw_r.data(), db_r.data(), dout.data(),
                                         pre_r.data(), act_r.data(), w2.data(), N, I, OC, kind);
        set_num_threads(0);
        return std::make_tuple(dpre_r, dw_r, db_r, db1);
      };
      expect_rounded_backward(rounded, dpre, dw, db, N, 2 * I);
    }
  }
}
