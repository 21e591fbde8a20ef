#include "probe/curvature.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "util/error.h"
#include "util/rng.h"

namespace blocklab::probe {

namespace {

double dot(const double* a, const double* b, long n) {
  double s = 0;
  for (long i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

double norm(const double* a, long n) { return std::sqrt(dot(a, a, n)); }

ModelConfig double_config(ModelConfig config) {
  config.precision = Precision::Fp32;  // the double model has one precision; a bf16 run's weights are fp32
  return config;
}

}  // namespace

ParamSubset all_parameters(const ParameterTable& table) {
  ParamSubset s;
  for (const ParamSpec& spec : table.specs()) {
    s.ranges.emplace_back(spec.offset, spec.numel);
    s.size += spec.numel;
  }
  return s;
}

ParamSubset block_parameters(const ParameterTable& table, int block) {
  ParamSubset s;
  for (const ParamSpec& spec : table.specs())
    if (spec.block == block) {
      s.ranges.emplace_back(spec.offset, spec.numel);
      s.size += spec.numel;
    }
  if (s.size == 0) throw Error("block " + std::to_string(block) + " has no parameters");
  return s;
}

CurvatureLoss::CurvatureLoss(const ModelConfig& config, std::span<const float> weights, const Batch& batch)
    : model_(double_config(config)), acts_(model_.make_activations(std::max(batch.batch, 1), std::max(batch.seq_len, 1))) {
  init(weights, batch);
}

CurvatureLoss::CurvatureLoss(const ModelConfig& config, std::span<const double> weights, const Batch& batch)
    : model_(double_config(config)), acts_(model_.make_activations(std::max(batch.batch, 1), std::max(batch.seq_len, 1))) {
  init(weights, batch);
}

template <typename W>
void CurvatureLoss::init(std::span<const W> weights, const Batch& batch) {
  if (weights.size() != model_.params().size())
    throw Error("weights have " + std::to_string(weights.size()) + " values, the model " +
                std::to_string(model_.params().size()));
  std::copy(weights.begin(), weights.end(), model_.params().begin());
  init(batch);
}

void CurvatureLoss::init(const Batch& batch) {
  const size_t cells = static_cast<size_t>(batch.batch) * batch.seq_len;
  if (batch.batch < 1 || batch.seq_len < 1 || batch.inputs.size() != cells || batch.targets.size() != cells ||
      batch.loss_mask.size() != cells)
    throw Error("the curvature batch is empty or its arrays do not have batch x sequence entries");
  if (batch.seq_len > model_.config().seq_len)
    throw Error("the batch's sequences have " + std::to_string(batch.seq_len) + " tokens, the model at most " +
                std::to_string(model_.config().seq_len));
  const int V = model_.config().vocab;
  for (size_t i = 0; i < cells; ++i)
    if (batch.inputs[i] < 0 || batch.inputs[i] >= V || batch.targets[i] < 0 || batch.targets[i] >= V)
      throw Error("token id " + std::to_string(std::min(batch.inputs[i], batch.targets[i]) < 0
                                                    ? std::min(batch.inputs[i], batch.targets[i])
                                                    : std::max(batch.inputs[i], batch.targets[i])) +
                  " of the curvature batch is outside the vocabulary [0, " + std::to_string(V) + ")");
  if (std::none_of(batch.loss_mask.begin(), batch.loss_mask.end(), [](uint8_t m) { return m != 0; }))
    throw Error("the curvature batch selects no position for the loss");
  batch_ = batch;
  base_.assign(model_.params().begin(), model_.params().end());
  loss_ = evaluate(grad_);
  gradients_ = 0;
}

double CurvatureLoss::evaluate(std::vector<double>& grad) {
  const double loss = model_.forward(acts_, batch_.inputs.data(), batch_.targets.data(), batch_.loss_mask.data());
  model_.backward(acts_);
  grad.assign(model_.grads().begin(), model_.grads().end());
  ++gradients_;
  return loss;
}

void CurvatureLoss::set_method(int order, double step) {
  if (order != 2 && order != 4) throw Error("finite-difference order must be 2 or 4, got " + std::to_string(order));
  if (!(step > 0) || !std::isfinite(step)) throw Error("finite-difference step must be > 0");
  order_ = order;
  step_ = step;
}

std::string CurvatureLoss::method() const {
  char text[160];
  std::snprintf(text, sizeof text, "central differences of double-precision gradients, order %d, h = %g", order_, step_);
  return text;
}

void CurvatureLoss::hvp(const ParamSubset& subset, const double* v, double* out) {
  const long n = subset.size;
  const double length = norm(v, n);
  std::fill(out, out + n, 0.0);
  if (length == 0) return;
  std::span<double> params = model_.params();
  // g(theta + offset u) restricted to the subset, accumulated into out with weight w
  auto add_gradient_at = [&](double offset, double w) {
    long k = 0;
    for (const auto& [begin, count] : subset.ranges)
      for (long i = 0; i < count; ++i, ++k) params[begin + i] = base_[begin + i] + offset * (v[k] / length);
    evaluate(work_);
    k = 0;
    for (const auto& [begin, count] : subset.ranges)
      for (long i = 0; i < count; ++i, ++k) out[k] += w * work_[begin + i];
  };
  const double h = step_;
  if (order_ == 2) {
    add_gradient_at(h, 1.0);
    add_gradient_at(-h, -1.0);
    for (long k = 0; k < n; ++k) out[k] *= length / (2 * h);
  } else {
    add_gradient_at(2 * h, -1.0);
    add_gradient_at(h, 8.0);
    add_gradient_at(-h, -8.0);
    add_gradient_at(-2 * h, 1.0);
    for (long k = 0; k < n; ++k) out[k] *= length / (12 * h);
  }
  for (const auto& [begin, count] : subset.ranges)
    std::copy(base_.begin() + begin, base_.begin() + begin + count, params.begin() + begin);
}

LinearOperator CurvatureLoss::hessian(const ParamSubset& subset) {
  return [this, subset](const double* v, double* out) { hvp(subset, v, out); };
}

SymmetricEigen symmetric_eigen(std::vector<double> a, int n) {
  if (n < 0 || a.size() != static_cast<size_t>(n) * n) throw Error("symmetric_eigen: the matrix is not n x n");
  for (int i = 0; i < n; ++i)  // the symmetric part
    for (int j = i + 1; j < n; ++j) a[i * n + j] = a[j * n + i] = 0.5 * (a[i * n + j] + a[j * n + i]);
  std::vector<double> V(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) V[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, total = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        total += a[i * n + j] * a[i * n + j];
        if (i != j) off += a[i * n + j] * a[i * n + j];
      }
    if (off <= 1e-30 * total || off == 0) break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (apq == 0) continue;
        const double app = a[p * n + p], aqq = a[q * n + q];
        if (std::abs(apq) < 1e-300 || std::abs(apq) <= 1e-18 * (std::abs(app) + std::abs(aqq))) {
          a[p * n + q] = a[q * n + p] = 0;
          continue;
        }
        const double theta = (aqq - app) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        a[p * n + q] = a[q * n + p] = 0;
        for (int k = 0; k < n; ++k) {
          const double vkp = V[k * n + p], vkq = V[k * n + q];
          V[k * n + p] = c * vkp - s * vkq;
          V[k * n + q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return a[x * n + x] < a[y * n + y]; });
  SymmetricEigen e;
  e.values.resize(n);
  e.vectors.resize(static_cast<size_t>(n) * n);
  for (int j = 0; j < n; ++j) {
    e.values[j] = a[order[j] * n + order[j]];
    for (int k = 0; k < n; ++k) e.vectors[k * n + j] = V[k * n + order[j]];
  }
  return e;
}

LanczosResult lanczos_top(const LinearOperator& op, long n, const LanczosOptions& options) {
  if (n < 1) throw Error("Lanczos needs at least one dimension");
  if (options.top < 1) throw Error("the number of eigenvalues must be >= 1, got " + std::to_string(options.top));
  if (options.max_iter < 1) throw Error("Lanczos needs at least one iteration");
  const int limit = static_cast<int>(std::min<long>(options.max_iter, n));
  std::vector<std::vector<double>> basis;
  std::vector<double> alpha, beta;
  std::vector<double> q(n), w(n);
  Rng rng(options.seed);
  for (double& x : q) x = rng.normal();
  const double q_norm = norm(q.data(), n);
  for (double& x : q) x /= q_norm;
  LanczosResult result;
  for (int j = 0; j < limit; ++j) {
    basis.push_back(q);
    op(q.data(), w.data());
    const double a = dot(q.data(), w.data(), n);
    alpha.push_back(a);
    for (long i = 0; i < n; ++i) w[i] -= a * q[i] + (j > 0 ? beta[j - 1] * basis[j - 1][i] : 0.0);
    for (int pass = 0; pass < 2; ++pass)  // full reorthogonalisation, twice (Gram-Schmidt twice is enough)
      for (const auto& b : basis) {
        const double c = dot(b.data(), w.data(), n);
        for (long i = 0; i < n; ++i) w[i] -= c * b[i];
      }
    const double b = norm(w.data(), n);
    beta.push_back(b);
    // Ritz values of the tridiagonal T_j and the residual bounds beta_j |last component of s_i|
    const int m = j + 1;
    std::vector<double> T(static_cast<size_t>(m) * m, 0.0);
    for (int i = 0; i < m; ++i) {
      T[i * m + i] = alpha[i];
      if (i + 1 < m) T[i * m + i + 1] = T[(i + 1) * m + i] = beta[i];
    }
    const SymmetricEigen e = symmetric_eigen(std::move(T), m);
    const int k = std::min(options.top, m);
    double scale = 0;
    for (double v : e.values) scale = std::max(scale, std::abs(v));
    result.values.assign(k, 0.0);
    result.residuals.assign(k, 0.0);
    bool all = m >= options.top;
    for (int i = 0; i < k; ++i) {
      const int idx = m - 1 - i;
      result.values[i] = e.values[idx];
      result.residuals[i] = b * std::abs(e.vectors[(m - 1) * m + idx]);
      if (result.residuals[i] > options.tol * scale) all = false;
    }
    result.iterations = m;
    if (options.progress) options.progress(m, result.values[0]);
    const bool exhausted = m == n || b <= 1e-14 * std::max(scale, 1e-300);
    if (all || exhausted) {
      result.converged = all || exhausted;
      break;
    }
    for (long i = 0; i < n; ++i) q[i] = w[i] / b;
  }
  return result;
}

TraceEstimate hutchinson_trace(const LinearOperator& op, long n, int samples, uint64_t seed) {
  if (samples < 1) throw Error("Hutchinson's estimate needs at least one sample");
  Rng rng(seed);
  std::vector<double> z(n), hz(n), values;
  for (int s = 0; s < samples; ++s) {
    for (double& x : z) x = (rng.next_u64() >> 63) ? 1.0 : -1.0;
    op(z.data(), hz.data());
    values.push_back(dot(z.data(), hz.data(), n));
  }
  TraceEstimate t;
  t.samples = samples;
  for (double v : values) t.value += v;
  t.value /= samples;
  if (samples > 1) {
    double ss = 0;
    for (double v : values) ss += (v - t.value) * (v - t.value);
    t.std_error = std::sqrt(ss / (samples - 1) / samples);
  }
  return t;
}

std::vector<double> adam_preconditioner(const AdamMoments& adam, const ParamSubset& subset) {
  if (adam.t < 1) throw Error("Adam's preconditioner is defined after the first update (t = 0 here)");
  const double c1 = 1 - std::pow(adam.beta1, static_cast<double>(adam.t));
  const double c2 = 1 - std::pow(adam.beta2, static_cast<double>(adam.t));
  std::vector<double> p;
  p.reserve(subset.size);
  for (const auto& [begin, count] : subset.ranges) {
    if (static_cast<size_t>(begin + count) > adam.v.size()) throw Error("Adam's second moment does not fit the model");
    for (long i = 0; i < count; ++i)
      p.push_back(c1 * (std::sqrt(static_cast<double>(adam.v[begin + i]) / c2) + adam.eps));
  }
  return p;
}

long curvature_gradient_budget(const ModelConfig& config, const CurvatureOptions& options, bool preconditioned) {
  const long per_product = options.order == 4 ? 4 : 2;
  long products = options.max_iter + (preconditioned ? options.max_iter : 0) + options.trace_samples;
  if (options.per_block) products += static_cast<long>(config.layers) * options.block_max_iter;
  return per_product * products;
}

CurvatureResult measure_curvature(CurvatureLoss& loss, const AdamMoments* adam, const CurvatureOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  loss.set_method(options.order, options.step > 0 ? options.step : options.order == 4 ? 1e-3 : 1e-4);
  const bool preconditioned = adam != nullptr && adam->t >= 1;
  const long budget = curvature_gradient_budget(loss.config(), options, preconditioned);
  const long first = loss.gradients();
  auto report = [&](const std::string& stage) {
    if (options.progress) options.progress(stage, loss.gradients() - first, budget);
  };
  CurvatureResult r;
  r.loss = loss.loss();
  r.method = loss.method();
  const ParamSubset all = all_parameters(loss.table());

  LanczosOptions lo;
  lo.top = options.top;
  lo.max_iter = options.max_iter;
  lo.tol = options.tol;
  lo.seed = options.seed;
  lo.progress = [&](int, double) { report("sharpness"); };
  const LanczosResult top = lanczos_top(loss.hessian(all), all.size, lo);
  r.top = top.values;
  r.residuals = top.residuals;
  r.iterations = top.iterations;
  r.converged = top.converged;

  if (preconditioned) {
    const std::vector<double> p = adam_preconditioner(*adam, all);
    std::vector<double> d(p.size()), scaled(p.size());
    for (size_t i = 0; i < p.size(); ++i) d[i] = 1 / std::sqrt(p[i]);
    const LinearOperator H = loss.hessian(all);
    const LinearOperator DHD = [&](const double* v, double* out) {
      for (size_t i = 0; i < d.size(); ++i) scaled[i] = d[i] * v[i];
      H(scaled.data(), out);
      for (size_t i = 0; i < d.size(); ++i) out[i] *= d[i];
    };
    LanczosOptions po = lo;
    po.top = 1;
    po.seed = options.seed + 1;
    po.progress = [&](int, double) { report("preconditioned sharpness"); };
    const LanczosResult pre = lanczos_top(DHD, all.size, po);
    r.preconditioned = pre.values[0];
    r.preconditioned_iterations = pre.iterations;
    r.preconditioned_converged = pre.converged;
  }

  if (options.trace_samples > 0) {
    const LinearOperator H = loss.hessian(all);
    const LinearOperator counted = [&](const double* v, double* out) {
      H(v, out);
      report("trace");
    };
    r.trace = hutchinson_trace(counted, all.size, options.trace_samples, options.seed + 2);
  }

  if (options.per_block) {
    for (int l = 0; l < loss.config().layers; ++l) {
      const ParamSubset block = block_parameters(loss.table(), l);
      LanczosOptions bo;
      bo.top = 1;
      bo.max_iter = options.block_max_iter;
      bo.tol = options.block_tol;
      bo.seed = options.seed + 3 + static_cast<uint64_t>(l);
      bo.progress = [&](int, double) { report("block " + std::to_string(l + 1)); };
      r.per_block.push_back(lanczos_top(loss.hessian(block), block.size, bo).values[0]);
    }
  }
  r.gradients = loss.gradients() - first;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace blocklab::probe
