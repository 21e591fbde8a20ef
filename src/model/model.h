#pragma once
// A stack of transformer blocks on a token sequence: the parameters and gradients (Model) and the
// activations of one forward pass (Activations), kept apart so that the backward pass takes exactly
// the activations its forward filled.
//
//   x = tok_emb[tokens] (+ pos_emb[t] with learned positions)
//   h_l = block_l(h_{l-1})                     (model/block.h: every placement, norm, attention, MLP kind)
//   logits = head(Norm_f(h_L))                 (Norm_f for Pre-LN only; head = tok_emb when tied;
//                                               the sphere stream: logits = s_z * (h_L head^T))
//   cross-attention context (if any) = x[:, 0:context_len]: the embedded first positions
//
// Memory: one arena each for parameters and gradients (Model); one for the saved activations plus the
// backward's working buffers, sized once for a (batch, seq_len) shape (Activations). Nothing allocates
// in forward() or backward().
#include <cstdint>
#include <span>
#include <vector>

#include "model/block.h"
#include "model/config.h"
#include "model/hyper.h"
#include "model/parameters.h"
#include "util/rng.h"

namespace blocklab {

template <typename T>
class Model;

// Everything one forward pass saves for its backward pass, for a fixed (batch, seq_len).
template <typename T>
class Activations {
 public:
  // batch B and sequence length Tn (<= config.seq_len) fix the shapes.
  Activations(const ModelConfig& config, int batch, int seq_len);
  // The saved pointers point into arena_: moving keeps them valid, copying would not.
  Activations(const Activations&) = delete;
  Activations& operator=(const Activations&) = delete;
  Activations(Activations&&) noexcept = default;
  Activations& operator=(Activations&&) noexcept = default;

  int batch() const { return dims_.B; }
  int seq_len() const { return dims_.T; }
  int layers() const { return layers_; }
  // The residual stream: index 0 is the embedding output, index l (1..L) the output of block l. (B,T,C)
  // Hyper-connections: the sum of the n streams after block l (what the final norm reads after the last).
  const T* stream(int index) const;
  // What block `index` (0-based) saved, e.g. its attention probabilities attn.att (B,H,T,T) for the stream probe.
  const BlockActs<T>& block_acts(int index) const { return blocks_.at(static_cast<size_t>(index)); }
  std::span<const T> logits() const { return {logits_, static_cast<size_t>(dims_.N()) * vocab_}; }
  // [hc, mhc] The mixing of sub-layer k (2l: block l's attention, 2l+1: its MLP) of the last forward.
  const HyperActs<T>& hyper(int k) const { return hyper_.at(static_cast<size_t>(k)); }
  // True after a forward with targets, until the next forward.
  bool has_loss() const { return targets_ != nullptr; }

  // Bytes of the saved activations, and of the backward's working buffers.
  struct Sizes {
    size_t activation_bytes = 0, scratch_bytes = 0;
  };
  // The same two sizes for a (config, batch, seq_len) without allocating them (O(layers) time, no memory
  // per block). The caller keeps the products in range (model/memory.h checks a lower bound first).
  static Sizes sizes(const ModelConfig& config, int batch, int seq_len);
  size_t activation_bytes() const { return (arena_.size() - scratch_elements_) * sizeof(T); }
  size_t scratch_bytes() const { return scratch_elements_ * sizeof(T); }

