#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/adam.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "kernels/unit_norm.h"
#include "model/sphere.h"
#include "util/error.h"
#include "util/rng.h"

namespace blocklab {

using namespace kernels;

template <typename T>
Activations<T>::Activations(const ModelConfig& config, int batch, int seq_len, int head_rows)
    : layers_(config.layers), vocab_(config.vocab), head_rows_(head_rows) {
  config.validate();
  if (batch <= 0) throw Error("batch must be positive, got " + std::to_string(batch));
  if (seq_len <= 0 || seq_len > config.seq_len)
    throw Error("sequence length " + std::to_string(seq_len) + " outside 1.." + std::to_string(config.seq_len));
  dims_ = BlockDims::of(config, batch, seq_len);
  // Two passes over the same carving code: size, then bind.
  arena_.assign(carve(nullptr, config), T(0));
  carve(arena_.data(), config);
  loss_rows_.assign(dims_.N(), 0);
  loss_targets_.assign(dims_.N(), 0);
}

template <typename T>
long Activations<T>::carve(T* base, const ModelConfig& config) {
  const long N = dims_.N(), C = config.width, V = config.vocab;
  Carver<T> m(base);
  // Sizing (base null) carves every block into one throw-away BlockActs: no memory per block.
  BlockActs<T> sizing;
  if (base != nullptr) blocks_.assign(config.layers, BlockActs<T>{});
  embedded_ = m.take(N * C);
  if (config.cross_attention) context_ = m.take(dims_.Nc() * C);
  if (config.value_residual) first_v_ = m.take(N * dims_.K);
  const bool hyper = config.hyper();
  HyperActs<T> hyper_sizing;
  if (hyper) {
    streams0_ = m.take(config.residual_streams * N * C);
    if (base != nullptr) hyper_.assign(2 * config.layers, HyperActs<T>{});
  }
  for (int l = 0; l < config.layers; ++l) {
    BlockActs<T>& block = base != nullptr ? blocks_[l] : sizing;
    m.advance(carve_block_acts(block, m.next(), config, dims_, l));
    if (!hyper) continue;
    for (int k = 2 * l; k < 2 * l + 2; ++k) {
      HyperActs<T>& h = base != nullptr ? hyper_[k] : hyper_sizing;
      m.advance(carve_hyper_acts(h, m.next(), config, N, k % 2 == 1));
      if (k % 2 == 1) block.output = h.sum;
    }
  }
  if (config.has_final_norm()) m.advance(carve_norm_acts(final_norm_, m.next(), config, N));
  // the head and the loss in chunks of head_rows_ counted positions (Model::head_chunk_rows)
  if (head_rows_ <= 0 || head_rows_ > N) head_rows_ = Model<T>::head_chunk_rows(N, static_cast<int>(V));
  const long R = head_rows_;
  losses_ = m.take(N), chunk_losses_ = m.take(R);
  // the loss's gradient replaces the chunk's logits (the loss reads each row's logits before writing its gradient)
  head_in_ = m.take(R * C), logits_ = m.take(R * V), d_logits_ = logits_;
  if (config.stream() == ResidualStream::Sphere) logits_raw_ = m.take(R * V);
  const long acts = m.used();
  // The backward's buffers come last.
  d_stream_ = m.take(N * C);
  head_d_in_ = m.take(R * C);
  // [sphere stream] the backward turns the logits' gradient into the raw logits' in a copy of its own, so that
  // a second backward of the same forward starts from the same gradient
  if (config.stream() == ResidualStream::Sphere) d_logits_raw_ = m.take(R * V);
  m.advance(carve_block_scratch(scratch_, m.next(), config, dims_));
  if (hyper) {
    d_streams_ = m.take(config.residual_streams * N * C);
    m.advance(carve_hyper_scratch(hyper_scratch_, m.next(), config, N));
  }
  d_other_ = scratch_.d_other;
  scratch_elements_ = m.used() - acts;
  return m.used();
}

template <typename T>
typename Activations<T>::Sizes Activations<T>::sizes(const ModelConfig& config, int batch, int seq_len) {
  config.validate();
  if (batch <= 0) throw Error("batch must be positive, got " + std::to_string(batch));
  if (seq_len <= 0 || seq_len > config.seq_len)
    throw Error("sequence length " + std::to_string(seq_len) + " outside 1.." + std::to_string(config.seq_len));
  Activations<T> counter;
  counter.dims_ = BlockDims::of(config, batch, seq_len);
  const long total = counter.carve(nullptr, config);
  return {static_cast<size_t>(total - counter.scratch_elements_) * sizeof(T),
          static_cast<size_t>(counter.scratch_elements_) * sizeof(T)};
}

template <typename T>
const T* Activations<T>::stream(int index) const {
  BLOCKLAB_CHECK(index >= 0 && index <= layers_, "stream index out of range");
  return index == 0 ? embedded_ : blocks_[index - 1].output;
}

template <typename T>
Model<T>::Model(const ModelConfig& config)
    : config_(config), table_((config.validate(), config)), squares_(table_) {
  params_.assign(table_.total(), T(0));
  grads_.assign(table_.total(), T(0));
  w_ = bind_tensors(table_, config_, params_.data());
  g_ = bind_tensors(table_, config_, grads_.data());
  if (config_.positions == Positions::RoPE) {
    const int half = config_.head_size() / 2;
    std::vector<double> inv_freq(half);
    for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(config_.rope_theta, -2.0 * i / config_.head_size());
    rope_cos_.resize(static_cast<size_t>(config_.seq_len) * half);
    rope_sin_.resize(rope_cos_.size());
    rope_tables(rope_cos_.data(), rope_sin_.data(), inv_freq.data(), config_.seq_len, half);
  }
}

template <typename T>
std::span<T> Model<T>::param(std::string_view name) {
  rounded_valid_ = false;
  const ParamSpec& s = table_.at(name);
  return {params_.data() + s.offset, static_cast<size_t>(s.numel)};
}

template <typename T>
std::span<const T> Model<T>::grad(std::string_view name) const {
  const ParamSpec& s = table_.at(name);
  return {grads_.data() + s.offset, static_cast<size_t>(s.numel)};
}

template <typename T>
void Model<T>::init_linear(T* p, const ParamSpec& s, Rng& rng) const {
  const InitScheme scheme = config_.effective_init();
  const long rows = s.shape[0], cols = s.shape[1];
  if (scheme == InitScheme::Xavier) {
    // Glorot & Bengio: U(-a, a), a = sqrt(6 / (fan_in + fan_out)); weight (fan_out, fan_in)
    const double a = std::sqrt(6.0 / static_cast<double>(rows + cols));
    for (long i = 0; i < s.numel; ++i) p[i] = static_cast<T>(rng.uniform(-a, a));
    return;
  }
  if (scheme == InitScheme::GPT2) {
    for (long i = 0; i < s.numel; ++i) p[i] = static_cast<T>(0.02 * rng.normal());
    return;
  }
  // DeepNorm and T-Fixup, as their reference code does it on separate q, k, v projections: a fused qkv
  // weight is initialised part by part (rows [0,Q) q, [Q,Q+K) k, [Q+K,Q+2K) v), each with its own fan-out.
  // W_v, W_o, fc1, fc2 are scaled: DeepNorm by gain b in Xavier-normal, T-Fixup by (9N)^(-1/4) after
  // Xavier-uniform.
  const bool deepnorm = scheme == InitScheme::DeepNorm;
  const double scale = deepnorm ? config_.deepnorm_beta() : config_.tfixup_scale();
  auto fill = [&](long row0, long count, bool scaled) {
    const double gain = scaled ? scale : 1.0;
    const double fans = static_cast<double>(count + cols);
    T* q = p + row0 * cols;
    if (deepnorm) {
      const double std = gain * std::sqrt(2.0 / fans);
      for (long i = 0; i < count * cols; ++i) q[i] = static_cast<T>(std * rng.normal());
    } else {
      const double a = std::sqrt(6.0 / fans);
      for (long i = 0; i < count * cols; ++i) q[i] = static_cast<T>(gain * rng.uniform(-a, a));
    }
  };
  switch (s.part) {
    case LinearPart::QKV: {
      const long Q = config_.q_dim(), K = config_.kv_dim();
      fill(0, Q, false);
      fill(Q, K, false);
      fill(Q + K, K, true);
      break;
    }
    case LinearPart::Value:
    case LinearPart::Output:
    case LinearPart::Fc1:
    case LinearPart::Fc2:
      fill(0, rows, true);
      break;
    default:  // q, k, the head
      fill(0, rows, false);
      break;
  }
}

template <typename T>
void Model<T>::init_weights(uint64_t seed) {
  const InitScheme scheme = config_.effective_init();
  rounded_valid_ = false;
  std::fill(params_.begin(), params_.end(), T(0));
  const bool sphere = config_.stream() == ResidualStream::Sphere;  // its own init (model/sphere.h)
  for (const ParamSpec& s : table_.specs()) {
    Rng rng(seed ^ Rng::hash(s.name));
    T* p = params_.data() + s.offset;
    if (sphere && sphere_init(p, s, config_, rng)) continue;
    switch (s.role) {
      case ParamRole::LinearWeight:
        init_linear(p, s, rng);
        break;
      case ParamRole::Embedding: {
        // T-Fixup: N(0, C^-1) times (9N)^(-1/4); otherwise N(0, embed_init_std^2)
        const double std = scheme == InitScheme::TFixup
                               ? config_.tfixup_scale() / std::sqrt(static_cast<double>(config_.width))
                               : config_.embed_init_std;
        for (long i = 0; i < s.numel; ++i) p[i] = static_cast<T>(std * rng.normal());
        break;
      }
      case ParamRole::NormWeight:
        std::fill(p, p + s.numel, T(1));
        break;
      case ParamRole::NormAlpha:  // DyT's alpha_0 (Zhu et al. 2025); Derf starts at the same 0.5
        std::fill(p, p + s.numel, T(0.5));
        break;
      case ParamRole::NormShift:  // Derf's shift: zero
        break;
      case ParamRole::ResidualScale:  // Admin's omega
        std::fill(p, p + s.numel, static_cast<T>(config_.admin_omega_init()));
        break;
      case ParamRole::Gate:  // ReZero: every block starts as the identity
        break;
      case ParamRole::ValueMix:  // value residual: lambda1 = lambda2 = 0.5
        std::fill(p, p + s.numel, T(0.5));
        break;
      case ParamRole::HyperInput: {  // A_m = e_(k mod n), k = 2 * block + (0 attention, 1 MLP)
        const long k = 2L * s.block + (s.sublayer == Sublayer::Mlp ? 1 : 0);
        p[k % s.numel] = T(1);
        break;
      }
      case ParamRole::HyperResidual:  // A_r = I
        for (long i = 0; i < s.shape[0]; ++i) p[i * s.shape[0] + i] = T(1);
        break;
      case ParamRole::HyperOutput:  // B = 1
        std::fill(p, p + s.numel, T(1));
        break;
      case ParamRole::HyperScale:  // s_a, s_b = 0.01
        std::fill(p, p + s.numel, T(0.01));
        break;
      case ParamRole::HyperDynamic:  // W_m, W_r, W_b = 0
        break;
      case ParamRole::SphereScale:  // set by sphere_init
        break;
      case ParamRole::LinearBias:
      case ParamRole::NormBias:
        break;  // zero
    }
  }
  normalize_weights();
}

template <typename T>
void Model<T>::normalize_weights() {
  if (config_.stream() != ResidualStream::Sphere) return;
  rounded_valid_ = false;
  normalize_onto_sphere(params_.data(), table_);
}

template <typename T>
std::span<uint16_t> Model<T>::rounded_params_to_write() {
  rounded_valid_ = false;
  // kept from the first bf16 step on, also across steps in fp32 (`blocklab bench --precision bf16` interleaves them)
  const bool bf16 = gemm_precision(config_) == kernels::GemmPrecision::Bf16 || !rounded_.empty();
  if (!std::is_same_v<T, float> || !bf16 || !kernels::bf16_gemm_takes_rounded_operands()) return {};
  rounded_.resize(params_.size());
  return rounded_;
}

template <typename T>
void Model<T>::check_shape(const Activations<T>& acts) const {
  const BlockDims want = BlockDims::of(config_, acts.dims_.B, acts.dims_.T);
  const BlockDims& d = acts.dims_;
  BLOCKLAB_CHECK(acts.layers_ == config_.layers && acts.vocab_ == config_.vocab && d.C == want.C && d.H == want.H &&
                     d.Hkv == want.Hkv && d.D == want.D && d.I_in == want.I_in && d.Tc == want.Tc,
                 "activations were made for another model");
}

template <typename T>
BlockInputs<T> Model<T>::block_inputs(Activations<T>& acts) const {
  BlockInputs<T> in;
  in.config = &config_;
  in.dims = acts.dims_;
  if (config_.positions == Positions::RoPE) in.rope_cos = rope_cos_.data(), in.rope_sin = rope_sin_.data();
  in.context = acts.context_;
  in.attention_scratch = acts.scratch_.attention;
  in.first_v = acts.first_v_;
  if (rounded_valid_ && gemm_precision(config_) == kernels::GemmPrecision::Bf16)
    in.rounded_params = rounded_.data(), in.params_base = params_.data();
  return in;
}

template <typename T>
void Model<T>::embed(Activations<T>& acts, const int32_t* inputs) const {
  const BlockDims& d = acts.dims_;
  const int N = static_cast<int>(d.N()), C = config_.width, V = config_.vocab;
  for (int n = 0; n < N; ++n)
    if (inputs[n] < 0 || inputs[n] >= V)
      throw Error("token id " + std::to_string(inputs[n]) + " outside the vocabulary 0.." + std::to_string(V - 1));
  token_embedding_forward(acts.embedded_, inputs, w_.tok_emb, N, C);
  if (w_.pos_emb != nullptr) position_embedding_forward(acts.embedded_, static_cast<const T*>(w_.pos_emb), d.B, d.T, C);
  if (acts.context_ != nullptr) {
    // context (B, Tc, C) = x[:, 0:Tc]
    for (int b = 0; b < d.B; ++b)
      std::copy_n(acts.embedded_ + static_cast<long>(b) * d.T * C, static_cast<long>(d.Tc) * C,
                  acts.context_ + static_cast<long>(b) * d.Tc * C);
  }
}

template <typename T>
void Model<T>::run_blocks(Activations<T>& acts) const {
  const BlockInputs<T> in = block_inputs(acts);
  const int N = static_cast<int>(acts.dims_.N());
  const T* h = acts.embedded_;
  if (config_.hyper()) {
    h = run_hyper_blocks(acts, in);
  } else {
    for (int l = 0; l < config_.layers; ++l) {
      block_forward(acts.blocks_[l], h, w_.blocks[l], in, l);
      h = acts.blocks_[l].output;
    }
  }
  if (config_.has_final_norm()) norm_forward(acts.final_norm_, h, w_.final_norm, config_, N);
}

template <typename T>
const T* Model<T>::head_input_rows(const Activations<T>& acts) const {
  return config_.has_final_norm() ? acts.final_norm_.out : acts.stream(config_.layers);
}

template <typename T>
int Model<T>::head_chunk_rows(long N, int V) {
  return static_cast<int>(std::min(N, std::max(1L, kHeadChunkElements / V)));
}

template <typename T>
int Model<T>::head_chunk_count(const Activations<T>& acts) {
  return (acts.loss_count_ + acts.head_rows_ - 1) / acts.head_rows_;
}

template <typename T>
typename Model<T>::HeadChunk Model<T>::head_chunk(const Activations<T>& acts, int k) {
  // chunks of equal length (the last one shorter by less than one row per chunk)
  const int chunks = head_chunk_count(acts), per = (acts.loss_count_ + chunks - 1) / chunks;
  const int first = k * per;
  return {first, std::min(per, acts.loss_count_ - first)};
}

template <typename T>
const T* Model<T>::head_chunk_input(Activations<T>& acts, HeadChunk c) const {
  const int C = config_.width;
  const T* top = head_input_rows(acts);
  const int32_t* rows = acts.loss_rows_.data() + c.first;
  if (rows[c.rows - 1] - rows[0] == c.rows - 1) return top + static_cast<long>(rows[0]) * C;  // consecutive
  for (int i = 0; i < c.rows; ++i)
    std::copy_n(top + static_cast<long>(rows[i]) * C, C, acts.head_in_ + static_cast<long>(i) * C);
  return acts.head_in_;
}

template <typename T>
void Model<T>::head_loss(Activations<T>& acts, const T* x, HeadChunk c) const {
  const int C = config_.width, V = config_.vocab;
  if (config_.stream() == ResidualStream::Sphere) {
    // The sphere stream: logits = s_z * (h head^T), s_z = stored * sqrt(C) per vocabulary entry
    linear_forward(acts.logits_raw_, x, static_cast<const T*>(w_.head_weight), static_cast<const T*>(nullptr), c.rows,
                   C, V, gemm_precision(config_), acts.weights_version_, rounded(w_.head_weight));
    const T factor = static_cast<T>(SphereFactors::of(config_).s_z);
    kernels::channel_scale_forward(acts.logits_, static_cast<const T*>(acts.logits_raw_),
                                   static_cast<const T*>(w_.head_scale), factor, c.rows, V);
  } else {
    linear_forward(acts.logits_, x, static_cast<const T*>(w_.head_weight), static_cast<const T*>(nullptr), c.rows, C,
                   V, gemm_precision(config_), acts.weights_version_, rounded(w_.head_weight));
  }
  // the chunk's losses, then to the rows of their positions
  T* losses = acts.chunk_losses_;
  cross_entropy_rows(acts.d_logits_, losses, static_cast<const T*>(acts.logits_), acts.loss_targets_.data() + c.first,
                     c.rows, V, acts.loss_count_);
  for (int i = 0; i < c.rows; ++i) acts.losses_[acts.loss_rows_[c.first + i]] = losses[i];
}

template <typename T>
void Model<T>::head_backward(Activations<T>& acts, const T* x, HeadChunk c, T* d_top, bool last_chunk) {
  const int C = config_.width, V = config_.vocab;
  const T* d_logits = acts.d_logits_;
  if (config_.stream() == ResidualStream::Sphere) {  // logits = s_z * raw: d s_z (stored) and d raw
    const T factor = static_cast<T>(SphereFactors::of(config_).s_z);
    std::copy_n(acts.d_logits_, static_cast<long>(c.rows) * V, acts.d_logits_raw_);
    d_logits = acts.d_logits_raw_;
    kernels::channel_scale_backward(acts.d_logits_raw_, g_.head_scale, static_cast<const T*>(acts.logits_raw_),
                                    static_cast<const T*>(w_.head_scale), factor, c.rows, V);
  }
  const int32_t* rows = acts.loss_rows_.data() + c.first;
  const bool consecutive = rows[c.rows - 1] - rows[0] == c.rows - 1;
  T* d_x = consecutive ? d_top + static_cast<long>(rows[0]) * C : acts.head_d_in_;
  // the last chunk's product leaves the head weight's gradient as the backward leaves it (the tied embedding's rows
  // then add the embedding's terms: backward_below_head sums those rows again), and takes its rows' squares
  double* squares = last_chunk ? squares_.rows_of(g_.head_weight - grads_.data()) : nullptr;
  linear_backward(d_x, g_.head_weight, static_cast<T*>(nullptr), d_logits, x, static_cast<const T*>(w_.head_weight),
                  c.rows, C, V, GradWrite::Overwrite, gemm_precision(config_), acts.weights_version_,
                  rounded(w_.head_weight), squares);
  if (!consecutive)
    for (int i = 0; i < c.rows; ++i)
      std::copy_n(acts.head_d_in_ + static_cast<long>(i) * C, C, d_top + static_cast<long>(rows[i]) * C);
}

template <typename T>
T Model<T>::mean_loss(const Activations<T>& acts) const {
  // summed in position order (0 where the loss does not count)
  T total = 0;
  for (long n = 0; n < acts.dims_.N(); ++n) total += acts.losses_[n];
  return total / static_cast<T>(acts.loss_count_);
}

namespace {
// The branch T(h) the sub-layer's forward returned (its out norm where it has one).
template <typename T>
const T* branch_output(const BlockActs<T>& a, Sublayer which) {
  if (which == Sublayer::Attention) return a.attn.out_norm.out != nullptr ? a.attn.out_norm.out : a.attn.out;
  return a.mlp.out_norm.out != nullptr ? a.mlp.out_norm.out : a.mlp.out;
}
}  // namespace

template <typename T>
const T* Model<T>::run_hyper_blocks(Activations<T>& acts, const BlockInputs<T>& in) const {
  const long N = acts.dims_.N(), NC = N * config_.width;
  // H = n copies of the embedding
  for (int i = 0; i < config_.residual_streams; ++i) std::copy_n(acts.embedded_, NC, acts.streams0_ + i * NC);
  const T* H = acts.streams0_;
  for (int k = 0; k < 2 * config_.layers; ++k) {
    const int l = k / 2;
    const Sublayer which = k % 2 == 0 ? Sublayer::Attention : Sublayer::Mlp;
    const BlockTensors<T>& w = w_.blocks[l];
    HyperActs<T>& a = acts.hyper_[k];
    hyper_input_forward(a, H, which == Sublayer::Attention ? w.attn_hc : w.mlp_hc, config_, N);
    const T* branch = sublayer_branch_forward(acts.blocks_[l], which, static_cast<const T*>(a.h), w, in, l);
    hyper_output_forward(a, H, branch, config_, N);
    H = a.out;
  }
  return acts.hyper_.back().sum;
}

template <typename T>
void Model<T>::backward_hyper_blocks(Activations<T>& acts, T* d_stream, const BlockInputs<T>& in) {
  const long N = acts.dims_.N(), NC = N * config_.width;
  const int n = config_.residual_streams;
  HyperScratch<T>& hs = acts.hyper_scratch_;
  T* dH = acts.d_streams_;
  T* dH_in = hs.d_streams;
  // sum = sum_j H_j: every stream gets the sum's gradient
  for (int i = 0; i < n; ++i) std::copy_n(d_stream, NC, dH + i * NC);
  for (int k = 2 * config_.layers - 1; k >= 0; --k) {
    const int l = k / 2;
    const Sublayer which = k % 2 == 0 ? Sublayer::Attention : Sublayer::Mlp;
    const HyperActs<T>& a = acts.hyper_[k];
    const T* H = k == 0 ? acts.streams0_ : acts.hyper_[k - 1].out;
    const HyperTensors<T>& w = which == Sublayer::Attention ? w_.blocks[l].attn_hc : w_.blocks[l].mlp_hc;
    const HyperTensors<T>& g = which == Sublayer::Attention ? g_.blocks[l].attn_hc : g_.blocks[l].mlp_hc;
    hyper_output_backward(dH_in, hs, static_cast<const T*>(dH), a, H, branch_output(acts.blocks_[l], which), config_,
                          N);
    // One stream whose input weight is exactly 1 (n = 1, static, at init): the branch's backward adds into the
    // stream's gradient directly, the very operations of Pre-LN, so that n = 1 is Pre-LN bit for bit; dh (for
    // A_m's gradient) is then the difference.
    const bool direct = n == 1 && !config_.hc_dynamic && w.alpha_in[0] == T(1);
    if (direct) {
      std::copy_n(dH_in, NC, hs.dh);
      sublayer_branch_backward(dH_in, acts.scratch_, g_.blocks[l], acts.blocks_[l], which,
                               static_cast<const T*>(hs.d_branch), static_cast<const T*>(a.h), w_.blocks[l], in, l);
      for (long i = 0; i < NC; ++i) hs.dh[i] = dH_in[i] - hs.dh[i];
    } else {
      zero(hs.dh, NC);
      sublayer_branch_backward(hs.dh, acts.scratch_, g_.blocks[l], acts.blocks_[l], which,
                               static_cast<const T*>(hs.d_branch), static_cast<const T*>(a.h), w_.blocks[l], in, l);
    }
    hyper_input_backward(dH_in, hs, g, a, H, w, config_, N, direct);
    std::swap(dH, dH_in);
  }
  // H = n copies of x
  std::copy_n(dH, NC, d_stream);
  for (int i = 1; i < n; ++i)
    for (long k = 0; k < NC; ++k) d_stream[k] += dH[i * NC + k];
}

template <typename T>
void Model<T>::forward_hidden(Activations<T>& acts, const int32_t* inputs) const {
  check_shape(acts);
  acts.inputs_ = nullptr;
  acts.targets_ = nullptr;
  acts.mask_ = nullptr;
  acts.head_ready_ = false;
  acts.weights_version_ = kernels::new_operand_version();
  embed(acts, inputs);
  run_blocks(acts);
  acts.inputs_ = inputs;
}

template <typename T>
void Model<T>::forward_logits(Activations<T>& acts, const int32_t* inputs, int first_row, std::span<T> out) const {
  const long N = acts.dims_.N();
  const int C = config_.width, V = config_.vocab;
  const long rows = static_cast<long>(out.size()) / V;
  if (static_cast<long>(out.size()) != rows * V || first_row < 0 || first_row + rows > N)
    throw Error("forward_logits: " + std::to_string(out.size()) + " values from position " + std::to_string(first_row) +
                " are not whole rows of " + std::to_string(V) + " logits within the " + std::to_string(N) +
                " positions");
  forward_hidden(acts, inputs);
  if (rows == 0) return;
  const T* x = head_input_rows(acts) + static_cast<long>(first_row) * C;
  linear_forward(out.data(), x, static_cast<const T*>(w_.head_weight), static_cast<const T*>(nullptr),
                 static_cast<int>(rows), C, V, gemm_precision(config_), 0, rounded(w_.head_weight));
  if (config_.stream() == ResidualStream::Sphere) {  // logits = s_z * raw, in place
    const T factor = static_cast<T>(SphereFactors::of(config_).s_z);
    kernels::channel_scale_forward(out.data(), static_cast<const T*>(out.data()), static_cast<const T*>(w_.head_scale),
                                   factor, rows, V);
  }
}

template <typename T>
std::vector<T> Model<T>::forward_logits(Activations<T>& acts, const int32_t* inputs) const {
  std::vector<T> logits(static_cast<size_t>(acts.dims_.N()) * config_.vocab);
  forward_logits(acts, inputs, 0, logits);
  return logits;
}

template <typename T>
int Model<T>::select_loss_rows(Activations<T>& acts, const int32_t* targets, const uint8_t* loss_mask) const {
  acts.targets_ = nullptr;  // no backward from these activations until a forward completes
  const int N = static_cast<int>(acts.dims_.N()), V = config_.vocab;
  int count = 0;
  for (int n = 0; n < N; ++n) {
    if (loss_mask[n] == 0) continue;
    if (targets[n] < 0 || targets[n] >= V)
      throw Error("target id " + std::to_string(targets[n]) + " outside the vocabulary 0.." + std::to_string(V - 1));
    acts.loss_rows_[count] = n;
    acts.loss_targets_[count] = targets[n];
    ++count;
  }
  if (count == 0) throw Error("loss mask selects no position");
  acts.loss_count_ = count;
  std::fill_n(acts.losses_, N, T(0));
  return count;
}

template <typename T>
T Model<T>::forward(Activations<T>& acts, const int32_t* inputs, const int32_t* targets,
                    const uint8_t* loss_mask) const {
  check_shape(acts);
  select_loss_rows(acts, targets, loss_mask);
  forward_hidden(acts, inputs);
  const int chunks = head_chunk_count(acts);
  for (int k = 0; k < chunks; ++k) {
    const HeadChunk c = head_chunk(acts, k);
    head_loss(acts, head_chunk_input(acts, c), c);
  }
  acts.targets_ = targets;
  acts.mask_ = loss_mask;
  acts.head_ready_ = chunks == 1;
  return mean_loss(acts);
}

template <typename T>
T* Model<T>::begin_backward(Activations<T>& acts) {
  const BlockDims& d = acts.dims_;
  const long NC = d.N() * config_.width;
  BlockScratch<T>& s = acts.scratch_;
  s.d_other = acts.d_other_;  // the blocks swap it with the stream's gradient: start from the same pair
  if (!grads_zero_) std::fill(grads_.begin(), grads_.end(), T(0));
  grads_zero_ = false;
  squares_.forget();
  if (s.d_context != nullptr) zero(s.d_context, d.Nc() * config_.width);
  if (s.d_first_v != nullptr) zero(s.d_first_v, d.N() * d.K);
  zero(acts.d_stream_, NC);
  if (!config_.has_final_norm()) return acts.d_stream_;
  zero(s.d_in, NC);  // top = Norm_f(h_L): the head's input gradient goes to the norm's backward
  return s.d_in;
}

template <typename T>
void Model<T>::backward(Activations<T>& acts) {
  check_shape(acts);
  BLOCKLAB_CHECK(acts.targets_ != nullptr, "backward() needs activations filled by forward() with targets");
  // loss = mean CE(head(top)) over the counted positions, chunk by chunk: the only chunk's logits and their
  // gradient are still there from the forward; more chunks are computed again
  acts.weights_version_ = kernels::new_operand_version();
  T* d_top = begin_backward(acts);
  for (int k = 0, chunks = head_chunk_count(acts); k < chunks; ++k) {
    const HeadChunk c = head_chunk(acts, k);
    const T* x = head_chunk_input(acts, c);
    if (!acts.head_ready_) head_loss(acts, x, c);
    head_backward(acts, x, c, d_top, k == chunks - 1);
  }
  backward_below_head(acts);
}

template <typename T>
T Model<T>::forward_backward(Activations<T>& acts, const int32_t* inputs, const int32_t* targets,
                             const uint8_t* loss_mask) {
  check_shape(acts);
  select_loss_rows(acts, targets, loss_mask);
  forward_hidden(acts, inputs);
  T* d_top = begin_backward(acts);
  const int chunks = head_chunk_count(acts);
  for (int k = 0; k < chunks; ++k) {
    const HeadChunk c = head_chunk(acts, k);
    const T* x = head_chunk_input(acts, c);
    head_loss(acts, x, c);
    head_backward(acts, x, c, d_top, k == chunks - 1);
  }
  acts.targets_ = targets;
  acts.mask_ = loss_mask;
  acts.head_ready_ = chunks == 1;
  const T loss = mean_loss(acts);
  backward_below_head(acts);
  return loss;
}

template <typename T>
void Model<T>::backward_below_head(Activations<T>& acts) {
  const BlockDims& d = acts.dims_;
  const int N = static_cast<int>(d.N()), C = config_.width;
  BlockInputs<T> in = block_inputs(acts);
  in.grad_squares = &squares_, in.grads_base = grads_.data();
  BlockScratch<T>& s = acts.scratch_;
  T* d_stream = acts.d_stream_;
  const T* h_top = acts.stream(config_.layers);
  if (config_.has_final_norm())  // top = Norm_f(h_L)
    norm_backward(d_stream, g_.final_norm, static_cast<const T*>(s.d_in), h_top, w_.final_norm, acts.final_norm_,
                  config_, N);

  // d_stream holds d loss / d (output of block l); each block turns it into d loss / d (its input).
  if (config_.hyper()) {
    backward_hyper_blocks(acts, d_stream, in);
  } else {
    for (int l = config_.layers - 1; l >= 0; --l)
      block_backward(d_stream, s, g_.blocks[l], acts.blocks_[l], acts.stream(l), w_.blocks[l], in, l);
  }

  if (s.d_context != nullptr) {
    // context = x[:, 0:Tc]: its gradient joins the stream's
    for (int b = 0; b < d.B; ++b) {
      T* dst = d_stream + static_cast<long>(b) * d.T * C;
      const T* src = s.d_context + static_cast<long>(b) * d.Tc * C;
      for (long i = 0; i < static_cast<long>(d.Tc) * C; ++i) dst[i] += src[i];
    }
  }
  // x = tok_emb[inputs] + pos_emb[t]
  token_embedding_backward(g_.tok_emb, static_cast<const T*>(d_stream), acts.inputs_, N, C);
  {
    // the gradient norm's rows of the token embedding: those of the inputs summed here (a token once a position);
    // tied, the head's last product summed every row before; untied, every other row is zero, as the backward began
    double* squares = squares_.rows_of(g_.tok_emb - grads_.data());
    if (g_.head_weight != g_.tok_emb) std::fill_n(squares, config_.vocab, 0.0);
    for (int n = 0; n < N; ++n)
      squares[acts.inputs_[n]] = kernels::sum_of_squares(g_.tok_emb + static_cast<long>(acts.inputs_[n]) * C, C);
  }
  if (g_.pos_emb != nullptr) position_embedding_backward(g_.pos_emb, static_cast<const T*>(d_stream), d.B, d.T, C);
}

template class Activations<float>;
template class Activations<double>;
template class Model<float>;
template class Model<double>;

}  // namespace blocklab
