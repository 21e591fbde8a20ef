// Curvature probes (probe/curvature.h) against the full Hessian of a tiny model, built column by column in
// double precision and decomposed by Jacobi rotations: Hessian-vector products (order 2 against order 4,
// symmetry), Lanczos's top eigenvalues, Hutchinson's trace and its standard error, the Hessian restricted to
// one block, Adam's preconditioned sharpness; bit-identical estimates for 1 and 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "data/copy_task.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "probe/curvature.h"
#include "util/error.h"
#include "util/rng.h"
#include "util/threads.h"

using namespace blocklab;
using namespace blocklab::probe;

namespace {

ModelConfig tiny(NormPlacement placement) {
  ModelConfig c;
  c.norm_placement = placement;
  c.layers = 2;
  c.width = 4;
  c.heads = 2;
  c.mlp_ratio = 2;
  c.vocab = 5;
  c.seq_len = 5;
  return c;
}

Batch copy_batch(const ModelConfig& c, int batch, uint64_t seed) {
  CopyTask task(c.vocab, (c.seq_len + 1) / 2, seed);
  Batch b;
  task.next(b, batch);
  return b;
}

std::vector<double> init_weights(const ModelConfig& c, uint64_t seed) {
  Model<double> model(c);
  model.init_weights(seed);
  return {model.params().begin(), model.params().end()};
}

// The Hessian on a subset, column by column: H e_i for every i (row-major n x n, column i = H e_i).
std::vector<double> full_hessian(CurvatureLoss& loss, const ParamSubset& s) {
  const long n = s.size;
  std::vector<double> H(n * n), e(n, 0.0), col(n);
  for (long i = 0; i < n; ++i) {
    e[i] = 1;
    loss.hvp(s, e.data(), col.data());
    e[i] = 0;
    for (long r = 0; r < n; ++r) H[r * n + i] = col[r];
  }
  return H;
}

double frobenius(const std::vector<double>& a) {
  double s = 0;
  for (double x : a) s += x * x;
  return std::sqrt(s);
}

std::vector<double> symmetrized(std::vector<double> H, long n) {
  for (long i = 0; i < n; ++i)
    for (long j = i + 1; j < n; ++j) H[i * n + j] = H[j * n + i] = 0.5 * (H[i * n + j] + H[j * n + i]);
  return H;
}

std::vector<double> dense_apply(const std::vector<double>& H, long n, const double* v) {
  std::vector<double> out(n, 0.0);
  for (long r = 0; r < n; ++r)
    for (long c = 0; c < n; ++c) out[r] += H[r * n + c] * v[c];
  return out;
}

}  // namespace

TEST(Curvature, JacobiFindsAKnownSpectrum) {
  // A = Q diag(lambda) Q^T with Q a Householder reflection: the eigenvalues are lambda, exactly.
  const int n = 40;
  Rng rng(7);
  std::vector<double> lambda(n), u(n);
  for (int i = 0; i < n; ++i) lambda[i] = (i % 3 == 0 ? -1 : 1) * std::pow(1.3, i % 17) + 0.01 * i;
  double uu = 0;
  for (double& x : u) {
    x = rng.normal();
    uu += x * x;
  }
  std::vector<double> A(n * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) {
        const double qik = (i == k) - 2 * u[i] * u[k] / uu, qjk = (j == k) - 2 * u[j] * u[k] / uu;
        A[i * n + j] += qik * lambda[k] * qjk;
      }
  const SymmetricEigen e = symmetric_eigen(A, n);
  std::sort(lambda.begin(), lambda.end());
  for (int i = 0; i < n; ++i) EXPECT_NEAR(e.values[i], lambda[i], 1e-11 * std::abs(lambda[i])) << i;
  // A v_j = lambda_j v_j
  for (int j = 0; j < n; j += 7) {
    std::vector<double> v(n);
    for (int k = 0; k < n; ++k) v[k] = e.vectors[k * n + j];
    const std::vector<double> Av = dense_apply(A, n, v.data());
    for (int k = 0; k < n; ++k) EXPECT_NEAR(Av[k], e.values[j] * v[k], 1e-11 * 30);
  }
}

class TinyHessian : public ::testing::TestWithParam<NormPlacement> {};

