#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/adam.h"
#include "kernels/gemm.h"
#include "kernels/optimizers.h"
#include "model/parameters.h"
#include "util/error.h"

namespace blocklab {

namespace {
constexpr OptimizerKind kOptimizerKinds[] = {OptimizerKind::Adam, OptimizerKind::AdamW, OptimizerKind::RAdam,
                                             OptimizerKind::Sgd,  OptimizerKind::Lion,  OptimizerKind::Muon};
}  // namespace

std::string to_string(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::Adam: return "adam";
    case OptimizerKind::AdamW: return "adamw";
    case OptimizerKind::RAdam: return "radam";
    case OptimizerKind::Sgd: return "sgd";
    case OptimizerKind::Lion: return "lion";
    case OptimizerKind::Muon: break;
  }
  return "muon";
}

std::string optimizer_names() {
  std::string text;
  const size_t n = std::size(kOptimizerKinds);
  for (size_t i = 0; i < n; ++i) text += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + to_string(kOptimizerKinds[i]);
  return text;
}

OptimizerKind parse_optimizer_kind(const std::string& s) {
  for (OptimizerKind k : kOptimizerKinds)
    if (s == to_string(k)) return k;
  throw Error("unknown optimizer '" + s + "' (expected " + optimizer_names() + ")");
}

std::string to_string(AdamV0 v) { return v == AdamV0::Zero ? "zero" : "grad"; }

AdamV0 parse_adam_v0(const std::string& s) {
  if (s == "zero") return AdamV0::Zero;
  if (s == "grad") return AdamV0::Grad;
  throw Error("unknown adam_v0 '" + s + "' (expected zero or grad)");
}

int optimizer_state_arrays(const OptimizerOptions& options) {
  switch (options.kind) {
    case OptimizerKind::Adam:
    case OptimizerKind::AdamW:
    case OptimizerKind::RAdam: return 2;
    case OptimizerKind::Sgd: return options.momentum != 0 ? 1 : 0;
    case OptimizerKind::Lion: return 1;
    case OptimizerKind::Muon: break;
  }
  return 3;
}

std::vector<MatrixRange> hidden_matrices(const ParameterTable& table) {
  std::vector<MatrixRange> out;
  for (const ParamSpec& p : table.specs())
    if (p.role == ParamRole::LinearWeight && p.block >= 0 && p.shape.size() == 2)
      out.push_back({p.offset, static_cast<int>(p.shape[0]), static_cast<int>(p.shape[1])});
  return out;
}

// --- the interface ------------------------------------------------------------------------------------------

template <typename T>
void Optimizer<T>::step(std::span<T> params, std::span<const T> grads, double lr) {
  BLOCKLAB_CHECK(params.size() == size_ && grads.size() == size_, "optimizer arena size mismatch");
  ++t_;
  update(params, const_cast<T*>(grads.data()), lr, 1.0, false);  // not written: zero_grads is false
}

template <typename T>
bool Optimizer<T>::step_and_zero_grads(std::span<T> params, std::span<T> grads, double lr, double grad_scale,
                                       std::span<uint16_t> rounded_params) {
  BLOCKLAB_CHECK(params.size() == size_ && grads.size() == size_, "optimizer arena size mismatch");
  BLOCKLAB_CHECK(rounded_params.empty() || rounded_params.size() == size_,
                 "optimizer: the rounded copy must be as long as the arena");
  ++t_;
  const bool rounding = !rounded_params.empty() && writes_rounded_params();
  if (rounding)
    update_rounded(params, grads.data(), lr, grad_scale, rounded_params.data());
  else
    update(params, grads.data(), lr, grad_scale, true);
  return rounding;
}

template <typename T>
std::span<T> Optimizer<T>::state(std::string_view name) {
  for (const StateArray& a : state())
    if (a.name == name) return a.values;
  return {};
}

// --- adam, adamw ------------------------------------------------------------------------------------------

template <typename T>
Adam<T>::Adam(const OptimizerOptions& options, size_t size)
    : Optimizer<T>(size), options_(options), m_(size, T(0)), v_(size, T(0)) {}

template <typename T>
void Adam<T>::update(std::span<T> params, T* grads, double lr, double grad_scale, bool zero_grads) {
  update_range(params.data(), grads, 0, static_cast<long>(this->size_), lr, grad_scale, zero_grads,
               options_.kind == OptimizerKind::AdamW, this->t_);
}

template <typename T>
void Adam<T>::update_rounded(std::span<T> params, T* grads, double lr, double grad_scale, uint16_t* rounded) {
  update_range(params.data(), grads, 0, static_cast<long>(this->size_), lr, grad_scale, true,
               options_.kind == OptimizerKind::AdamW, this->t_, rounded);
}

