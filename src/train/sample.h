#pragma once
// Text from a trained run: its model continues a prompt one token at a time.
//
//   load_run_model(DIR)  the run's final weights (DIR/model.safetensors) or its newest checkpoint that verifies,
//                        whichever is later; its config; its tokenizer (text runs: bytes or DIR/tokenizer.json)
//   generate(...)        each new token from the logits at the last position of the newest seq_len tokens
//                        (the window slides once the text is longer than the model's positions):
//                        greedy (argmax) at temperature 0, else a draw from softmax(logits / temperature),
//                        restricted to the top_k largest logits when top_k > 0, from a generator seeded by seed.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/text_data.h"
#include "model/model.h"
#include "train/run_config.h"
#include "util/rng.h"

namespace blocklab {

struct SampleOptions {
  int tokens = 200;          // how many tokens to add
  double temperature = 1.0;  // 0: greedy
  int top_k = 0;             // 0: every token
  uint64_t seed = 0;
};
// Throws Error naming the first bad option (tokens < 1, temperature negative or not finite, top_k negative or
// above vocab).
void check_sample_options(const SampleOptions& options, int vocab);

struct RunModel {
  RunConfig config;
  std::filesystem::path weights;  // the file the weights came from
  int step = 0;                   // the training step of those weights
  Model<float> model;
  std::optional<TextTokenizer> tokenizer;  // text runs
  std::vector<std::string> notes;          // what was passed over (a damaged model.safetensors or checkpoint)
};
// Throws Error naming the directory when it holds no run, no weights that verify, or (text) no tokenizer.
RunModel load_run_model(const std::filesystem::path& run_dir);

// The token choice of one step. logits: one position's V values. Greedy takes the first largest logit.
int32_t choose_token(std::span<const float> logits, double temperature, int top_k, Rng& rng);

// Next-token logits of a model for a growing text, with activations sized once for one window.
class NextTokenLogits {
 public:
  explicit NextTokenLogits(const Model<float>& model);
  // The logits after the last min(seq_len, tokens.size()) tokens (tokens non-empty, ids < vocab). Positions
  // after the text are filled with id 0; causal attention keeps them from changing the logits asked for.
  std::span<const float> operator()(std::span<const int32_t> tokens);

 private:
  const Model<float>& model_;
  Activations<float> acts_;
  std::vector<int32_t> window_;
  std::vector<float> logits_;  // the last position's (the head runs for it alone)
};

// Throws Error for an empty prompt, an id outside the vocab, or (cross-attention models) a prompt shorter than
// the context the model attends to.
void check_prompt(const ModelConfig& model, std::span<const int32_t> prompt);

// The prompt's continuation: options.tokens new ids. on_token sees each as it is chosen. Throws Error for an
// empty prompt, an id outside the vocab, or (cross-attention models) a prompt shorter than the context.
std::vector<int32_t> generate(const Model<float>& model, std::span<const int32_t> prompt, const SampleOptions& options,
                              const std::function<void(int32_t)>& on_token = {});

// "1,2,3" -> ids. Throws Error naming the bad item.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what = "ids");

}  // namespace blocklab
