// Every kernel's backward pass against double-precision central differences, at several input scales.
// Each check uses the scalar loss L = sum(w * out) with a fixed random w, so d L / d out = w.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "gemm_reference.h"
#include "gradcheck.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/fast_math.h"
#include "kernels/gelu.h"
#include "kernels/gelu_tanh.h"
#include "kernels/linear.h"
#include "kernels/linear_gelu.h"
#include "kernels/linear_glu.h"
#include "kernels/norm.h"
#include "kernels/sgemm.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::kernels;
using blocklab::testing::dot;
using blocklab::testing::expect_gradient_matches;
using blocklab::testing::random_vector;

class KernelGrad : public ::testing::TestWithParam<double> {
 protected:
  double scale() const { return GetParam(); }
  double step() const { return 1e-4 * scale(); }
  Rng rng{1234};
};

TEST_P(KernelGrad, Linear) {
  const int N = 5, C = 7, OC = 6;
  auto inp = random_vector(rng, N * C, scale());
  auto weight = random_vector(rng, OC * C, scale());
  auto bias = random_vector(rng, OC, scale());
  auto w = random_vector(rng, N * OC, 1.0);
  std::vector<double> out(N * OC);
  auto loss = [&] {
    linear_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    return dot(w, out.data());
  };
  std::vector<double> dinp(N * C, 0), dweight(OC * C, 0), dbias(OC, 0);
  linear_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), N, C, OC);
  expect_gradient_matches("dinp", inp, dinp, loss, step());
  expect_gradient_matches("dweight", weight, dweight, loss, step());
  expect_gradient_matches("dbias", bias, dbias, loss, step());
}

TEST_P(KernelGrad, LinearBackwardAccumulates) {
  const int N = 3, C = 4, OC = 5;
  auto inp = random_vector(rng, N * C, scale());
  auto weight = random_vector(rng, OC * C, scale());
  auto dout = random_vector(rng, N * OC, 1.0);
  std::vector<double> once(OC * C, 0), twice(OC * C, 0);
  linear_backward<double>(nullptr, once.data(), nullptr, dout.data(), inp.data(), weight.data(), N, C, OC);
  linear_backward<double>(nullptr, twice.data(), nullptr, dout.data(), inp.data(), weight.data(), N, C, OC);
  linear_backward<double>(nullptr, twice.data(), nullptr, dout.data(), inp.data(), weight.data(), N, C, OC);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-12 * scale() * scale());
}

TEST_P(KernelGrad, TokenEmbedding) {
  const int N = 9, C = 4, V = 5;
  std::vector<int32_t> tokens = {0, 3, 3, 1, 4, 0, 3, 2, 1};  // repeats exercise the scatter-add
  auto table = random_vector(rng, V * C, scale());
  auto w = random_vector(rng, N * C, 1.0);
  std::vector<double> out(N * C);
  auto loss = [&] {
    token_embedding_forward(out.data(), tokens.data(), table.data(), N, C);
    return dot(w, out.data());
  };
  std::vector<double> dtable(V * C, 0);
  token_embedding_backward(dtable.data(), w.data(), tokens.data(), N, C);
  expect_gradient_matches("dtable", table, dtable, loss, step());
}

TEST_P(KernelGrad, PositionEmbedding) {
  const int B = 3, Tn = 4, C = 5, Tmax = 6;
  auto table = random_vector(rng, Tmax * C, scale());
  auto base = random_vector(rng, B * Tn * C, scale());
  auto w = random_vector(rng, B * Tn * C, 1.0);
  std::vector<double> out(B * Tn * C);
  auto loss = [&] {
    out = base;
    position_embedding_forward(out.data(), table.data(), B, Tn, C);
    return dot(w, out.data());
  };
  std::vector<double> dtable(Tmax * C, 0);
  position_embedding_backward(dtable.data(), w.data(), B, Tn, C);
  // rows Tn..Tmax-1 are unused: their gradient is exactly zero, the numeric one too
  expect_gradient_matches("dtable", table, dtable, loss, step());
  for (int i = Tn * C; i < Tmax * C; ++i) EXPECT_EQ(dtable[i], 0.0);
}

TEST_P(KernelGrad, LayerNorm) {
  const int N = 4, C = 8;
  auto inp = random_vector(rng, N * C, scale());
  for (int c = 0; c < C; ++c) inp[c] += 3 * scale();  // a row with a large mean
  auto weight = random_vector(rng, C, 1.0);
  auto bias = random_vector(rng, C, 1.0);
  auto w = random_vector(rng, N * C, 1.0);
  std::vector<double> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C, 1e-5);
    return dot(w, out.data());
  };
  loss();
  std::vector<double> dinp(N * C, 0), dweight(C, 0), dbias(C, 0);
  layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), mean.data(),
                     rstd.data(), N, C);
  expect_gradient_matches("dinp", inp, dinp, loss, step());
  expect_gradient_matches("dweight", weight, dweight, loss, 1e-4);
  expect_gradient_matches("dbias", bias, dbias, loss, 1e-4);
}