template <typename T>
void Adam<T>::update_range(T* params, T* grads, long begin, long end, double lr, double grad_scale, bool zero_grads,
                           bool decoupled, int64_t t, uint16_t* rounded) {
  const long n = end - begin;
  if (n <= 0) return;
  // GI-Adam: v_0 = g_1^2, then the first update as usual
  if (options_.adam_v0 == AdamV0::Grad && t == 1)
    kernels::square_grads(v_.data() + begin, grads + begin, n, static_cast<T>(grad_scale));
  const double b1 = options_.beta1, b2 = options_.beta2;
  // PyTorch's formulation: step_size = lr / bc1, denom = sqrt(v) / sqrt(bc2) + eps
  const kernels::AdamCoefficients<T> c{
      .beta1 = static_cast<T>(b1),
      .beta2 = static_cast<T>(b2),
      .step_size = static_cast<T>(lr / (1.0 - std::pow(b1, static_cast<double>(t)))),
      .inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(1.0 - std::pow(b2, static_cast<double>(t)))),
      .eps = static_cast<T>(options_.eps),
      .decay = decoupled ? static_cast<T>(1.0 - lr * options_.weight_decay) : T(1)};
  kernels::adam_update(params + begin, grads + begin, m_.data() + begin, v_.data() + begin, n, c,
                       static_cast<T>(grad_scale), zero_grads, rounded != nullptr ? rounded + begin : nullptr);
}

namespace {

// --- radam ------------------------------------------------------------------------------------------------

template <typename T>
class RAdam : public Optimizer<T> {
 public:
  RAdam(const OptimizerOptions& options, size_t size)
      : Optimizer<T>(size), options_(options), m_(size, T(0)), v_(size, T(0)) {}
  std::vector<typename Optimizer<T>::StateArray> state() override { return {{"radam.m", m_}, {"radam.v", v_}}; }

 protected:
  void update(std::span<T> params, T* grads, double lr, double grad_scale, bool zero_grads) override {
    const long n = static_cast<long>(this->size_);
    if (options_.adam_v0 == AdamV0::Grad && this->t_ == 1)
      kernels::square_grads(v_.data(), grads, n, static_cast<T>(grad_scale));
    const double b1 = options_.beta1, b2 = options_.beta2, t = static_cast<double>(this->t_);
    const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
    const double rho_inf = 2.0 / (1.0 - b2) - 1.0;
    const double rho_t = rho_inf - 2.0 * t * std::pow(b2, t) / bc2;
    const bool rectified = rho_t > 5.0;
    const double rect =
        rectified ? std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) : 1.0;
    const kernels::RAdamCoefficients<T> c{.beta1 = static_cast<T>(b1),
                                          .beta2 = static_cast<T>(b2),
                                          .weight_decay = static_cast<T>(options_.weight_decay),
                                          .step_size = static_cast<T>(lr * rect / bc1),
                                          .sqrt_bc2 = static_cast<T>(std::sqrt(bc2)),
                                          .eps = static_cast<T>(options_.eps),
                                          .rectified = rectified};
    kernels::radam_update(params.data(), grads, m_.data(), v_.data(), n, c, static_cast<T>(grad_scale), zero_grads);
  }

 private:
  OptimizerOptions options_;
  std::vector<T> m_, v_;
};

// --- sgd --------------------------------------------------------------------------------------------------

template <typename T>
class Sgd : public Optimizer<T> {
 public:
  Sgd(const OptimizerOptions& options, size_t size)
      : Optimizer<T>(size), options_(options), b_(options.momentum != 0 ? size : 0, T(0)) {}
  std::vector<typename Optimizer<T>::StateArray> state() override {
    if (b_.empty()) return {};
    return {{"sgd.momentum", b_}};
  }

 protected:
  void update(std::span<T> params, T* grads, double lr, double grad_scale, bool zero_grads) override {
    const kernels::SgdCoefficients<T> c{.lr = static_cast<T>(lr),
                                        .momentum = static_cast<T>(options_.momentum),
                                        .weight_decay = static_cast<T>(options_.weight_decay),
                                        .nesterov = options_.nesterov};
    kernels::sgd_update(params.data(), grads, b_.empty() ? nullptr : b_.data(), static_cast<long>(this->size_), c,
                        static_cast<T>(grad_scale), zero_grads);
  }

 private:
  OptimizerOptions options_;
  std::vector<T> b_;
};