TEST_P(TinyHessian, EstimatorsAgreeWithTheFullEigenDecomposition) {
  set_num_threads(1);
  const ModelConfig config = tiny(GetParam());
  const std::vector<double> w = init_weights(config, 3);
  CurvatureLoss loss(config, std::span<const double>(w), copy_batch(config, 4, 11));
  const ParamSubset all = all_parameters(loss.table());
  const long n = all.size;
  ASSERT_GE(n, 200);
  ASSERT_LE(n, 800);

  // Hessian-vector products: order 2 (h = 1e-4) against order 4 (h = 1e-3), whose truncation error is
  // O(h^4) ~ 1e-12: the difference is order 2's error. And the Hessian's symmetry, which products by
  // differences of gradients do not impose.
  loss.set_method(2, 1e-4);
  const std::vector<double> H2 = full_hessian(loss, all);
  loss.set_method(4, 1e-3);
  const std::vector<double> H4 = full_hessian(loss, all);
  std::vector<double> diff(n * n), asym(n * n);
  for (long i = 0; i < n; ++i)
    for (long j = 0; j < n; ++j) {
      diff[i * n + j] = H2[i * n + j] - H4[i * n + j];
      asym[i * n + j] = H4[i * n + j] - H4[j * n + i];
    }
  const double error2 = frobenius(diff) / frobenius(H4), asymmetry = frobenius(asym) / frobenius(H4);
  std::printf("n = %ld: |H(order 2) - H(order 4)| / |H| = %.2e, |H - H^T| / |H| (order 4) = %.2e\n", n, error2,
              asymmetry);
  EXPECT_LT(error2, 1e-6);
  EXPECT_LT(asymmetry, 1e-9);

  const std::vector<double> H = symmetrized(H4, n);
  const SymmetricEigen exact = symmetric_eigen(H, static_cast<int>(n));
  const double lmax = exact.values.back();
  ASSERT_GT(lmax, 0);

  // Lanczos on the products (order 4) against the eigen-decomposition: the top 3, relative 1e-6.
  LanczosOptions lo;
  lo.top = 3;
  lo.max_iter = static_cast<int>(n);
  lo.tol = 1e-9;
  const LanczosResult top = lanczos_top(loss.hessian(all), n, lo);
  ASSERT_EQ(top.values.size(), 3u);
  EXPECT_TRUE(top.converged);
  std::printf("Lanczos: %d products;", top.iterations);
  for (int i = 0; i < 3; ++i) {
    const double want = exact.values[n - 1 - i];
    std::printf(" %.10g (exact %.10g)", top.values[i], want);
    EXPECT_NEAR(top.values[i], want, 1e-6 * std::abs(want)) << "eigenvalue " << i;
  }
  std::printf("\n");
  // ... and with order 2's products, the default
  loss.set_method(2, 1e-4);
  lo.top = 1;
  lo.tol = 1e-7;
  const LanczosResult top2 = lanczos_top(loss.hessian(all), n, lo);
  EXPECT_NEAR(top2.values[0], lmax, 1e-6 * lmax);
  EXPECT_LT(top2.iterations, n);  // converged before the Krylov space was the whole space

  // Hutchinson: many samples; the estimate is within 4 standard errors of the trace, and the standard
  // error is what theory says for Rademacher probes: Var(z^T H z) = 2 sum_{i != j} H_ij^2.
  double trace = 0, off2 = 0;
  for (long i = 0; i < n; ++i) {
    trace += H[i * n + i];
    for (long j = 0; j < n; ++j)
      if (i != j) off2 += H[i * n + j] * H[i * n + j];
  }
  const int samples = 3000;
  const LinearOperator dense = [&](const double* v, double* out) {
    const std::vector<double> r = dense_apply(H, n, v);
    std::copy(r.begin(), r.end(), out);
  };
  const TraceEstimate est = hutchinson_trace(dense, n, samples, 5);
  const double expected_se = std::sqrt(2 * off2 / samples);
  std::printf("Hutchinson (%d samples): %.6g +- %.3g, exact trace %.6g (expected standard error %.3g)\n", samples,
              est.value, est.std_error, trace, expected_se);
  EXPECT_LT(std::abs(est.value - trace), 4 * est.std_error);
  EXPECT_NEAR(est.std_error, expected_se, 0.15 * expected_se);
  // the same through the finite-difference products (fewer samples: each is two gradients)
  const TraceEstimate fd = hutchinson_trace(loss.hessian(all), n, 400, 5);
  EXPECT_LT(std::abs(fd.value - trace), 4 * fd.std_error + 1e-6 * std::abs(trace));

  // One block: the products restricted to its parameters are the block H_ll of the Hessian.
  for (int l = 0; l < config.layers; ++l) {
    const ParamSubset block = block_parameters(loss.table(), l);
    std::vector<long> index;
    long k = 0;
    for (const auto& [begin, count] : all.ranges) {
      for (const auto& [b2, c2] : block.ranges)
        if (b2 == begin)
          for (long i = 0; i < count; ++i) index.push_back(k + i);
      k += count;
    }
    ASSERT_EQ(static_cast<long>(index.size()), block.size);
    const long m = block.size;
    std::vector<double> Hll(m * m);
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < m; ++j) Hll[i * m + j] = H[index[i] * n + index[j]];
    const double want = symmetric_eigen(Hll, static_cast<int>(m)).values.back();
    LanczosOptions bo;
    bo.max_iter = static_cast<int>(m);
    bo.tol = 1e-9;
    const LanczosResult got = lanczos_top(loss.hessian(block), m, bo);
    EXPECT_NEAR(got.values[0], want, 1e-6 * std::abs(want)) << "block " << l;
    EXPECT_LT(want, lmax * (1 + 1e-9));  // Cauchy interlacing: a principal submatrix's top <= the whole's
  }

  // Preconditioned sharpness: lambda_1(P^-1 H) with P from a second moment after t = 7 updates.
  std::vector<float> v(loss.weights().size(), 0.0f);
  Rng rng(9);
  for (float& x : v) x = static_cast<float>(std::pow(10.0, rng.uniform(-8, -3)));
  AdamMoments adam{v, 7, 0.9, 0.999, 1e-8};
  const std::vector<double> p = adam_preconditioner(adam, all);
  std::vector<double> PH(n * n);
  for (long i = 0; i < n; ++i)
    for (long j = 0; j < n; ++j) PH[i * n + j] = H[i * n + j] / std::sqrt(p[i] * p[j]);
  const double pre_exact = symmetric_eigen(PH, static_cast<int>(n)).values.back();
  CurvatureOptions co;
  co.order = 4;
  co.max_iter = static_cast<int>(n);
  co.tol = 1e-9;
  co.trace_samples = 0;
  co.per_block = false;
  const CurvatureResult r = measure_curvature(loss, &adam, co);
  ASSERT_TRUE(r.preconditioned.has_value());
  std::printf("preconditioned sharpness %.10g (exact %.10g), sharpness %.10g\n", *r.preconditioned, pre_exact, r.top[0]);
  EXPECT_NEAR(*r.preconditioned, pre_exact, 1e-6 * std::abs(pre_exact));
  EXPECT_NEAR(r.top[0], lmax, 1e-6 * lmax);
  // P's definition, one entry: (1 - b1^t) (sqrt(v / (1 - b2^t)) + eps)
  const double v0 = v[all.ranges[0].first];
  EXPECT_DOUBLE_EQ(p[0], (1 - std::pow(0.9, 7)) * (std::sqrt(v0 / (1 - std::pow(0.999, 7))) + 1e-8));
  set_num_threads(0);
}