TEST_P(KernelGrad, LayerNormNormalises) {
  const int N = 3, C = 16;
  auto inp = random_vector(rng, N * C, scale());
  std::vector<double> weight(C, 1.0), bias(C, 0.0), out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C, 0.0);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += out[n * C + c] / C;
    for (int c = 0; c < C; ++c) v += (out[n * C + c] - m) * (out[n * C + c] - m) / C;
    EXPECT_NEAR(m, 0.0, 1e-12);
    EXPECT_NEAR(v, 1.0, 1e-12);
  }
}

TEST_P(KernelGrad, RMSNorm) {
  const int N = 4, C = 8;
  auto inp = random_vector(rng, N * C, scale());
  auto weight = random_vector(rng, C, 1.0);
  auto w = random_vector(rng, N * C, 1.0);
  std::vector<double> out(N * C), rstd(N);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, 1e-5);
    return dot(w, out.data());
  };
  loss();
  std::vector<double> dinp(N * C, 0), dweight(C, 0);
  rmsnorm_backward(dinp.data(), dweight.data(), w.data(), inp.data(), weight.data(), rstd.data(), N, C);
  expect_gradient_matches("dinp", inp, dinp, loss, step());
  expect_gradient_matches("dweight", weight, dweight, loss, 1e-4);
}

// Derf: y = weight * erf(alpha * x + shift) + bias; every input and all four parameters checked, with a
// shift away from zero so that its gradient and alpha's are not symmetric about the origin.
TEST_P(KernelGrad, Derf) {
  const int N = 4, C = 8;
  auto inp = random_vector(rng, N * C, scale());
  auto weight = random_vector(rng, C, 1.0);
  auto bias = random_vector(rng, C, 1.0);
  std::vector<double> alpha{0.5 / scale() + 0.1 * rng.normal()}, shift{0.3 + 0.1 * rng.normal()};
  auto w = random_vector(rng, N * C, 1.0);
  std::vector<double> out(N * C);
  auto loss = [&] {
    derf_forward(out.data(), inp.data(), weight.data(), bias.data(), alpha.data(), shift.data(), N, C);
    return dot(w, out.data());
  };
  loss();
  for (int i = 0; i < N * C; ++i)
    EXPECT_NEAR(out[i], weight[i % C] * std::erf(alpha[0] * inp[i] + shift[0]) + bias[i % C], 1e-15);
  std::vector<double> dinp(N * C, 0), dweight(C, 0), dbias(C, 0), dalpha(1, 0), dshift(1, 0);
  derf_backward(dinp.data(), dweight.data(), dbias.data(), dalpha.data(), dshift.data(), w.data(), inp.data(),
                weight.data(), alpha.data(), shift.data(), N, C);
  expect_gradient_matches("dinp", inp, dinp, loss, step());
  expect_gradient_matches("dweight", weight, dweight, loss, 1e-4);
  expect_gradient_matches("dbias", bias, dbias, loss, 1e-4);
  expect_gradient_matches("dalpha", alpha, dalpha, loss, 1e-5);
  expect_gradient_matches("dshift", shift, dshift, loss, 1e-4);
}

// Head size 3 takes the generic path, 32 the register-tiled one (T = 19 crosses a 16-lane block).
void check_attention_gradient(Rng& rng, double scale, double step, int B, int Tn, int C, int H) {
  auto qkv = random_vector(rng, B * Tn * 3 * C, scale);
  auto w = random_vector(rng, B * Tn * C, 1.0);
  std::vector<double> out(B * Tn * C), att(B * H * Tn * Tn), scratch(attention_scratch_size(B, Tn, C, H));
  auto loss = [&] {
    attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), B, Tn, C, H);
    return dot(w, out.data());
  };
  loss();
  std::vector<double> dqkv(qkv.size(), 0);
  attention_backward(dqkv.data(), scratch.data(), w.data(), qkv.data(), att.data(), B, Tn, C, H);
  // Softmax saturates at scale 10, so the relative check is a little looser.
  expect_gradient_matches("dqkv", qkv, dqkv, loss, step, 1e-5);
}

TEST_P(KernelGrad, CausalAttention) { check_attention_gradient(rng, scale(), step(), 2, 5, 6, 2); }
TEST_P(KernelGrad, CausalAttentionTiled) { check_attention_gradient(rng, scale() / 4, step() / 4, 2, 19, 64, 2); }