// --- lion -------------------------------------------------------------------------------------------------

template <typename T>
class Lion : public Optimizer<T> {
 public:
  Lion(const OptimizerOptions& options, size_t size) : Optimizer<T>(size), options_(options), m_(size, T(0)) {}
  std::vector<typename Optimizer<T>::StateArray> state() override { return {{"lion.m", m_}}; }

 protected:
  void update(std::span<T> params, T* grads, double lr, double grad_scale, bool zero_grads) override {
    const kernels::LionCoefficients<T> c{.lr = static_cast<T>(lr),
                                         .beta1 = static_cast<T>(options_.lion_beta1),
                                         .beta2 = static_cast<T>(options_.lion_beta2),
                                         .weight_decay = static_cast<T>(options_.weight_decay)};
    kernels::lion_update(params.data(), grads, m_.data(), static_cast<long>(this->size_), c,
                         static_cast<T>(grad_scale), zero_grads);
  }

 private:
  OptimizerOptions options_;
  std::vector<T> m_;
};

// --- muon -------------------------------------------------------------------------------------------------

template <typename T>
class Muon : public Optimizer<T> {
 public:
  Muon(const OptimizerOptions& options, size_t size, std::vector<MatrixRange> hidden, double lr_peak)
      : Optimizer<T>(size),
        options_(options),
        hidden_(std::move(hidden)),
        lr_peak_(lr_peak),
        adam_(adamw_options(options), size),
        momentum_(size, T(0)) {
    std::sort(hidden_.begin(), hidden_.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
    long next = 0, largest = 0, largest_gram = 0;
    for (const MatrixRange& r : hidden_) {
      const long n = static_cast<long>(r.rows) * r.cols, small = std::min(r.rows, r.cols);
      BLOCKLAB_CHECK(r.offset >= next && r.offset + n <= static_cast<long>(size),
                     "muon: matrices overlap or exceed the arena");
      if (r.offset > next) rest_.push_back({next, r.offset});
      next = r.offset + n;
      largest = std::max(largest, n);
      largest_gram = std::max(largest_gram, small * small);
    }
    if (next < static_cast<long>(size)) rest_.push_back({next, static_cast<long>(size)});
    u_.assign(largest, T(0));
    x_.assign(largest, T(0));
    y_.assign(largest, T(0));
    gram_.assign(largest_gram, T(0));
    gram2_.assign(largest_gram, T(0));
  }

  std::vector<typename Optimizer<T>::StateArray> state() override {
    return {{"muon.momentum", momentum_}, {"adam.m", adam_.first_moment()}, {"adam.v", adam_.second_moment()}};
  }

 protected:
  void update(std::span<T> params, T* grads, double lr, double grad_scale, bool zero_grads) override {
    for (const auto& [begin, end] : rest_)
      adam_.update_range(params.data(), grads, begin, end, lr, grad_scale, zero_grads, true, this->t_);
    const double lr_m = options_.muon_lr * lr / lr_peak_;
    for (const MatrixRange& r : hidden_) {
      const long n = static_cast<long>(r.rows) * r.cols;
      kernels::muon_momentum(u_.data(), grads + r.offset, momentum_.data() + r.offset, n,
                             static_cast<T>(options_.muon_momentum), options_.muon_nesterov,
                             static_cast<T>(grad_scale), zero_grads);
      const bool transposed = r.rows > r.cols;
      const T* x = orthogonalise(transposed ? r.cols : r.rows, transposed ? r.rows : r.cols, transposed);
      const double step = lr_m * std::sqrt(std::max(1.0, static_cast<double>(r.rows) / r.cols));
      kernels::muon_apply(params.data() + r.offset, x, r.rows, r.cols, transposed,
                          static_cast<T>(1.0 - lr_m * options_.muon_weight_decay), static_cast<T>(step));
    }
  }

 private:
  static OptimizerOptions adamw_options(OptimizerOptions o) {
    o.kind = OptimizerKind::AdamW;
    return o;
  }

  // Newton-Schulz on u_ (read as its transpose when `transposed`), as an (a, b) matrix X with a <= b; returns X.
  const T* orthogonalise(int a, int b, bool transposed) {
    const long n = static_cast<long>(a) * b;
    T* x = x_.data();
    if (transposed) {  // u_ is (b, a)
#pragma omp parallel for schedule(static)
      for (int i = 0; i < a; ++i)
        for (int j = 0; j < b; ++j) x[static_cast<long>(i) * b + j] = u_[static_cast<long>(j) * a + i];
    } else {
      std::copy(u_.begin(), u_.begin() + n, x);
    }
    const T norm = static_cast<T>(std::max(global_norm<T>(std::span<const T>(x, n)), kMuonEps));
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) x[i] = x[i] / norm;
    const T ca = static_cast<T>(kMuonA), cb = static_cast<T>(kMuonB), cc = static_cast<T>(kMuonC);
    T *s = gram_.data(), *s2 = gram2_.data(), *y = y_.data();
    for (int k = 0; k < options_.muon_ns_steps; ++k) {
      kernels::gemm<T>(false, true, a, a, b, T(1), x, b, x, b, T(0), s, a);    // S = X X^T
      kernels::gemm<T>(false, false, a, a, a, T(1), s, a, s, a, T(0), s2, a);  // S S
      for (long i = 0; i < static_cast<long>(a) * a; ++i) s[i] = cb * s[i] + cc * s2[i];
      kernels::gemm<T>(false, false, a, b, a, T(1), s, a, x, b, T(0), y, b);   // (b S + c S S) X
#pragma omp parallel for schedule(static)
      for (long i = 0; i < n; ++i) x[i] = ca * x[i] + y[i];
    }
    return x;
  }

