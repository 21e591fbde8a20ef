#include "model/model.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/linear_gelu.h"
#include "kernels/norm.h"
#include "util/error.h"
#include "util/rng.h"

namespace blocklab {

using namespace kernels;

namespace {
// Hands out 64-byte-aligned slices of one arena: first pass counts, second pass binds pointers.
template <typename T>
class ArenaCarver {
 public:
  explicit ArenaCarver(T* base) : base_(base) {}
  T* take(long numel) {
    T* p = base_ == nullptr ? nullptr : base_ + used_;
    used_ += (numel + 15) / 16 * 16;
    return p;
  }
  long used() const { return used_; }

 private:
  T* base_;
  long used_ = 0;
};

template <typename T>
void zero(T* p, long n) {
  std::fill(p, p + n, T(0));
}
}  // namespace

template <typename T>
Model<T>::Model(const ModelConfig& config, int batch, int seq_len)
    : config_(config), table_((config.validate(), config)), B_(batch), T_(seq_len) {
  if (batch <= 0) throw Error("batch must be positive, got " + std::to_string(batch));
  if (seq_len <= 0 || seq_len > config.seq_len)
    throw Error("sequence length " + std::to_string(seq_len) + " outside 1.." + std::to_string(config.seq_len));
  params_.assign(table_.total(), T(0));
  grads_.assign(table_.total(), T(0));
  w_ = bind_tensors(table_, config_, params_.data());
  g_ = bind_tensors(table_, config_, grads_.data());

  const long N = static_cast<long>(B_) * T_, C = config_.width, V = config_.vocab;
  const long hidden = config_.mlp_hidden(), att = static_cast<long>(B_) * config_.heads * T_ * T_;
  // Two passes over the same carving code: size, then bind.
  auto carve = [&](T* base) {
    ArenaCarver<T> a(base);
    layers_.assign(config_.layers, LayerActs{});
    embedded_ = a.take(N * C);
    for (auto& l : layers_) {
      l.ln1 = a.take(N * C), l.ln1_mean = a.take(N), l.ln1_rstd = a.take(N);
      l.qkv = a.take(3 * N * C), l.att = a.take(att), l.atty = a.take(N * C), l.attn_out = a.take(N * C);
      l.resid1 = a.take(N * C);
      l.ln2 = a.take(N * C), l.ln2_mean = a.take(N), l.ln2_rstd = a.take(N);
      l.fc1 = a.take(N * hidden), l.gelu = a.take(N * hidden), l.mlp_out = a.take(N * C);
      l.resid2 = a.take(N * C);
    }
    lnf_ = a.take(N * C), lnf_mean_ = a.take(N), lnf_rstd_ = a.take(N);
    logits_ = a.take(N * V), probs_ = a.take(N * V), losses_ = a.take(N);
    return a.used();
  };
  acts_.assign(carve(nullptr), T(0));
  carve(acts_.data());

  auto carve_scratch = [&](T* base) {
    ArenaCarver<T> a(base);
    d_stream_ = a.take(N * C), d_tmp_a_ = a.take(N * C);
    d_qkv_ = a.take(3 * N * C), d_atty_ = a.take(N * C);
    attn_scratch_ = a.take(static_cast<long>(attention_scratch_size(B_, T_, C, config_.heads)));
    d_hidden_ = a.take(N * hidden), d_logits_ = a.take(N * V);
    return a.used();
  };
  scratch_.assign(carve_scratch(nullptr), T(0));
  carve_scratch(scratch_.data());
}

template <typename T>
std::span<T> Model<T>::param(std::string_view name) {
  const ParamSpec& s = table_.at(name);
  return {params_.data() + s.offset, static_cast<size_t>(s.numel)};
}

template <typename T>
std::span<const T> Model<T>::grad(std::string_view name) const {
  const ParamSpec& s = table_.at(name);
  return {grads_.data() + s.offset, static_cast<size_t>(s.numel)};
}

template <typename T>
void Model<T>::init_weights(uint64_t seed) {
  std::fill(params_.begin(), params_.end(), T(0));
  for (const ParamSpec& s : table_.specs()) {
    Rng rng(seed ^ Rng::hash(s.name));
    T* p = params_.data() + s.offset;
    switch (s.role) {
      case ParamRole::LinearWeight: {
        if (config_.init == InitScheme::Xavier) {
          // Glorot & Bengio: U(-a, a), a = sqrt(6 / (fan_in + fan_out)); weight (fan_out, fan_in)
          const double a = std::sqrt(6.0 / static_cast<double>(s.shape[0] + s.shape[1]));
          for (long i = 0; i < s.numel; ++i) p[i] = static_cast<T>(rng.uniform(-a, a));
        } else {
          for (long i = 0; i < s.numel; ++i) p[i] = static_cast<T>(0.02 * rng.normal());
        }
        break;
      }
      case ParamRole::Embedding:
        for (long i = 0; i < s.numel; ++i) p[i] = static_cast<T>(config_.embed_init_std * rng.normal());
        break;
      case ParamRole::NormWeight:
        std::fill(p, p + s.numel, T(1));
        break;
      case ParamRole::LinearBias:
      case ParamRole::NormBias:
        break;  // zero
    }
  }
}

template <typename T>
const T* Model<T>::stream(int index) const {
  BLOCKLAB_CHECK(index >= 0 && index <= config_.layers, "stream index out of range");
  if (index == 0) return embedded_;
  const LayerActs& a = layers_[index - 1];
  return config_.norm_placement == NormPlacement::Pre ? a.resid2 : a.ln2;
}

template <typename T>
void Model<T>::norm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N) {
  const T eps = static_cast<T>(config_.norm_eps);
  if (config_.norm == NormKind::LayerNorm)
    layernorm_forward(out, mean, rstd, inp, w, b, N, config_.width, eps);
  else
    rmsnorm_forward(out, rstd, inp, w, N, config_.width, eps);
}

