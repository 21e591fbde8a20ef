// The kernels the Hugging Face families' blocks add, forward, against plain double-precision references
// written from their definitions: RoPE, grouped-query attention, SwiGLU, tanh-GELU (their backward
// passes are checked against finite differences in test_kernels_block.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention_gqa.h"
#include "kernels/gelu_tanh.h"
#include "kernels/glu.h"
#include "kernels/rope.h"

namespace {

using namespace blocklab::kernels;

std::vector<double> randn(std::size_t n, unsigned seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = nd(rng);
  return v;
}

TEST(HfKernels, GeluTanhMatchesDefinition) {
  for (double x : {-6.0, -2.5, -1.0, -0.1, 0.0, 0.3, 1.0, 2.0, 7.5}) {
    const double expected = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    double d;
    float f;
    const float xf = static_cast<float>(x);
    gelu_tanh_forward<double>(&d, &x, 1);
    gelu_tanh_forward<float>(&f, &xf, 1);
    EXPECT_NEAR(d, expected, 1e-15);
    EXPECT_NEAR(f, expected, 1e-6 * std::max(1.0, std::abs(expected)));
  }
  const double one = 1.0;
  double out;
  gelu_tanh_forward<double>(&out, &one, 1);
  EXPECT_NEAR(out, 0.8411919906082768, 1e-15);  // a published value of gelu_new(1)
}

TEST(HfKernels, SwigluMatchesDefinition) {
  const std::vector<double> g = randn(100, 1, 3.0), u = randn(100, 2);
  // glu rows are [value | gate]: 4 rows of 25
  std::vector<double> packed;
  for (int r = 0; r < 4; ++r) {
    packed.insert(packed.end(), u.begin() + 25 * r, u.begin() + 25 * (r + 1));
    packed.insert(packed.end(), g.begin() + 25 * r, g.begin() + 25 * (r + 1));
  }
  std::vector<double> out(100);
  glu_forward<double>(out.data(), packed.data(), 4, 25, GluKind::SwiGLU);
  for (int i = 0; i < 100; ++i) EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-14);
}

// x (T, heads, D) rotated by the rotate-half definition, in double.
std::vector<double> rope_reference(const std::vector<double>& x, int T, int heads, int D, double theta) {
  std::vector<double> out(x.size());
  const int half = D / 2;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < D; ++i) {
        const int f = i % half;
        const double angle = t * std::pow(theta, -2.0 * f / D);
        const double* v = &x[(t * heads + h) * D];
        const double rotated = i < half ? -v[i + half] : v[i - half];  // rotate_half(x)
        out[(t * heads + h) * D + i] = v[i] * std::cos(angle) + rotated * std::sin(angle);
      }
  return out;
}

TEST(HfKernels, RopeMatchesRotateHalfDefinition) {
  const int T = 6, heads = 3, D = 8, half = 4;
  const double theta = 100.0;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = std::pow(theta, -2.0 * i / D);
  std::vector<double> cos(T * half), sin(T * half);
  rope_tables<double>(cos.data(), sin.data(), inv.data(), T, half);
  const std::vector<double> x = randn(T * heads * D, 5);
  std::vector<double> y = x;
  rope_forward<double>(y.data(), cos.data(), sin.data(), 1, T, heads, half, heads * D);
  const std::vector<double> expected = rope_reference(x, T, heads, D, theta);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], expected[i], 1e-12) << i;
  for (int i = 0; i < heads * D; ++i) EXPECT_EQ(y[i], x[i]);  // position 0 is not rotated
}

TEST(HfKernels, RopeScoresDependOnlyOnRelativePosition) {
  // q_m . k_n after RoPE is a function of m - n: shifting both positions keeps the score.
  const int T = 10, D = 16, half = 8;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = std::pow(10000.0, -2.0 * i / D);
  std::vector<double> cos(T * half), sin(T * half);
  rope_tables<double>(cos.data(), sin.data(), inv.data(), T, half);
  const std::vector<double> q = randn(D, 7), k = randn(D, 8);
  auto score = [&](int m, int n) {
    std::vector<double> qs(T * D, 0.0), ks(T * D, 0.0);
    std::copy(q.begin(), q.end(), qs.begin() + m * D);
    std::copy(k.begin(), k.end(), ks.begin() + n * D);
    rope_forward<double>(qs.data(), cos.data(), sin.data(), 1, T, 1, half, D);
    rope_forward<double>(ks.data(), cos.data(), sin.data(), 1, T, 1, half, D);
    double s = 0;
    for (int d = 0; d < D; ++d) s += qs[m * D + d] * ks[n * D + d];
    return s;
  };
  EXPECT_NEAR(score(5, 2), score(8, 5), 1e-12);
  EXPECT_NEAR(score(3, 3), score(0, 0), 1e-12);
}