TEST(Attention, FloatTiledPathMatchesDouble) {
  // head size 16, T = 70 (more than one 64-position tile): the float path (fast exp) against double,
  // forward and backward; the double path itself is checked against finite differences above.
  Rng rng(5);
  const int B = 2, Tn = 70, C = 32, H = 2;
  auto qkv = random_vector(rng, B * Tn * 3 * C, 1.0);
  auto dout = random_vector(rng, B * Tn * C, 1.0);
  std::vector<float> qkvf(qkv.begin(), qkv.end()), doutf(dout.begin(), dout.end()), outf(B * Tn * C),
      attf(B * H * Tn * Tn), scratchf(attention_scratch_size(B, Tn, C, H)), dqkvf(qkv.size(), 0.f);
  std::vector<double> out(B * Tn * C), att(B * H * Tn * Tn), scratch(attention_scratch_size(B, Tn, C, H)),
      dqkv(qkv.size(), 0.0);
  attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), B, Tn, C, H);
  attention_forward(outf.data(), attf.data(), scratchf.data(), qkvf.data(), B, Tn, C, H);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(outf[i], out[i], 2e-5 * std::max(1.0, std::abs(out[i])));
  attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, H);
  attention_backward(dqkvf.data(), scratchf.data(), doutf.data(), qkvf.data(), attf.data(), B, Tn, C, H);
  for (size_t i = 0; i < dqkv.size(); ++i) EXPECT_NEAR(dqkvf[i], dqkv[i], 1e-4 * std::max(1.0, std::abs(dqkv[i])));
}

// The float softmax rows run over whole vectors and mask a row's end: every T from 1 (a single position) through
// the lengths around one vector (16) and one tile (64), against double, forward and backward.
TEST(Attention, FloatRowsOfEveryLengthMatchDouble) {
  for (int Tn : {1, 2, 5, 15, 16, 17, 31, 33, 48, 63, 64, 65, 80}) {
    SCOPED_TRACE("T " + std::to_string(Tn));
    Rng rng(static_cast<uint64_t>(100 + Tn));
    const int B = 1, C = 32, H = 2;  // head size 16: the tiled path
    auto qkv = random_vector(rng, B * Tn * 3 * C, 2.0);
    auto dout = random_vector(rng, B * Tn * C, 1.0);
    std::vector<float> qkvf(qkv.begin(), qkv.end()), doutf(dout.begin(), dout.end()), outf(B * Tn * C),
        attf(B * H * Tn * Tn), scratchf(attention_scratch_size(B, Tn, C, H)), dqkvf(qkv.size(), 7.f);
    std::vector<double> out(B * Tn * C), att(B * H * Tn * Tn), scratch(attention_scratch_size(B, Tn, C, H)),
        dqkv(qkv.size(), 0.0);
    attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), B, Tn, C, H);
    attention_forward(outf.data(), attf.data(), scratchf.data(), qkvf.data(), B, Tn, C, H);
    for (size_t i = 0; i < att.size(); ++i) ASSERT_NEAR(attf[i], att[i], 2e-6) << "att " << i;  // zeros included
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(outf[i], out[i], 2e-5 * std::max(1.0, std::abs(out[i])));
    attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, H);
    attention_backward(dqkvf.data(), scratchf.data(), doutf.data(), qkvf.data(), attf.data(), B, Tn, C, H);
    for (size_t i = 0; i < dqkv.size(); ++i)  // dqkvf was 7 everywhere: every element written, none added to
      ASSERT_NEAR(dqkvf[i], dqkv[i], 1e-4 * std::max(1.0, std::abs(dqkv[i]))) << "dqkv " << i;
  }
}

TEST_P(KernelGrad, AttentionIsCausal) {
  const int B = 1, Tn = 6, C = 4, H = 2;
  auto qkv = random_vector(rng, B * Tn * 3 * C, scale());
  std::vector<double> out(B * Tn * C), att(B * H * Tn * Tn), out2(B * Tn * C);
  std::vector<double> scratch(attention_scratch_size(B, Tn, C, H));
  attention_forward(out.data(), att.data(), scratch.data(), qkv.data(), B, Tn, C, H);
  for (int h = 0; h < H; ++h)
    for (int t = 0; t < Tn; ++t) {
      double row = 0;
      for (int s = 0; s < Tn; ++s) {
        const double p = att[(h * Tn + t) * Tn + s];
        if (s > t) {
          EXPECT_EQ(p, 0.0);
        }
        row += p;
      }
      EXPECT_NEAR(row, 1.0, 1e-12);
    }
  // Changing the last token must not change any earlier output.
  for (int c = 0; c < 3 * C; ++c) qkv[(Tn - 1) * 3 * C + c] += 1.0;
  attention_forward(out2.data(), att.data(), scratch.data(), qkv.data(), B, Tn, C, H);
  for (int i = 0; i < (Tn - 1) * C; ++i) EXPECT_EQ(out[i], out2[i]);
}

TEST_P(KernelGrad, Gelu) {
  const int N = 40;
  auto inp = random_vector(rng, N, scale());
  auto w = random_vector(rng, N, 1.0);
  std::vector<double> out(N);
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), N);
    return dot(w, out.data());
  };
  std::vector<double> dinp(N, 0);
  gelu_backward(dinp.data(), w.data(), inp.data(), N);
  expect_gradient_matches("dinp", inp, dinp, loss, step());
}