template <typename T>
void Model<T>::norm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                             const T* rstd, int N) {
  if (config_.norm == NormKind::LayerNorm)
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, config_.width);
  else
    rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, config_.width);
}

template <typename T>
void Model<T>::embed(const int32_t* inputs) {
  const int N = B_ * T_, C = config_.width, V = config_.vocab;
  for (int n = 0; n < N; ++n)
    if (inputs[n] < 0 || inputs[n] >= V)
      throw Error("token id " + std::to_string(inputs[n]) + " outside the vocabulary 0.." + std::to_string(V - 1));
  token_embedding_forward(embedded_, inputs, w_.tok_emb, N, C);
  position_embedding_forward(embedded_, w_.pos_emb, B_, T_, C);
}

template <typename T>
void Model<T>::run_blocks() {
  const int N = B_ * T_, C = config_.width, H = config_.heads, hidden = config_.mlp_hidden();
  const long NC = static_cast<long>(N) * C;
  const bool pre = config_.norm_placement == NormPlacement::Pre;
  const T* h = embedded_;
  for (int l = 0; l < config_.layers; ++l) {
    LayerActs& a = layers_[l];
    const BlockTensors<T>& w = w_.blocks[l];
    if (pre) {
      // u = h + Attn(LN1(h))
      norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, h, w.norm1_weight, w.norm1_bias, N);
      linear_forward(a.qkv, a.ln1, w.qkv_weight, w.qkv_bias, N, C, 3 * C);
      attention_forward(a.atty, a.att, attn_scratch_, a.qkv, B_, T_, C, H);
      linear_forward(a.attn_out, a.atty, w.proj_weight, w.proj_bias, N, C, C);
      residual_forward(a.resid1, h, a.attn_out, NC);
      // h' = u + MLP(LN2(u))
      norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.resid1, w.norm2_weight, w.norm2_bias, N);
      linear_gelu_forward(a.gelu, a.fc1, a.ln2, w.fc1_weight, w.fc1_bias, N, C, hidden);
      linear_forward(a.mlp_out, a.gelu, w.fc2_weight, w.fc2_bias, N, hidden, C);
      residual_forward(a.resid2, a.resid1, a.mlp_out, NC);
      h = a.resid2;
    } else {
      // u = LN1(h + Attn(h))
      linear_forward(a.qkv, h, w.qkv_weight, w.qkv_bias, N, C, 3 * C);
      attention_forward(a.atty, a.att, attn_scratch_, a.qkv, B_, T_, C, H);
      linear_forward(a.attn_out, a.atty, w.proj_weight, w.proj_bias, N, C, C);
      residual_forward(a.resid1, h, a.attn_out, NC);
      norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.resid1, w.norm1_weight, w.norm1_bias, N);
      // h' = LN2(u + MLP(u))
      linear_gelu_forward(a.gelu, a.fc1, a.ln1, w.fc1_weight, w.fc1_bias, N, C, hidden);
      linear_forward(a.mlp_out, a.gelu, w.fc2_weight, w.fc2_bias, N, hidden, C);
      residual_forward(a.resid2, a.ln1, a.mlp_out, NC);
      norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.resid2, w.norm2_weight, w.norm2_bias, N);
      h = a.ln2;
    }
  }
  const int V = config_.vocab;
  const T* top = h;
  if (config_.has_final_norm()) {
    norm_forward(lnf_, lnf_mean_, lnf_rstd_, h, w_.final_norm_weight, w_.final_norm_bias, N);
    top = lnf_;
  }
  linear_forward(logits_, top, w_.head_weight, static_cast<const T*>(nullptr), N, C, V);
}

