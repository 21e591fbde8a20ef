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
// The head and the loss run in chunks of the positions the loss counts (head_chunk_rows): a chunk's logits, the
// loss's gradient with respect to them, and the head's backward for it, before the next chunk. The (B*T, V)
// logits are never all kept, and positions the loss does not count (the copy task's first half) get no logits.
//
// Memory: one arena each for parameters and gradients (Model); one for the saved activations plus the
// backward's working buffers, sized once for a (batch, seq_len) shape (Activations). Nothing allocates
// in forward() or backward().
#include <cstdint>
#include <span>
#include <vector>

#include "model/block.h"
#include "model/config.h"
#include "model/grad_squares.h"
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
  // batch B and sequence length Tn (<= config.seq_len) fix the shapes. head_rows: the most positions one chunk
  // of the head and the loss holds (0: Model::head_chunk_rows(B*Tn, V); fewer changes only the order in which
  // the head weight's gradient is summed).
  Activations(const ModelConfig& config, int batch, int seq_len, int head_rows = 0);
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
  // The head and the loss, one chunk of at most head_rows_ counted positions at a time (Model::head_chunk_rows):
  // the chunk's inputs when they are not consecutive rows of the stream (gathered), its logits and the loss's
  // gradient with respect to them; the losses of all N positions (0 where the loss does not count).
  int head_rows_ = 0;
  T *head_in_ = nullptr, *logits_ = nullptr, *d_logits_ = nullptr, *losses_ = nullptr, *chunk_losses_ = nullptr;
  T* logits_raw_ = nullptr;  // [sphere stream] (rows,V) the chunk's h_L head^T before s_z
  T* d_logits_raw_ = nullptr;  // [sphere stream] (rows,V) backward: the gradient of logits_raw_
  T* head_d_in_ = nullptr;     // backward: (rows,C) the gathered chunk's input gradient
  std::vector<int32_t> loss_rows_, loss_targets_;  // the counted positions (in order) and their targets
  int loss_count_ = 0;
  // The weights' version (kernels::new_operand_version) for the head's products, new at every forward and
  // backward call: within one call the weights cannot change, and the bf16 path keeps the tied head's rounded
  // weight from one chunk of rows to the next.
  uint64_t weights_version_ = 0;
  bool head_ready_ = false;  // d_logits_ holds the only chunk of the last forward (d_logits_ = logits_: the
                             // gradient replaces the logits)
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

  // Mutable access: the caller may write them, so the rounded copy (rounded_params_to_write) is withdrawn.
  std::span<T> params() {
    rounded_valid_ = false;
    return params_;
  }
  std::span<const T> params() const { return params_; }
  // Mutable access: the caller may write them, so the next backward clears them first (see grads_were_zeroed), and
  // grad_norm() sums all of them again.
  std::span<T> grads() {
    grads_zero_ = false;
    squares_.forget();
    return grads_;
  }
  // The L2 norm of grads() in the order model/grad_squares.h fixes (the same bits for any thread count and level):
  // the rows the last backward's weight-gradient products summed while in cache are taken from there, the rest read.
  double grad_norm() { return squares_.norm(std::span<const T>(grads_)); }
  std::span<const T> grads() const { return grads_; }
  // One named tensor of the parameter / gradient arena.
  std::span<T> param(std::string_view name);
  std::span<const T> grad(std::string_view name) const;

  // Activations sized for this model and a (batch, seq_len) shape.
  Activations<T> make_activations(int batch, int seq_len, int head_rows = 0) const {
    return Activations<T>(config_, batch, seq_len, head_rows);
  }

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
  // Gradients of the loss of the forward that filled acts w.r.t. all parameters (overwrites grads()).
  // Uses acts' working buffers; the saved activations stay as they are. Where the head ran in more than one
  // chunk, it computes the chunks' logits again (one more head product: forward_backward avoids it).
  void backward(Activations<T>& acts);
  // forward() then backward(), with each chunk's head backward right after its loss: the same numbers, bit for
  // bit, without computing any logits twice. The training step's path.
  T forward_backward(Activations<T>& acts, const int32_t* inputs, const int32_t* targets, const uint8_t* loss_mask);

  // Forward up to the head's input (the blocks and the final norm): the residual stream for the probes. acts then
  // cannot be used for backward.
  void forward_hidden(Activations<T>& acts, const int32_t* inputs) const;
  // Forward without a loss: the logits of positions first_row .. first_row + out.size() / V - 1 into out.
  void forward_logits(Activations<T>& acts, const int32_t* inputs, int first_row, std::span<T> out) const;
  // The same for every position: (B*T, V).
  std::vector<T> forward_logits(Activations<T>& acts, const int32_t* inputs) const;

  // The most positions one chunk of the head and the loss holds for N positions and vocabulary V: all N while
  // their logits fit in kHeadChunkElements values, else N split evenly into that many. 16M values (64 MB in
  // float; the loss's gradient replaces the logits): GPT-2's vocabulary gives chunks of up to 333 rows. Its
  // 1024 loss rows at 8x128 ran the head's three products in 705 ms a step as 7 chunks (8M values) and in 515
  // as 4 (bf16 on an AMX Xeon, 1 thread).
  static constexpr long kHeadChunkElements = 1L << 24;
  static int head_chunk_rows(long N, int V);
  // Tells the model that every gradient is now exactly zero (an optimizer pass cleared them while reading them),
  // so the next backward skips its own pass to clear them. Any later mutable grads() access, or a backward,
  // withdraws it.
  void grads_were_zeroed() { grads_zero_ = true; }

  // The parameters rounded to bf16, for a float model whose bf16 products take rounded operands
  // (bf16_gemm_takes_rounded_operands(); the precision set to bf16 now or at an earlier call, as `blocklab bench
  // --precision bf16` switches it between steps): the forward and backward products in bf16 then read
  // each weight's copy instead of rounding the weight on every call (the same bits). An optimizer writes it in its
  // pass (Optimizer::step_and_zero_grads with rounded_params), while each chunk is still in cache; the trainer then
  // says so (rounded_params_were_written). Returns the arena-long copy to write (allocated on first use), or an
  // empty span where this model keeps none. Any later mutable params() / param() access, init_weights, or a
  // sphere renormalisation withdraws it.
  std::span<uint16_t> rounded_params_to_write();
  void rounded_params_were_written() { rounded_valid_ = !rounded_.empty(); }
  bool has_rounded_params() const { return rounded_valid_; }
  size_t rounded_params_bytes() const { return rounded_.size() * sizeof(uint16_t); }  // held, current or not

 private:
  void check_shape(const Activations<T>& acts) const;
  void embed(Activations<T>& acts, const int32_t* inputs) const;
  void run_blocks(Activations<T>& acts) const;  // the blocks and the final norm
  const T* head_input_rows(const Activations<T>& acts) const;  // what the head reads: (N,C)
  // The counted positions and their targets into acts (checked); returns their count.
  int select_loss_rows(Activations<T>& acts, const int32_t* targets, const uint8_t* loss_mask) const;
  // Chunk k of the counted positions: its first index into acts.loss_rows_ and its length.
  struct HeadChunk {
    int first, rows;
  };
  static int head_chunk_count(const Activations<T>& acts);
  static HeadChunk head_chunk(const Activations<T>& acts, int k);
  // The chunk's head input: consecutive rows of the stream in place, else gathered into acts.head_in_.
  const T* head_chunk_input(Activations<T>& acts, HeadChunk c) const;
  // The chunk's logits, losses (into acts.losses_) and the loss's gradient with respect to the logits.
  void head_loss(Activations<T>& acts, const T* x, HeadChunk c) const;
  // The chunk's head backward: adds into the head's gradients, writes d top into d_top's counted rows.
  void head_backward(Activations<T>& acts, const T* x, HeadChunk c, T* d_top, bool last_chunk);
  T mean_loss(const Activations<T>& acts) const;
  // backward()'s first steps: clears the gradients and the buffers the blocks add into; returns where the head's
  // input gradient goes (zeroed).
  T* begin_backward(Activations<T>& acts);
  // backward() from the head's input gradient down to the embeddings.
  void backward_below_head(Activations<T>& acts);
  const T* run_hyper_blocks(Activations<T>& acts, const BlockInputs<T>& in) const;  // returns the summed stream
  void backward_hyper_blocks(Activations<T>& acts, T* d_stream, const BlockInputs<T>& in);
  BlockInputs<T> block_inputs(Activations<T>& acts) const;
  void init_linear(T* p, const ParamSpec& spec, Rng& rng) const;

  ModelConfig config_;
  ParameterTable table_;
  std::vector<T> params_, grads_;
  bool grads_zero_ = false;  // grads_ known to be all zero (grads_were_zeroed)
  GradSquares squares_;      // the gradient's row sums of squares for grad_norm()
  std::vector<uint16_t> rounded_;  // params_ rounded to bf16 (rounded_params_to_write)
  bool rounded_valid_ = false;     // rounded_ holds the current params_
  // A weight of the arena as the bf16 products read it: its rounded copy where it is current, else nullptr.
  const uint16_t* rounded(const T* weight) const {
    return rounded_valid_ && weight != nullptr ? rounded_.data() + (weight - params_.data()) : nullptr;
  }
  std::vector<T> rope_cos_, rope_sin_;  // (seq_len, D/2) [RoPE]
  ModelTensors<T> w_, g_;
};

extern template class Activations<float>;
extern template class Activations<double>;
extern template class Model<float>;
extern template class Model<double>;

}  // namespace blocklab