INSTANTIATE_TEST_SUITE_P(Placements, TinyHessian, ::testing::Values(NormPlacement::Post, NormPlacement::Pre),
                         [](const auto& info) { return to_string(info.param); });

TEST(Curvature, ThreadCountDoesNotChangeTheEstimates) {
  ModelConfig c;
  c.norm_placement = NormPlacement::Post;
  c.layers = 3;
  c.width = 32;
  c.heads = 4;
  c.vocab = 16;
  c.seq_len = 15;
  Model<float> model(c);
  model.init_weights(4);
  const Batch batch = copy_batch(c, 8, 2);
  std::vector<float> v(model.params().size());
  Rng rng(1);
  for (float& x : v) x = static_cast<float>(1e-6 * rng.uniform(0.5, 2));
  const AdamMoments adam{v, 3};
  CurvatureOptions o;
  o.max_iter = 12;
  o.trace_samples = 3;
  o.block_max_iter = 6;
  auto run = [&](int threads) {
    set_num_threads(threads);
    CurvatureLoss loss(c, model.params(), batch);
    return measure_curvature(loss, &adam, o);
  };
  const CurvatureResult one = run(1), two = run(2);
  set_num_threads(0);
  EXPECT_EQ(one.top, two.top);
  EXPECT_EQ(one.preconditioned, two.preconditioned);
  ASSERT_TRUE(one.trace && two.trace);
  EXPECT_EQ(one.trace->value, two.trace->value);
  EXPECT_EQ(one.per_block, two.per_block);
  EXPECT_EQ(one.per_block.size(), 3u);
  EXPECT_EQ(one.gradients, two.gradients);
  EXPECT_LE(one.gradients, curvature_gradient_budget(c, o, true));
  EXPECT_GT(one.top[0], 0);
}