template <typename T>
void Model<T>::forward_logits(const int32_t* inputs) {
  embed(inputs);
  run_blocks();
  inputs_ = inputs;
  targets_ = nullptr;
  mask_ = nullptr;
}

template <typename T>
T Model<T>::forward(const int32_t* inputs, const int32_t* targets, const uint8_t* loss_mask) {
  const int N = B_ * T_, V = config_.vocab;
  int selected = 0;
  for (int n = 0; n < N; ++n) {
    if (loss_mask[n] == 0) continue;
    ++selected;
    if (targets[n] < 0 || targets[n] >= V)
      throw Error("target id " + std::to_string(targets[n]) + " outside the vocabulary 0.." + std::to_string(V - 1));
  }
  if (selected == 0) throw Error("loss mask selects no position");
  forward_logits(inputs);
  targets_ = targets;
  mask_ = loss_mask;
  return cross_entropy_forward(probs_, losses_, logits_, targets, loss_mask, N, V);
}

template <typename T>
void Model<T>::backward() {
  BLOCKLAB_CHECK(targets_ != nullptr, "backward() needs a preceding forward() with targets");
  const int N = B_ * T_, C = config_.width, H = config_.heads, V = config_.vocab, hidden = config_.mlp_hidden();
  const long NC = static_cast<long>(N) * C;
  const bool pre = config_.norm_placement == NormPlacement::Pre;
  std::fill(grads_.begin(), grads_.end(), T(0));

  // loss = mean CE(head(top)) over the mask
  zero(d_logits_, static_cast<long>(N) * V);
  cross_entropy_backward(d_logits_, probs_, targets_, mask_, N, V);
  zero(d_stream_, NC);
  if (config_.has_final_norm()) {
    // top = LNf(h_L)
    linear_backward(d_tmp_a_, g_.head_weight, static_cast<T*>(nullptr), d_logits_, lnf_, w_.head_weight, N, C, V,
                    GradWrite::Overwrite);
    norm_backward(d_stream_, g_.final_norm_weight, g_.final_norm_bias, d_tmp_a_, stream(config_.layers),
                  w_.final_norm_weight, lnf_mean_, lnf_rstd_, N);
  } else {
    linear_backward(d_stream_, g_.head_weight, static_cast<T*>(nullptr), d_logits_, stream(config_.layers),
                    w_.head_weight, N, C, V);
  }

  // d_stream_ holds d loss / d (output of block l); each iteration turns it into d loss / d (its input).
  for (int l = config_.layers - 1; l >= 0; --l) {
    const LayerActs& a = layers_[l];
    const BlockTensors<T>& w = w_.blocks[l];
    const BlockTensors<T>& g = g_.blocks[l];
    const T* h_in = stream(l);
    if (pre) {
      // h' = u + mlp_out:  d_u = d_h' (kept in d_stream_), d_mlp_out = d_h'
      // mlp_out = fc2(gelu(fc1(ln2))): d_fc1 (pre-activation) from fc2 and GELU in one pass, then fc1
      gelu_linear_backward(d_hidden_, g.fc2_weight, g.fc2_bias, d_stream_, a.fc1, a.gelu, w.fc2_weight, N, hidden, C);
      linear_backward(d_tmp_a_, g.fc1_weight, g.fc1_bias, d_hidden_, a.ln2, w.fc1_weight, N, C, hidden,
                      GradWrite::Overwrite);
      // ln2 = LN2(u): d_u += LN2 backward
      norm_backward(d_stream_, g.norm2_weight, g.norm2_bias, d_tmp_a_, a.resid1, w.norm2_weight, a.ln2_mean,
                    a.ln2_rstd, N);
      // u = h + attn_out:  d_h = d_u (kept in d_stream_), d_attn_out = d_u
      linear_backward(d_atty_, g.proj_weight, g.proj_bias, d_stream_, a.atty, w.proj_weight, N, C, C,
                      GradWrite::Overwrite);
      attention_backward(d_qkv_, attn_scratch_, d_atty_, a.qkv, a.att, B_, T_, C, H);
      linear_backward(d_tmp_a_, g.qkv_weight, g.qkv_bias, d_qkv_, a.ln1, w.qkv_weight, N, C, 3 * C,
                      GradWrite::Overwrite);
      // ln1 = LN1(h): d_h += LN1 backward
      norm_backward(d_stream_, g.norm1_weight, g.norm1_bias, d_tmp_a_, h_in, w.norm1_weight, a.ln1_mean,
                    a.ln1_rstd, N);
    } else {
      // h' = LN2(resid2)
      zero(d_tmp_a_, NC);
      norm_backward(d_tmp_a_, g.norm2_weight, g.norm2_bias, d_stream_, a.resid2, w.norm2_weight, a.ln2_mean,
                    a.ln2_rstd, N);
      // resid2 = u + mlp_out:  d_u = d_resid2 (kept in d_tmp_a_), d_mlp_out = d_resid2
      // mlp_out = fc2(gelu(fc1(u))): d_fc1 (pre-activation) from fc2 and GELU in one pass, then fc1
      gelu_linear_backward(d_hidden_, g.fc2_weight, g.fc2_bias, d_tmp_a_, a.fc1, a.gelu, w.fc2_weight, N, hidden, C);
      linear_backward(d_tmp_a_, g.fc1_weight, g.fc1_bias, d_hidden_, a.ln1, w.fc1_weight, N, C, hidden);
      // u = LN1(resid1)
      zero(d_stream_, NC);
      norm_backward(d_stream_, g.norm1_weight, g.norm1_bias, d_tmp_a_, a.resid1, w.norm1_weight, a.ln1_mean,
                    a.ln1_rstd, N);
      // resid1 = h + attn_out:  d_h = d_resid1 (kept in d_stream_), d_attn_out = d_resid1
      linear_backward(d_atty_, g.proj_weight, g.proj_bias, d_stream_, a.atty, w.proj_weight, N, C, C,
                      GradWrite::Overwrite);
      attention_backward(d_qkv_, attn_scratch_, d_atty_, a.qkv, a.att, B_, T_, C, H);
      // qkv = Linear(h): d_h += its backward
      linear_backward(d_stream_, g.qkv_weight, g.qkv_bias, d_qkv_, h_in, w.qkv_weight, N, C, 3 * C);
    }
  }
  // x = tok_emb[inputs] + pos_emb[t]
  token_embedding_backward(g_.tok_emb, d_stream_, inputs_, N, C);
  position_embedding_backward(g_.pos_emb, d_stream_, B_, T_, C);
}

template class Model<float>;
template class Model<double>;

}  // namespace blocklab
