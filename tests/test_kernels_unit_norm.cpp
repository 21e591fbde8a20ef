// The unit-sphere kernels (kernels/unit_norm.h): each backward against fourth-order central differences in double
// precision at three input scales, the heads read at a stride as the attention reads q and k inside fused rows;
// and the forward's defining properties (unit norms, the step's end points).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "kernels/unit_norm.h"

namespace {

using namespace blocklab;
using namespace blocklab::kernels;
using blocklab::testing::dot;
using blocklab::testing::expect_gradient_matches;
using blocklab::testing::random_vector;

class UnitNorm : public ::testing::TestWithParam<double> {};  // the inputs' scale

TEST_P(UnitNorm, UnitRowsHaveUnitNormAndTheirBackwardMatchesFiniteDifferences) {
  Rng rng(3);
  const long rows = 4;
  const int width = 9;
  std::vector<double> x = random_vector(rng, rows * width, GetParam()), w = random_vector(rng, rows * width, 1.0);
  auto forward = [&](std::vector<double>& out, std::vector<double>& rn) {
    out.assign(rows * width, 0), rn.assign(rows, 0);
    unit_rows_forward(out.data(), rn.data(), x.data(), rows, width);
  };
  std::vector<double> out, rn;
  forward(out, rn);
  for (long r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < width; ++i) ss += out[r * width + i] * out[r * width + i];
    EXPECT_NEAR(ss, 1.0, 1e-12) << "row " << r;
  }
  std::vector<double> d = w;
  unit_rows_backward(d.data(), out.data(), rn.data(), rows, width);
  expect_gradient_matches("d x", x, d, [&] { std::vector<double> o, n; forward(o, n); return dot(w, o.data()); }, 1e-4);
}

TEST_P(UnitNorm, ScaledUnitHeadsBackwardMatchesFiniteDifferences) {
  Rng rng(5);
  const long N = 3;
  const int H = 2, D = 4;
  const long stride = 3 * H * D;  // q inside fused [q | k | v] rows
  std::vector<double> x = random_vector(rng, N * stride, GetParam()), s = random_vector(rng, H * D, 1.0),
                      w = random_vector(rng, N * H * D, 1.0);
  const double factor = 1.7;
  auto loss = [&] {
    std::vector<double> out(N * H * D), rn(N * H);
    scaled_unit_heads_forward(out.data(), rn.data(), x.data(), stride, s.data(), factor, N, H, D);
    return dot(w, out.data());
  };
  std::vector<double> out(N * H * D), rn(N * H);
  scaled_unit_heads_forward(out.data(), rn.data(), x.data(), stride, s.data(), factor, N, H, D);
  for (long n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) {  // out_h / (s f) is a unit vector
      double ss = 0;
      for (int i = 0; i < D; ++i) {
        const double u = out[(n * H + h) * D + i] / (s[h * D + i] * factor);
        ss += u * u;
      }
      EXPECT_NEAR(ss, 1.0, 1e-12);
    }
  std::vector<double> d(N * stride, 0.0), g_s(H * D, 0.0);
  for (long n = 0; n < N; ++n)
    for (int j = 0; j < H * D; ++j) d[n * stride + j] = w[n * H * D + j];
  scaled_unit_heads_backward(d.data(), stride, g_s.data(), x.data(), stride, rn.data(), s.data(), factor, N, H, D);
  for (long n = 0; n < N; ++n)
    for (long j = H * D; j < stride; ++j) EXPECT_EQ(d[n * stride + j], 0.0);  // the rest of a row untouched
  expect_gradient_matches("d s", s, g_s, loss, 1e-4);
  expect_gradient_matches("d x", x, d, loss, 1e-4);
}

TEST_P(UnitNorm, SphereStepBackwardMatchesFiniteDifferences) {
  Rng rng(9);
  const long N = 3;
  const int C = 5;
  std::vector<double> A = random_vector(rng, N * C, GetParam()), B = random_vector(rng, N * C, GetParam()),
                      alpha = random_vector(rng, C, 1.0), w = random_vector(rng, N * C, 1.0);
  const double factor = 0.3;
  auto loss = [&] {
    std::vector<double> resid(N * C);
    sphere_step_forward(resid.data(), A.data(), B.data(), alpha.data(), factor, N, C);
    return dot(w, resid.data());
  };
  std::vector<double> dA(N * C), dB(N * C), g_alpha(C, 0.0);
  sphere_step_backward(dA.data(), dB.data(), g_alpha.data(), w.data(), A.data(), B.data(), alpha.data(), factor, N, C);
  expect_gradient_matches("d A", A, dA, loss, 1e-4);
  expect_gradient_matches("d B", B, dB, loss, 1e-4);
  expect_gradient_matches("d alpha", alpha, g_alpha, loss, 1e-4);
}

TEST(UnitNormStep, StepMovesFromAToBByTheAbsoluteRate) {
  const std::vector<double> A{1, 0}, B{0, 1};
  for (double alpha : {0.0, 0.25, -0.25, 1.0}) {
    std::vector<double> resid(2);
    sphere_step_forward(resid.data(), A.data(), B.data(), std::vector<double>{alpha, alpha}.data(), 1.0, 1, 2);
    EXPECT_DOUBLE_EQ(resid[0], 1 - std::abs(alpha));
    EXPECT_DOUBLE_EQ(resid[1], std::abs(alpha));
  }
}

TEST_P(UnitNorm, ChannelScaleBackwardMatchesFiniteDifferences) {
  Rng rng(13);
  const long N = 4;
  const int cols = 7;
  std::vector<double> raw = random_vector(rng, N * cols, GetParam()), s = random_vector(rng, cols, 1.0),
                      w = random_vector(rng, N * cols, 1.0);
  const double factor = 2.5;
  auto loss = [&] {
    std::vector<double> out(N * cols);
    channel_scale_forward(out.data(), raw.data(), s.data(), factor, N, cols);
    return dot(w, out.data());
  };
  std::vector<double> d = w, g_s(cols, 0.0);
  channel_scale_backward(d.data(), g_s.data(), raw.data(), s.data(), factor, N, cols);
  expect_gradient_matches("d s", s, g_s, loss, 1e-4);
  expect_gradient_matches("d raw", raw, d, loss, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Scales, UnitNorm, ::testing::Values(0.1, 1.0, 10.0));

}  // namespace
