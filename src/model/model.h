#pragma once
// A stack of transformer blocks on a token sequence, with its parameters, gradients and activations.
//
//   x = tok_emb[tokens] + pos_emb[t]
//   Pre-LN block:  u = h + Attn(LN1(h));   h' = u + MLP(LN2(u));     logits = head(LNf(h_L))
//   Post-LN block: u = LN1(h + Attn(h));   h' = LN2(u + MLP(u));     logits = head(h_L)
//   Attn = proj(causal multi-head attention(qkv(x))),  MLP = fc2(GELU(fc1(x)))
//
// Memory is sized once at construction for a (batch, seq_len) shape: one arena each for parameters,
// gradients and saved activations, plus gradient scratch for ONE block (the backward pass walks the
// blocks one at a time). Nothing allocates in forward() or backward().
#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"

namespace blocklab {

template <typename T>
class Model {
 public:
  // batch B and sequence length Tn (<= config.seq_len) fix the activation shapes.
  Model(const ModelConfig& config, int batch, int seq_len);

  const ModelConfig& config() const { return config_; }
  const ParameterTable& table() const { return table_; }
  int batch() const { return B_; }
  int seq_len() const { return T_; }

  std::span<T> params() { return params_; }
  std::span<const T> params() const { return params_; }
  std::span<T> grads() { return grads_; }
  std::span<const T> grads() const { return grads_; }
  // One named tensor of the parameter / gradient arena.
  std::span<T> param(std::string_view name);
  std::span<const T> grad(std::string_view name) const;

  // Xavier-uniform or N(0, 0.02) Linear weights, zero biases, unit norm weights, N(0, embed_init_std)
  // embeddings. Each tensor draws from its own stream seeded by (seed, name): independent of table order.
  void init_weights(uint64_t seed);

  // inputs, targets (B,T) token ids in [0,V); loss_mask (B,T) selects the positions whose loss counts
  // (at least one). Returns the mean cross-entropy over selected positions.
  T forward(const int32_t* inputs, const int32_t* targets, const uint8_t* loss_mask);
  // Forward without a loss (logits only).
  void forward_logits(const int32_t* inputs);
  // Gradients of the last forward()'s loss w.r.t. all parameters (overwrites grads()).
  void backward();

  std::span<const T> logits() const { return {logits_, static_cast<size_t>(B_) * T_ * config_.vocab}; }
  // The residual stream: index 0 is the embedding output, index l (1..L) the output of block l. (B,T,C)
  const T* stream(int index) const;

  // Bytes of the activations the forward saves for the backward, and of the backward's working buffers.
  size_t activation_bytes() const { return acts_.size() * sizeof(T); }
  size_t scratch_bytes() const { return scratch_.size() * sizeof(T); }

 private:
  struct LayerActs {
    T *ln1, *ln1_mean, *ln1_rstd;  // Pre: LN1(h).        Post: LN1(resid1) = u
    T *qkv, *att, *atty, *attn_out;
    T* resid1;                     // h + attn_out (Pre: u; Post: the input of LN1)
    T *ln2, *ln2_mean, *ln2_rstd;  // Pre: LN2(u).        Post: LN2(resid2) = h'
    T *fc1, *gelu, *mlp_out;
    T* resid2;                     // Pre: u + mlp_out = h'.  Post: u + mlp_out, the input of LN2
  };

  void embed(const int32_t* inputs);
  void run_blocks();
  void norm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N);
  void norm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                     const T* rstd, int N);

  ModelConfig config_;
  ParameterTable table_;
  int B_, T_;
  std::vector<T> params_, grads_, acts_, scratch_;
  ModelTensors<T> w_, g_;
  std::vector<LayerActs> layers_;
  T *embedded_, *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *probs_, *losses_;
  // gradient scratch for one block
  T *d_stream_, *d_tmp_a_, *d_qkv_, *d_atty_, *d_hidden_, *d_logits_;
  T* attn_scratch_;  // attention's work space, forward and backward
  const int32_t* inputs_ = nullptr;
  const int32_t* targets_ = nullptr;
  const uint8_t* mask_ = nullptr;
};

extern template class Model<float>;
extern template class Model<double>;

}  // namespace blocklab