TEST(Gelu, MatchesErfFormValues) {
  // 0.5 x (1 + erf(x / sqrt 2)) at known points (PyTorch's F.gelu gives the same).
  const std::vector<double> x = {-3.0, -1.0, 0.0, 0.5, 2.0};
  const std::vector<double> expected = {-0.00404969409489031, -0.15865525393145702, 0.0, 0.34573123063700656,
                                        1.9544997361036416};
  std::vector<double> out(x.size());
  gelu_forward(out.data(), x.data(), static_cast<long>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-9);
}

TEST_P(KernelGrad, Residual) {
  const int N = 12;
  auto a = random_vector(rng, N, scale());
  auto b = random_vector(rng, N, scale());
  auto w = random_vector(rng, N, 1.0);
  std::vector<double> out(N);
  auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), N);
    return dot(w, out.data());
  };
  std::vector<double> da(N, 0), db(N, 0);
  residual_backward(da.data(), db.data(), w.data(), N);
  expect_gradient_matches("da", a, da, loss, step());
  expect_gradient_matches("db", b, db, loss, step());
}

TEST_P(KernelGrad, MaskedCrossEntropy) {
  const int N = 6, V = 5;
  auto logits = random_vector(rng, N * V, scale());
  std::vector<int32_t> targets = {1, 4, 0, 2, 2, 3};
  std::vector<uint8_t> mask = {0, 1, 1, 0, 1, 1};
  std::vector<double> scratch(N * V), losses(N);
  auto loss = [&] {
    return cross_entropy_forward(scratch.data(), losses.data(), logits.data(), targets.data(), mask.data(), N, V);
  };
  std::vector<double> dlogits(N * V, 7.0);  // overwritten, not added to
  cross_entropy_forward(dlogits.data(), losses.data(), logits.data(), targets.data(), mask.data(), N, V);
  expect_gradient_matches("dlogits", logits, dlogits, loss, step());
  // unselected rows get exactly zero gradient and loss
  for (int v = 0; v < V; ++v) EXPECT_EQ(dlogits[0 * V + v], 0.0);
  EXPECT_EQ(losses[3], 0.0);
}

TEST(CrossEntropy, UniformLogitsGiveLogV) {
  const int N = 4, V = 64;
  std::vector<double> logits(N * V, 0.25), dlogits(N * V), losses(N);
  std::vector<int32_t> targets = {0, 10, 63, 5};
  std::vector<uint8_t> mask = {1, 1, 1, 1};
  const double l = cross_entropy_forward(dlogits.data(), losses.data(), logits.data(), targets.data(), mask.data(),
                                         N, V);
  EXPECT_NEAR(l, std::log(64.0), 1e-12);
}

TEST(CrossEntropy, ExtremeLogitsStayFinite) {
  const int N = 1, V = 3;
  std::vector<float> logits = {1000.f, -1000.f, 0.f}, dlogits(3), losses(1);
  std::vector<int32_t> targets = {1};
  std::vector<uint8_t> mask = {1};
  const float l = cross_entropy_forward(dlogits.data(), losses.data(), logits.data(), targets.data(), mask.data(),
                                        N, V);
  EXPECT_FLOAT_EQ(l, 2000.f);
  EXPECT_FLOAT_EQ(dlogits[0], 1.f);
  EXPECT_FLOAT_EQ(dlogits[1], -1.f);
  EXPECT_LE(std::abs(dlogits[2]), 1e-30f);
}

// The head writes the loss's gradient over the logits (model/model.cpp): in place, the rows' losses and gradient
// are those written beside the logits, bit for bit, in float (vector loops and a remainder) and double.
template <typename T>
void expect_in_place_rows_match(Rng& rng) {
  const int rows = 5, V = 1000, count = 9;
  std::vector<T> logits(rows * V);
  for (auto& z : logits) z = static_cast<T>(4.0 * rng.normal());
  const std::vector<int32_t> targets = {0, 999, 17, 512, 998};
  std::vector<T> dlogits(rows * V), losses(rows), in_place = logits, in_place_losses(rows);
  cross_entropy_rows(dlogits.data(), losses.data(), logits.data(), targets.data(), rows, V, count);
  cross_entropy_rows(in_place.data(), in_place_losses.data(), in_place.data(), targets.data(), rows, V, count);
  for (int n = 0; n < rows; ++n) EXPECT_EQ(in_place_losses[n], losses[n]) << "row " << n;
  for (int i = 0; i < rows * V; ++i) ASSERT_EQ(in_place[i], dlogits[i]) << "value " << i;
}

TEST(CrossEntropy, RowsInPlaceGiveTheSameNumbers) {
  Rng rng(11);
  expect_in_place_rows_match<float>(rng);
  expect_in_place_rows_match<double>(rng);
}