  OptimizerOptions options_;
  std::vector<MatrixRange> hidden_;
  std::vector<std::pair<long, long>> rest_;  // [begin, end) ranges of the arena that AdamW updates
  double lr_peak_;
  Adam<T> adam_;
  std::vector<T> momentum_;
  std::vector<T> u_, x_, y_, gram_, gram2_;  // work space, sized for the largest matrix
};

}  // namespace

template <typename T>
std::unique_ptr<Optimizer<T>> make_optimizer(const OptimizerOptions& options, size_t size,
                                             std::vector<MatrixRange> hidden, double lr_peak) {
  switch (options.kind) {
    case OptimizerKind::Adam:
    case OptimizerKind::AdamW: return std::make_unique<Adam<T>>(options, size);
    case OptimizerKind::RAdam: return std::make_unique<RAdam<T>>(options, size);
    case OptimizerKind::Sgd: return std::make_unique<Sgd<T>>(options, size);
    case OptimizerKind::Lion: return std::make_unique<Lion<T>>(options, size);
    case OptimizerKind::Muon: break;
  }
  BLOCKLAB_CHECK(lr_peak > 0, "muon: the peak lr must be positive");
  return std::make_unique<Muon<T>>(options, size, std::move(hidden), lr_peak);
}

// --- norms and clipping -------------------------------------------------------------------------------------

template <typename T>
double global_norm(std::span<const T> values, std::span<double> partial) {
  // Fixed-size chunks summed in order: the same result for any thread count.
  const long n = static_cast<long>(values.size());
  const long chunks = global_norm_chunks(values.size());
  BLOCKLAB_CHECK(static_cast<long>(partial.size()) >= chunks, "global_norm: work space too small");
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; ++c) {
    const long begin = c * kNormChunk, end = std::min(n, begin + kNormChunk);
    partial[c] = kernels::sum_of_squares(values.data() + begin, end - begin);
  }
  double total = 0;
  for (long c = 0; c < chunks; ++c) total += partial[c];
  return std::sqrt(total);
}

template <typename T>
double global_norm(std::span<const T> values) {
  std::vector<double> partial(global_norm_chunks(values.size()));
  return global_norm(values, std::span<double>(partial));
}

double clip_scale(double norm, double max_norm) { return max_norm <= 0 || !(norm > max_norm) ? 1.0 : max_norm / norm; }

template <typename T>
void clip_to_norm(std::span<T> values, double norm, double max_norm) {
  const double scale = clip_scale(norm, max_norm);
  if (scale == 1.0) return;
  const T s = static_cast<T>(scale);
  for (T& x : values) x *= s;
}

template class Optimizer<float>;
template class Optimizer<double>;
template class Adam<float>;
template class Adam<double>;
template std::unique_ptr<Optimizer<float>> make_optimizer<float>(const OptimizerOptions&, size_t,
                                                                 std::vector<MatrixRange>, double);
template std::unique_ptr<Optimizer<double>> make_optimizer<double>(const OptimizerOptions&, size_t,
                                                                   std::vector<MatrixRange>, double);
template double global_norm<float>(std::span<const float>, std::span<double>);
template double global_norm<double>(std::span<const double>, std::span<double>);
template double global_norm<float>(std::span<const float>);
template double global_norm<double>(std::span<const double>);
template void clip_to_norm<float>(std::span<float>, double, double);
template void clip_to_norm<double>(std::span<double>, double, double);

}  // namespace blocklab