TEST(Curvature, BadInputIsRefused) {
  const ModelConfig c = tiny(NormPlacement::Pre);
  const std::vector<double> w = init_weights(c, 1);
  Batch b = copy_batch(c, 2, 1);
  EXPECT_THROW(CurvatureLoss(c, std::span<const double>(w.data(), w.size() - 1), b), Error);
  Batch bad = b;
  bad.inputs[0] = c.vocab;
  EXPECT_THROW(CurvatureLoss(c, std::span<const double>(w), bad), Error);
  bad = b;
  std::fill(bad.loss_mask.begin(), bad.loss_mask.end(), 0);
  EXPECT_THROW(CurvatureLoss(c, std::span<const double>(w), bad), Error);
  CurvatureLoss loss(c, std::span<const double>(w), b);
  EXPECT_THROW(loss.set_method(3, 1e-4), Error);
  EXPECT_THROW(loss.set_method(2, 0), Error);
  std::vector<float> v(w.size(), 1e-6f);
  EXPECT_THROW(adam_preconditioner(AdamMoments{v, 0}, all_parameters(loss.table())), Error);
}

// Against PyTorch: Hessian-vector products by autograd (double backward, exact) on the parity fixtures'
// weights and batch (tools/ref/make_hvp_fixtures.py), for two directions over every parameter and one over
// block 0 only; blocklab's central differences agree to 1e-6 relative (max-norm).
class HvpParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HvpParity, CentralDifferencesMatchAutograd) {
  const std::string path = std::string(BLOCKLAB_TEST_DATA) + "/ref_hvp_" + GetParam() + ".safetensors";
  // The fixtures are part of the tree: a missing one is a failure, not a reason to skip.
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing (tools/ref/make_hvp_fixtures.py writes it)";
  set_num_threads(1);
  const io::SafetensorsReader file(path);
  const auto& m = file.metadata();
  ModelConfig c;
  c.norm_placement = parse_norm_placement(m.at("norm_placement"));
  c.norm = parse_norm_kind(m.at("norm"));
  c.layers = std::stoi(m.at("layers"));
  c.width = std::stoi(m.at("width"));
  c.heads = std::stoi(m.at("heads"));
  c.vocab = std::stoi(m.at("vocab"));
  c.mlp_ratio = std::stoi(m.at("mlp_ratio"));
  c.norm_eps = std::stod(m.at("norm_eps"));
  const int n = std::stoi(m.at("copy_len")), B = std::stoi(m.at("batch"));
  c.seq_len = 2 * n - 1;
  const int T = c.seq_len;
  const std::vector<int64_t> tokens = file.read_i64("tokens");
  Batch batch;
  batch.resize(B, T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      batch.inputs[b * T + t] = static_cast<int32_t>(tokens[b * (T + 1) + t]);
      batch.targets[b * T + t] = static_cast<int32_t>(tokens[b * (T + 1) + t + 1]);
      batch.loss_mask[b * T + t] = t >= n - 1 ? 1 : 0;
    }
  Model<double> model(c);
  for (const ParamSpec& s : model.table().specs()) file.read(file.at("param." + s.name), model.param(s.name));
  CurvatureLoss loss(c, std::span<const double>(model.params()), batch);
  EXPECT_NEAR(loss.loss(), file.read_f64("loss")[0], 1e-12);
  for (int order : {2, 4}) {
    loss.set_method(order, order == 2 ? 1e-4 : 1e-3);
    for (int k = 0; k < 3; ++k) {
      const ParamSubset subset = k == 2 ? block_parameters(loss.table(), 0) : all_parameters(loss.table());
      std::vector<double> v, want;
      for (const ParamSpec& s : loss.table().specs()) {
        if (k == 2 && s.block != 0) continue;
        const std::vector<double> vs = file.read_f64("v." + std::to_string(k) + "." + s.name);
        const std::vector<double> hs = file.read_f64("hv." + std::to_string(k) + "." + s.name);
        v.insert(v.end(), vs.begin(), vs.end());
        want.insert(want.end(), hs.begin(), hs.end());
      }
      ASSERT_EQ(static_cast<long>(v.size()), subset.size);
      std::vector<double> got(v.size());
      loss.hvp(subset, v.data(), got.data());
      double diff = 0, scale = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        diff = std::max(diff, std::abs(got[i] - want[i]));
        scale = std::max(scale, std::abs(want[i]));
      }
      std::printf("%s, order %d, direction %d%s: max |Hv - autograd| / max |Hv| = %.2e\n", GetParam().c_str(), order,
                  k, k == 2 ? " (block 0)" : "", diff / scale);
      EXPECT_LE(diff / scale, 1e-6) << "order " << order << " direction " << k;
    }
  }
  set_num_threads(0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HvpParity, ::testing::Values("post_layernorm", "pre_layernorm"));