// The vectorised float path (16-lane max and sum, the fast exp) against double, on rows long enough to take the
// vector loops and with a remainder (V = 1000 = 62 * 16 + 8), at 1 and 2 threads (the same bits).
TEST(CrossEntropy, FloatMatchesDoubleAtVocabularySize) {
  const int N = 9, V = 1000;
  Rng rng(5);
  std::vector<double> zd(static_cast<size_t>(N) * V);
  for (double& z : zd) z = 4.0 * rng.normal();
  std::vector<float> zf(zd.begin(), zd.end());
  for (size_t i = 0; i < zd.size(); ++i) zd[i] = zf[i];  // the same inputs exactly
  std::vector<int32_t> targets(N);
  std::vector<uint8_t> mask(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 131) % V, mask[n] = n % 4 != 1;
  std::vector<double> dd(zd.size()), ld(N);
  const double want = cross_entropy_forward(dd.data(), ld.data(), zd.data(), targets.data(), mask.data(), N, V);
  std::vector<float> first;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<float> df(zf.size()), lf(N);
    const float got = cross_entropy_forward(df.data(), lf.data(), zf.data(), targets.data(), mask.data(), N, V);
    EXPECT_NEAR(got, want, 1e-6 * want);
    for (size_t i = 0; i < df.size(); ++i) ASSERT_NEAR(df[i], dd[i], 1e-8 + 1e-6 * std::abs(dd[i])) << i;
    if (threads == 1)
      first = df;
    else
      EXPECT_EQ(df, first);
  }
  set_num_threads(0);
}

INSTANTIATE_TEST_SUITE_P(Scales, KernelGrad, ::testing::Values(0.1, 1.0, 10.0),
                         [](const auto& info) {
                           return info.param < 1 ? std::string("scale_0_1") : "scale_" + std::to_string(static_cast<int>(info.param));
                         });

TEST(FastMath, FloatExpAndErfApproximationsAreAccurate) {
  double worst_exp = 0, worst_erf = 0;
  for (double x = -87.0; x <= 88.0; x += 0.00731) {
    const float xf = static_cast<float>(x);
    worst_exp = std::max(worst_exp, std::abs(exp_approx(xf) - std::exp(double(xf))) / std::exp(double(xf)));
  }
  for (double x = -9.0; x <= 9.0; x += 0.000713) {
    const float xf = static_cast<float>(x);
    worst_erf = std::max(worst_erf, std::abs(erf_approx(xf) - std::erf(double(xf))));
  }
  EXPECT_LT(worst_exp, 2e-7);  // ~2 ulp
  EXPECT_LT(worst_erf, 6e-7);  // A&S 7.1.26 (1.5e-7) plus float rounding
  EXPECT_EQ(erf_approx(0.f), 0.f);
  EXPECT_GE(exp_approx(-200.f), 0.f);
  EXPECT_LT(exp_approx(-200.f), 1e-37f);
}