// Naive causal GQA in double on packed (T, heads, D) inputs.
std::vector<double> attention_reference(const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v, int T, int H, int Hkv, int D, double scale) {
  std::vector<double> out(T * H * D, 0.0);
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / Hkv);
    for (int t = 0; t < T; ++t) {
      std::vector<double> s(t + 1);
      double mx = -1e300, sum = 0;
      for (int j = 0; j <= t; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += q[(t * H + h) * D + d] * k[(j * Hkv + g) * D + d];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int j = 0; j <= t; ++j)
        for (int d = 0; d < D; ++d) out[(t * H + h) * D + d] += s[j] / sum * v[(j * Hkv + g) * D + d];
    }
  }
  return out;
}

TEST(HfKernels, GroupedQueryAttentionMatchesReference) {
  for (auto [H, Hkv] : {std::pair{6, 2}, std::pair{4, 4}, std::pair{4, 1}}) {
    const int T = 7, D = 4;
    const double scale = 1 / std::sqrt(D);
    const std::vector<double> q = randn(T * H * D, 11, 2.0), k = randn(T * Hkv * D, 12, 2.0), v = randn(T * Hkv * D, 13);
    const std::vector<double> expected = attention_reference(q, k, v, T, H, Hkv, D, scale);

    // Packed rows, double.
    std::vector<double> out(T * H * D), att(H * T * T), scratch(attention_gqa_scratch_size(1, T, T, H, D));
    attention_gqa_forward<double>(out.data(), H * D, att.data(), scratch.data(), q.data(), H * D, k.data(), Hkv * D,
                                  v.data(), Hkv * D, 1, T, T, H, Hkv, D, true, scale);
    for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-12);

    // Strided rows (as inside a fused [q | k | v] row), float.
    const long stride = (H + 2 * Hkv) * D + 3;
    std::vector<float> fused(T * stride, 99.f), outf(T * (H * D + 5), -7.f), attf(H * T * T),
        scratchf(attention_gqa_scratch_size(1, T, T, H, D));
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < H * D; ++i) fused[t * stride + i] = static_cast<float>(q[t * H * D + i]);
      for (int i = 0; i < Hkv * D; ++i) {
        fused[t * stride + H * D + i] = static_cast<float>(k[t * Hkv * D + i]);
        fused[t * stride + (H + Hkv) * D + i] = static_cast<float>(v[t * Hkv * D + i]);
      }
    }
    attention_gqa_forward<float>(outf.data(), H * D + 5, attf.data(), scratchf.data(), fused.data(), stride,
                                 fused.data() + H * D, stride, fused.data() + (H + Hkv) * D, stride, 1, T, T, H, Hkv,
                                 D, true, static_cast<float>(scale));
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < H * D; ++i) EXPECT_NEAR(outf[t * (H * D + 5) + i], expected[t * H * D + i], 1e-5);
      for (int i = H * D; i < H * D + 5; ++i) EXPECT_EQ(outf[t * (H * D + 5) + i], -7.f);  // padding untouched
    }
  }
}

TEST(HfKernels, FirstPositionAttendsOnlyToItself) {
  const int T = 3, H = 2, Hkv = 1, D = 2;
  const std::vector<double> q = randn(T * H * D, 1), k = randn(T * Hkv * D, 2), v = randn(T * Hkv * D, 3);
  std::vector<double> out(T * H * D), att(H * T * T), scratch(attention_gqa_scratch_size(1, T, T, H, D));
  attention_gqa_forward<double>(out.data(), H * D, att.data(), scratch.data(), q.data(), H * D, k.data(), Hkv * D,
                                v.data(), Hkv * D, 1, T, T, H, Hkv, D, true, 1.0);
  for (int h = 0; h < H; ++h)
    for (int d = 0; d < D; ++d) EXPECT_DOUBLE_EQ(out[h * D + d], v[d]);
}

}  // namespace
