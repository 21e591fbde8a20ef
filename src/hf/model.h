#pragma once
// Forward pass of a Hugging Face decoder-only model (see config.h for the families), reading weights
// in their stored dtype from memory-mapped safetensors files.
//
// Qwen3 / Qwen2 / Llama block (pre-norm, RMSNorm):
//   a = RMSNorm(h);  q, k, v = a Wq (+bq), a Wk (+bk), a Wv (+bv)          q: H heads, k/v: Hkv heads of D
//   q, k = RMSNorm_D(q), RMSNorm_D(k)                                     (Qwen3 only: per head, before RoPE)
//   q, k = RoPE(q), RoPE(k);  h = h + Wo GQA-attention(q, k, v)
//   h = h + W_down (silu(W_gate m) * (W_up m)),  m = RMSNorm(h)
//   logits = lm_head(RMSNorm(h_L))                                       lm_head = embed_tokens when tied
// GPT-2 block (Pre-LN, LayerNorm):
//   h_0 = wte[tok] + wpe[t];  h = h + c_proj(attention(c_attn(LN1(h))));  h = h + c_proj(gelu_tanh(c_fc(LN2(h))))
//   logits = wte (LN_f(h_L))
//
// The blocks run in the block engine (model/block.h), the same code that trains blocklab's own stacks;
// this file maps the Hugging Face tensors onto it, by the names and layouts of hf/names.h. All arithmetic is
// float32; weights stay memory-mapped in their stored dtype and are converted per row block. Layer l of the
// residual stream is h_l: l = 0 is the embedding output, l = 1..L the output of block l (not normalised).
// Hugging Face's `output_hidden_states` differs only in its last entry, which it returns after the final norm.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hf/config.h"
#include "hf/weights.h"
#include "model/config.h"
#include "model/parameters.h"

namespace blocklab::hf {

// What one block reads: norm weights and biases converted to float once, linear weights read in place
// through LinearSource views; `tensors` points into both (the block engine's view of them).
struct BlockWeights;
class TensorFinder;
struct NameScheme;
struct NamedTensor;

enum class LogitsFor { None, Last, All };

struct ForwardOptions {
  LogitsFor logits = LogitsFor::All;
  // Drop each block's weight pages from the process once it has run (they stay in the page cache),
  // and ask the kernel to read the next block's ahead. Bounds the resident set to about one block.
  bool stream_weights = false;
  // Called with the residual stream h_l (Tn x C, row-major) for l = 0 (embeddings) .. L.
  std::function<void(int layer, std::span<const float> hidden)> on_hidden;
  // Called after block l (1..L) with its self-attention's softmax probabilities (heads x Tn x Tn, row-major;
  // zero above the diagonal), before on_hidden(l).
  std::function<void(int layer, std::span<const float> probabilities)> on_attention;
};

struct ForwardResult {
  int tokens = 0;
  std::vector<float> final_hidden;  // (Tn, C): the final norm of h_L
  std::vector<float> logits;        // (Tn, V) for All, (1, V) for Last (the last position), empty for None
};

class Model {
 public:
  // Reads DIR/config.json and maps the weights; validates every tensor's presence, dtype and shape.
  static Model load(const std::filesystem::path& dir);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const Config& config() const { return config_; }
  const WeightStore& weights() const { return weights_; }

  ForwardResult forward(std::span<const int32_t> tokens, const ForwardOptions& options = {}) const;
  // Bytes forward() allocates for `tokens` tokens, the memory-mapped weights aside: one block's activations
  // (every block reuses them), the attention's work space, the stream, the final norm, the logits and
  // the 16-bit weights' conversion tiles.
  double forward_bytes(int tokens, LogitsFor logits) const;

  // Elements of the tensors the forward pass reads (the tied embedding once).
  int64_t parameter_count() const { return parameter_count_; }
  // Tensors in the files that the language model does not read (e.g. a vision tower), sorted.
  const std::vector<std::string>& unused_tensors() const { return unused_; }
  // Stored dtypes of the tensors it reads, e.g. "BF16" or "F32 (biases), BF16".
  std::string dtype_summary() const;
  // Names of the embedding and output tensors (for messages).
  const std::string& embedding_name() const { return embed_.name; }
  const std::string& lm_head_name() const { return lm_head_.name; }

 private:
  Model(Config config, WeightStore weights);
  void resolve();  // finds and checks every tensor, by the family's names (hf/names.h)
  // The prefix the language model's tensors sit under: the first of the scheme's under which the token
  // embedding is found. Throws Error naming each name it tried.
  std::string prefix(const NameScheme& names) const;
  // One of the tensors outside the blocks: token embedding, position table, final norm, output head.
  void resolve_model_tensor(TensorFinder& find, const NameScheme& names, const NamedTensor& t, const ParamSpec& spec);

  Config config_;
  WeightStore weights_;
  WeightRef embed_, positions_, lm_head_;  // positions_: GPT-2 wpe
  std::vector<float> final_norm_weight_, final_norm_bias_;
  NormTensors<float> final_norm_;  // views of the two above
  std::vector<std::unique_ptr<BlockWeights>> blocks_;
  int64_t parameter_count_ = 0;
  std::vector<std::string> unused_;
  std::vector<std::string> used_dtypes_;
};

}  // namespace blocklab::hf