// erf caps |x| before its exp(-x^2) (so that exp needs no clamps): past the cap, out to the largest floats, erf is
// exactly +-1, GELU is x (or 0) and its derivative 1 (or 0); a NaN still gives NaN through GELU's factor x.
TEST(FastMath, FloatErfAndGeluHoldInTheTails) {
  for (float x : {4.5f, 9.2f, 9.3f, 9.4f, 13.1f, 13.2f, 13.3f, 20.f, 1e3f, 1e19f, 1e30f, 3e38f}) {
    float e = -1.f;
    EXPECT_EQ(erf_approx_with_exp(x, e), 1.f) << x;
    EXPECT_GE(e, 0.f) << x;
    EXPECT_LT(e, 1e-6f) << x;
    EXPECT_EQ(erf_approx(-x), -1.f) << x;
    if (x < 13.2f) continue;  // GELU's erf is at x / sqrt 2: past the cap from 13.2 on
    EXPECT_EQ(gelu_value(x), x) << x;
    EXPECT_EQ(gelu_value(-x), 0.f) << x;
    if (x < 1e30f) {  // x times exp(-9.3^2) stays below float rounding of 1 up to there
      EXPECT_EQ(gelu_derivative(x), 1.f) << x;
      EXPECT_NEAR(gelu_derivative(-x), 0.f, 1e-6f) << x;
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(gelu_value(nan)));
  EXPECT_TRUE(std::isnan(gelu_derivative(nan)));
}

TEST(FastMath, FloatGeluMatchesDouble) {
  std::vector<double> xd;
  for (double x = -8; x <= 8; x += 0.01) xd.push_back(x);
  std::vector<float> xf(xd.begin(), xd.end()), of(xd.size()), gf(xd.size(), 0.f), ones(xd.size(), 1.f);
  std::vector<double> od(xd.size()), gd(xd.size(), 0.0), onesd(xd.size(), 1.0);
  gelu_forward(of.data(), xf.data(), static_cast<long>(xf.size()));
  gelu_forward(od.data(), xd.data(), static_cast<long>(xd.size()));
  gelu_backward(gf.data(), ones.data(), xf.data(), static_cast<long>(xf.size()));
  gelu_backward(gd.data(), onesd.data(), xd.data(), static_cast<long>(xd.size()));
  for (size_t i = 0; i < xd.size(); ++i) {
    EXPECT_NEAR(of[i], od[i], 1e-6 * std::max(1.0, std::abs(xd[i])));
    EXPECT_NEAR(gf[i], gd[i], 2e-6);
  }
}

// The tanh GELU in float (sigmoid form with the vectorising exp) against libm's tanh in double, over a range
// that reaches the tails (|x| = 12: tanh saturated, the sigmoid's exp clamped), forward and derivative.
TEST(FastMath, FloatGeluTanhMatchesDouble) {
  std::vector<double> xd;
  for (double x = -12; x <= 12; x += 0.0037) xd.push_back(x);
  std::vector<float> xf(xd.begin(), xd.end()), of(xd.size()), gf(xd.size()), ones(xd.size(), 1.f);
  std::vector<double> od(xd.size()), gd(xd.size()), onesd(xd.size(), 1.0);
  gelu_tanh_forward(of.data(), xf.data(), static_cast<long>(xf.size()));
  gelu_tanh_forward(od.data(), xd.data(), static_cast<long>(xd.size()));
  gelu_tanh_backward(gf.data(), ones.data(), xf.data(), static_cast<long>(xf.size()));
  gelu_tanh_backward(gd.data(), onesd.data(), xd.data(), static_cast<long>(xd.size()));
  const double k = 0.7978845608028654, c = 0.044715;
  double worst_value = 0, worst_derivative = 0;
  for (size_t i = 0; i < xd.size(); ++i) {
    const double x = static_cast<double>(xf[i]);  // the float input, exactly
    const double th = std::tanh(k * (x + c * x * x * x));
    const double want = 0.5 * x * (1 + th);
    const double want_d = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * c * x * x);
    worst_value = std::max(worst_value, std::abs(of[i] - want) / std::max(1.0, std::abs(want)));
    worst_derivative = std::max(worst_derivative, std::abs(gf[i] - want_d));
    const double xi = xd[i], thd = std::tanh(k * (xi + c * xi * xi * xi));
    EXPECT_NEAR(od[i], 0.5 * xi * (1 + thd), 1e-15 * std::max(1.0, std::abs(xi)));
    EXPECT_NEAR(gd[i], 0.5 * (1 + thd) + 0.5 * xi * (1 - thd * thd) * k * (1 + 3 * c * xi * xi), 1e-14);
  }
  EXPECT_LT(worst_value, 1e-6);
  EXPECT_LT(worst_derivative, 2e-6);
  // the tails: exactly x far right, 0 (not NaN) far left: within 1e-20, as exp(-2u) is capped at exp(64) there (the
  // ratio 1 / (1 + e) held at 1.6e-28, fast_math.h's exp_for_ratio)
  const float big[4] = {30.f, 100.f, -30.f, -100.f}, one4[4] = {1.f, 1.f, 1.f, 1.f};
  float out[4], d[4];
  gelu_tanh_forward(out, big, 4);
  gelu_tanh_backward(d, one4, big, 4);
  EXPECT_EQ(out[0], 30.f);
  EXPECT_EQ(out[1], 100.f);
  EXPECT_EQ(d[0], 1.f);
  for (int i = 2; i < 4; ++i) {
    EXPECT_LE(std::abs(out[i]), 1e-20f) << big[i];
    EXPECT_LE(std::abs(d[i]), 1e-20f) << big[i];
  }
}

