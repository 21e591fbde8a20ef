// The sigmoid gate, the value mix and the scaled residual (kernels/gating.h): each backward against fourth-order
// central differences in double precision, at random input scales, with rows read at a stride as the attention
// sub-layer reads them.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradcheck.h"
#include "kernels/gating.h"

namespace {

using namespace blocklab;
using namespace blocklab::kernels;
using blocklab::testing::expect_gradient_matches;
using blocklab::testing::random_vector;

class Gating : public ::testing::TestWithParam<double> {};  // the inputs' scale

TEST_P(Gating, SigmoidGateBackwardMatchesFiniteDifferences) {
  Rng rng(7);
  const long n = 37;
  std::vector<double> z = random_vector(rng, n, GetParam()), y = random_vector(rng, n, 1.0),
                      w = random_vector(rng, n, 1.0);  // loss = sum w * out
  auto loss = [&] {
    std::vector<double> gate = z, out(n);
    sigmoid_gate_forward(out.data(), gate.data(), y.data(), n);
    double l = 0;
    for (long i = 0; i < n; ++i) l += w[i] * out[i];
    return l;
  };
  std::vector<double> gate = z, out(n), dz(n), dy = w;
  sigmoid_gate_forward(out.data(), gate.data(), y.data(), n);
  for (long i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(gate[i], 1 / (1 + std::exp(-z[i])));
  sigmoid_gate_backward(dz.data(), dy.data(), y.data(), gate.data(), n);
  expect_gradient_matches("d z", z, dz, loss, 1e-4);
  expect_gradient_matches("d y", y, dy, loss, 1e-4);
}

TEST_P(Gating, ValueMixBackwardMatchesFiniteDifferences) {
  Rng rng(11);
  const long N = 5;
  const int K = 6;
  const long stride = 15;  // the v part of fused rows: K of every 15 values
  std::vector<double> v = random_vector(rng, N * stride, GetParam()), first = random_vector(rng, N * K, 1.0),
                      lambda = random_vector(rng, 2, 1.0), w = random_vector(rng, N * K, 1.0);
  auto mixed = [&](std::vector<double>& rows, std::vector<double>& own) {
    rows = v;
    own.assign(N * K, 0);
    value_mix_forward(rows.data(), stride, own.data(), first.data(), lambda.data(), N, K);
  };
  auto loss = [&] {
    std::vector<double> rows, own;
    mixed(rows, own);
    double l = 0;
    for (long n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) l += w[n * K + k] * rows[n * stride + k];
    return l;
  };
  std::vector<double> rows, own;
  mixed(rows, own);
  for (long n = 0; n < N; ++n)
    for (int k = K; k < stride; ++k) EXPECT_EQ(rows[n * stride + k], v[n * stride + k]);  // the rest of a row untouched
  std::vector<double> dv(N * stride, 0.0), d_lambda(2, 0.0), d_first(N * K, 0.0);
  for (long n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) dv[n * stride + k] = w[n * K + k];
  value_mix_backward(dv.data(), stride, d_lambda.data(), d_first.data(), own.data(), first.data(), lambda.data(), N, K);
  std::vector<double> v_part(N * K), dv_part(N * K);
  for (long n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) v_part[n * K + k] = v[n * stride + k], dv_part[n * K + k] = dv[n * stride + k];
  auto loss_of_v_part = [&] {
    for (long n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) v[n * stride + k] = v_part[n * K + k];
    return loss();
  };
  expect_gradient_matches("d V_1", first, d_first, loss, 1e-4);
  expect_gradient_matches("d lambda", lambda, d_lambda, loss, 1e-4);
  expect_gradient_matches("d V_own", v_part, dv_part, loss_of_v_part, 1e-4);  // last: it leaves v as it writes it
}

// resid = s * skip + g * branch, for each way a design sets s and g: Admin's learned omega (with and without a
// ReZero-style gate), DeepNorm's constant, ReZero's gate alone.
TEST_P(Gating, ScaledResidualBackwardMatchesFiniteDifferences) {
  struct Case {
    const char* name;
    bool omega, gate;
    double s_const;
  };
  for (const Case& k : {Case{"omega", true, false, 1.0}, Case{"omega and gate", true, true, 1.0},
                        Case{"constant", false, false, 1.7}, Case{"gate", false, true, 1.0}}) {
    SCOPED_TRACE(k.name);
    Rng rng(17);
    const long N = 4;
    const int C = 6;
    std::vector<double> skip = random_vector(rng, N * C, GetParam()), branch = random_vector(rng, N * C, GetParam()),
                        omega = random_vector(rng, C, 1.0), gate = random_vector(rng, 1, 1.0),
                        w = random_vector(rng, N * C, 1.0);
    auto resid_of = [&] {
      std::vector<double> resid(N * C);
      scaled_residual_forward(resid.data(), skip.data(), branch.data(), k.omega ? omega.data() : nullptr, k.s_const,
                              k.gate ? gate[0] : 1.0, N, C);
      return resid;
    };
    auto loss = [&] {
      const std::vector<double> resid = resid_of();
      double l = 0;
      for (long i = 0; i < N * C; ++i) l += w[i] * resid[i];
      return l;
    };
    const std::vector<double> resid = resid_of();
    const double s2 = k.omega ? omega[2] : k.s_const, g = k.gate ? gate[0] : 1.0;
    EXPECT_DOUBLE_EQ(resid[C + 2], s2 * skip[C + 2] + g * branch[C + 2]);
    std::vector<double> d = w, d_branch(N * C), d_gate(1, 0.0), g_omega(C, 0.0);
    scaled_residual_backward(d.data(), d_branch.data(), k.gate ? d_gate.data() : nullptr,
                             k.omega ? g_omega.data() : nullptr, skip.data(), branch.data(),
                             k.omega ? omega.data() : nullptr, k.s_const, k.gate ? gate[0] : 1.0, N, C);
    expect_gradient_matches("d skip", skip, d, loss, 1e-4);
    expect_gradient_matches("d branch", branch, d_branch, loss, 1e-4);
    if (k.omega) expect_gradient_matches("d omega", omega, g_omega, loss, 1e-4);
    if (k.gate) expect_gradient_matches("d gate", gate, d_gate, loss, 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Scales, Gating, ::testing::Values(0.1, 1.0, 4.0),
                         [](const auto& info) { return "scale_" + std::to_string(static_cast<int>(info.index)); });

}  // namespace