 private:
  friend class Model<T>;
  Activations() = default;  // for sizes()
  long carve(T* base, const ModelConfig& config);  // base null: count only; returns the arena's elements
  BlockDims dims_;
  int layers_ = 0, vocab_ = 0;
  std::vector<T> arena_;
  long scratch_elements_ = 0;
  std::vector<BlockActs<T>> blocks_;
  BlockScratch<T> scratch_;
  T *embedded_ = nullptr, *context_ = nullptr;
  T* first_v_ = nullptr;  // [value_residual] (N,K) the first block's values
  T* streams0_ = nullptr;  // [hc, mhc] (n,N,C) n copies of the embedding
  std::vector<HyperActs<T>> hyper_;  // [hc, mhc] the mixing around sub-layer k = 2l (attention), 2l+1 (MLP)
  HyperScratch<T> hyper_scratch_;
  T* d_streams_ = nullptr;  // [hc, mhc] (n,N,C) the streams' gradient
  NormActs<T> final_norm_;  // [final norm]
  // the logits, the loss's gradient with respect to them (written by the forward with targets), the losses
  T *logits_ = nullptr, *d_logits_ = nullptr, *losses_ = nullptr;
  T* logits_raw_ = nullptr;  // [sphere stream] (N,V) h_L head^T before s_z
  T* d_logits_raw_ = nullptr;  // [sphere stream] (N,V) backward: the gradient of logits_raw_
  T* d_stream_ = nullptr;  // backward: the stream's gradient
  T* d_other_ = nullptr;     // the second stream-gradient buffer (block_backward swaps scratch_.d_other)
  const int32_t* inputs_ = nullptr;
  const int32_t* targets_ = nullptr;
  const uint8_t* mask_ = nullptr;
};

template <typename T>
class Model {
 public:
  explicit Model(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  // The precision of the linear layers' products for the next forward/backward. It changes which kernels
  // run, not the parameters' layout: `blocklab bench --precision bf16` times both in one run with one model.
  void set_precision(Precision precision) { config_.precision = precision; }
  const ParameterTable& table() const { return table_; }

  std::span<T> params() { return params_; }
  std::span<const T> params() const { return params_; }
  // Mutable access: the caller may write them, so the next backward clears them first (see grads_were_zeroed).
  std::span<T> grads() {
    grads_zero_ = false;
    return grads_;
  }
  std::span<const T> grads() const { return grads_; }
  // One named tensor of the parameter / gradient arena.
  std::span<T> param(std::string_view name);
  std::span<const T> grad(std::string_view name) const;

  // Activations sized for this model and a (batch, seq_len) shape.
  Activations<T> make_activations(int batch, int seq_len) const { return Activations<T>(config_, batch, seq_len); }

  // The config's init scheme (config.h: xavier, gpt2, deepnorm, tfixup) for linear weights and embeddings;
  // zero biases, unit norm weights, DyT alpha 0.5, Admin omega at its closed form, ReZero alpha 0.
  // Each tensor draws from its own stream seeded by (seed, name): independent of table order.
  // The sphere stream has an init of its own (model/sphere.h: sphere_init), then normalize_weights().
  void init_weights(uint64_t seed);

  // The sphere stream's renormalisation (a no-op for the other streams): each weight vector along the width to
  // unit L2 norm, the rows of tok_emb, head, q/k/v (or qkv) and fc1 (over their C inputs), the columns of attn.proj and
  // fc2 (over their C outputs). The optimizer step runs it after every update (train/trainer.cpp). Each vector
  // is summed in double in a fixed order: the same result for any thread count.
  void normalize_weights();

  // inputs, targets (B,T) token ids in [0,V); loss_mask (B,T) selects the positions whose loss counts
  // (at least one). Fills acts; returns the mean cross-entropy over selected positions.
  T forward(Activations<T>& acts, const int32_t* inputs, const int32_t* targets, const uint8_t* loss_mask) const;
  // Forward without a loss (logits only); acts then cannot be used for backward.
  void forward_logits(Activations<T>& acts, const int32_t* inputs) const;
  // Gradients of the loss of the forward that filled acts w.r.t. all parameters (overwrites grads()).
  // Uses acts' working buffers; the saved activations stay as they are.
  void backward(Activations<T>& acts);
  // Tells the model that every gradient is now exactly zero (an optimizer pass cleared them while reading them),
  // so the next backward skips its own pass to clear them. Any later mutable grads() access, or a backward,
  // withdraws it.
  void grads_were_zeroed() { grads_zero_ = true; }

 private:
  void check_shape(const Activations<T>& acts) const;
  void embed(Activations<T>& acts, const int32_t* inputs) const;
  void run_blocks(Activations<T>& acts) const;
  const T* run_hyper_blocks(Activations<T>& acts, const BlockInputs<T>& in) const;  // returns the summed stream
  void backward_hyper_blocks(Activations<T>& acts, T* d_stream, const BlockInputs<T>& in);
  BlockInputs<T> block_inputs(Activations<T>& acts) const;
  void init_linear(T* p, const ParamSpec& spec, Rng& rng) const;

  ModelConfig config_;
  ParameterTable table_;
  std::vector<T> params_, grads_;
  bool grads_zero_ = false;  // grads_ known to be all zero (grads_were_zeroed)
  std::vector<T> rope_cos_, rope_sin_;  // (seq_len, D/2) [RoPE]
  ModelTensors<T> w_, g_;
};

extern template class Activations<float>;
extern template class Activations<double>;
extern template class Model<float>;
extern template class Model<double>;

}  // namespace blocklab