// The fused MLP kernels against the unfused ones (float: the GELU runs on finished sgemm blocks) at 1 and
// 2 threads, with a width that leaves partial register tiles: the products and weight gradients agree bit
// for bit, the GELU terms to rounding (an element at a block's edge may take the compiler's scalar
// remainder loop instead of its vector loop); and the fused results do not depend on the thread count.
// The forward may keep GELU's derivative in `pre` for the backward (GeluSaved::Derivative): act, and then the
// backward's dpre, dweight and dbias, are bit for bit those of the path that keeps the pre-activation; and the
// derivative the forward saved is the fused backward's gelu'(pre) (dout = 1 through an identity weight).
TEST(LinearGelu, DerivativeKeptInTheForwardGivesTheSameBackward) {
  const int N = 67, C = 24, OC = 100;
  Rng rng(18);
  auto floats = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(rng.normal());
    return v;
  };
  const auto inp = floats(N * C), w1 = floats(OC * C), b1 = floats(OC), w2 = floats(C * OC), dout = floats(N * C);
  for (GeluForm form : {GeluForm::Erf, GeluForm::Tanh}) {
    SCOPED_TRACE(form == GeluForm::Erf ? "erf GELU" : "tanh GELU");
    std::vector<float> pre(N * OC), act(N * OC), kept(N * OC), act_kept(N * OC);
    ASSERT_EQ(linear_gelu_forward(act.data(), pre.data(), inp.data(), w1.data(), b1.data(), N, C, OC,
                                  GemmPrecision::Fp32, form),
              GeluSaved::PreActivation);
    const GeluSaved saved = linear_gelu_forward(act_kept.data(), kept.data(), inp.data(), w1.data(), b1.data(), N, C,
                                                OC, GemmPrecision::Fp32, form, /*want_derivative=*/true);
    if (sgemm_isa() == SgemmIsa::None) {  // BLOCKLAB_GEMM=blas: no fused epilogue, nothing kept
      EXPECT_EQ(saved, GeluSaved::PreActivation);
      EXPECT_EQ(kept, pre);
    } else {
      ASSERT_EQ(saved, GeluSaved::Derivative);
      EXPECT_NE(kept, pre);
    }
    EXPECT_EQ(act_kept, act);
    std::vector<float> dpre(N * OC), dw(C * OC, 0.f), db(C, 0.f), dpre_kept(N * OC), dw_kept(C * OC, 0.f),
        db_kept(C, 0.f);
    gelu_linear_backward(dpre.data(), dw.data(), db.data(), dout.data(), pre.data(), act.data(), w2.data(), N, OC, C,
                         GemmPrecision::Fp32, form);
    gelu_linear_backward(dpre_kept.data(), dw_kept.data(), db_kept.data(), dout.data(), kept.data(), act_kept.data(),
                         w2.data(), N, OC, C, GemmPrecision::Fp32, form, saved);
    EXPECT_EQ(dpre_kept, dpre);
    EXPECT_EQ(dw_kept, dw);
    EXPECT_EQ(db_kept, db);
    if (saved == GeluSaved::Derivative) {
      // with dout = the identity's rows (OC = C' = OC: a square weight of ones on the diagonal) dpre = gelu'(pre)
      std::vector<float> eye(static_cast<size_t>(OC) * OC, 0.f), ones(static_cast<size_t>(N) * OC, 1.f),
          derivative(N * OC), dw_eye(static_cast<size_t>(OC) * OC, 0.f), db_eye(OC, 0.f);
      for (int i = 0; i < OC; ++i) eye[static_cast<size_t>(i) * OC + i] = 1.f;
      gelu_linear_backward(derivative.data(), dw_eye.data(), db_eye.data(), ones.data(), pre.data(), act.data(),
                           eye.data(), N, OC, OC, GemmPrecision::Fp32, form);
      EXPECT_EQ(kept, derivative);
    }
  }
}

// The gated MLP fused with its linear layers (linear_glu.h) against the unfused kernels: the products and weight
// gradients bit for bit, the gated values and their gradients to rounding; the same bits at 1 and 2 threads. In
// bf16 with the weights' rounded copies where the products read them. I = 50 and 40 leave partial register tiles and
// blocks; N = 67 partial row panels.
TEST(LinearGlu, FusedMatchesUnfused) {
  const int N = 67, C = 24, OC = 36;
  Rng rng(23);
  auto floats = [&](size_t n) { return blocklab::testing::random_floats(rng, n); };
  // |got - want| <= 1e-6 (|want| + |scale|): the activation's value and derivative are computed to ~1e-7
  auto expect_close = [](const std::vector<float>& got, const std::vector<float>& want,
                         const std::vector<float>& scale, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    long differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::abs(got[i] - want[i]), 1e-6f * (std::abs(want[i]) + std::abs(scale[i])))
          << what << "[" << i << "]";
      differ += got[i] != want[i];
    }
    if (differ > 0) std::printf("%s: %ld of %zu values differ in their last bits\n", what, differ, got.size());
  };
  for (const int I : {50, 40}) {
    const auto inp = floats(N * C), w1 = floats(2 * I * C), b1 = floats(2 * I), w2 = floats(OC * I),
               dout = floats(N * OC);
    std::vector<uint16_t> w1_16(w1.size()), w2_16(w2.size());
    round_to_bf16(w1.data(), w1_16.data(), static_cast<long>(w1.size()));
    round_to_bf16(w2.data(), w2_16.data(), static_cast<long>(w2.size()));
    for (const GemmPrecision precision : {GemmPrecision::Fp32, GemmPrecision::Bf16})
      for (const GluKind kind : {GluKind::SwiGLU, GluKind::GeGLU}) {
        SCOPED_TRACE(std::string(kind == GluKind::SwiGLU ? "SwiGLU" : "GeGLU") + " I " + std::to_string(I) +
                     (precision == GemmPrecision::Bf16 ? " bf16" : " fp32"));
        const uint16_t* r1 = precision == GemmPrecision::Bf16 ? w1_16.data() : nullptr;
        const uint16_t* r2 = precision == GemmPrecision::Bf16 ? w2_16.data() : nullptr;
        // unfused
        std::vector<float> pre_ref(N * 2 * I), act_ref(N * I), dact(N * I), dpre_ref(N * 2 * I);
        std::vector<float> dw_ref(w2.size(), 0.5f), db_ref(OC, 0.25f);
        linear_forward(pre_ref.data(), inp.data(), w1.data(), b1.data(), N, C, 2 * I, precision, 0, r1);
        glu_forward(act_ref.data(), pre_ref.data(), N, I, kind);
        linear_backward(dact.data(), dw_ref.data(), db_ref.data(), dout.data(), act_ref.data(), w2.data(), N, I, OC,
                        GradWrite::Overwrite, precision, 0, r2);
        glu_backward(dpre_ref.data(), dact.data(), pre_ref.data(), N, I, kind);
        std::vector<float> value(N * I), dact_value(N * 2 * I);  // the scales of the rounding differences
        for (int n = 0; n < N; ++n)
          for (int i = 0; i < I; ++i) {
            value[n * I + i] = pre_ref[n * 2 * I + i];
            dact_value[n * 2 * I + i] = dact[n * I + i];
            dact_value[n * 2 * I + I + i] = dact[n * I + i] * value[n * I + i];
          }
        auto fused = [&](int threads) {  // act, pre, dpre, dw, db; every output filled with a value first
          set_num_threads(threads);
          std::vector<float> pre(N * 2 * I, 3.f), act(N * I, 5.f), dpre(N * 2 * I, 7.f);
          std::vector<float> dw(w2.size(), 0.5f), db(OC, 0.25f);
          linear_glu_forward(act.data(), pre.data(), inp.data(), w1.data(), b1.data(), N, C, I, kind, precision, r1);
          glu_linear_backward(dpre.data(), dw.data(), db.data(), dout.data(), pre_ref.data(), act_ref.data(),
                              w2.data(), N, I, OC, kind, precision, r2);
          set_num_threads(0);
          return std::make_tuple(act, pre, dpre, dw, db);
        };
        const auto [act, pre, dpre, dw, db] = fused(1);
        EXPECT_EQ(pre, pre_ref);
        expect_close(act, act_ref, value, "act");
        expect_close(dpre, dpre_ref, dact_value, "dpre");
        EXPECT_EQ(dw, dw_ref);
        EXPECT_EQ(db, db_ref);
        EXPECT_TRUE(fused(2) == fused(1)) << "the thread count changes the results";
      }
  }
}

TEST(LinearGelu, FusedMatchesUnfused) {
  const int N = 67, C = 24, OC = 100;
  Rng rng(17);
  auto floats = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(rng.normal());
    return v;
  };
  // |got - want| <= 1e-6 |scale|: GELU and its derivative are computed to ~1e-7 absolute, so a result that
  // scales them by `scale` may differ by that much times |scale|
  auto expect_close = [](const std::vector<float>& got, const std::vector<float>& want,
                         const std::vector<float>& scale, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_LE(std::abs(got[i] - want[i]), 1e-6f * std::max(1e-30f, std::abs(scale[i]))) << what << "[" << i << "]";
  };
  const auto inp = floats(N * C), w1 = floats(OC * C), b1 = floats(OC), w2 = floats(C * OC), dout = floats(N * C);
  for (GeluForm form : {GeluForm::Erf, GeluForm::Tanh}) {
    SCOPED_TRACE(form == GeluForm::Erf ? "erf GELU" : "tanh GELU");
    std::vector<float> first_act, first_dpre;
    for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<float> pre(N * OC), act(N * OC), pre_ref(N * OC), act_ref(N * OC);
    linear_gelu_forward(act.data(), pre.data(), inp.data(), w1.data(), b1.data(), N, C, OC, GemmPrecision::Fp32, form);
    linear_forward(pre_ref.data(), inp.data(), w1.data(), b1.data(), N, C, OC);
    if (form == GeluForm::Erf)
      gelu_forward(act_ref.data(), pre_ref.data(), static_cast<long>(N) * OC);
    else
      gelu_tanh_forward(act_ref.data(), pre_ref.data(), static_cast<long>(N) * OC);
    EXPECT_EQ(pre, pre_ref);
    expect_close(act, act_ref, pre_ref, "act");
    // backward of y = act @ w2^T + b2 w.r.t. pre
    std::vector<float> dpre(N * OC, 7.f), dw(C * OC, 0.f), db(C, 0.f);
    std::vector<float> dact_ref(N * OC, 0.f), dpre_ref(N * OC, 0.f), dw_ref(C * OC, 0.f), db_ref(C, 0.f);
    gelu_linear_backward(dpre.data(), dw.data(), db.data(), dout.data(), pre.data(), act.data(), w2.data(), N, OC, C,
                         GemmPrecision::Fp32, form);
    linear_backward(dact_ref.data(), dw_ref.data(), db_ref.data(), dout.data(), act.data(), w2.data(), N, OC, C);
    if (form == GeluForm::Erf)
      gelu_backward(dpre_ref.data(), dact_ref.data(), pre.data(), static_cast<long>(N) * OC);
    else
      gelu_tanh_backward(dpre_ref.data(), dact_ref.data(), pre.data(), static_cast<long>(N) * OC);
    expect_close(dpre, dpre_ref, dact_ref, "dpre");  // dpre was 7 everywhere before: overwritten, not added to
    EXPECT_EQ(dw, dw_ref);
    EXPECT_EQ(db, db_ref);
    if (threads == 1) {
      first_act = act;
      first_dpre = dpre;
    } else {
      EXPECT_EQ(act, first_act);
      EXPECT_EQ(dpre, first_dpre);
    }
  }
  }
  set_num_threads(0);
}
