#pragma once
// The two probes of `blocklab probe` on a Hugging Face model, as library calls: run the model on a
// prompt and return what was measured; writing the residual probe's files is a separate call.
//
//   residual   the residual stream's norms per layer (probe/residual_layers.h), optionally every layer's
//              hidden states; files: residual.csv, residual.json, hidden_states.safetensors (optional),
//              (the figure, residual.gp and with gnuplot residual.{png,svg}: report/residual_plot.h)
//   logits     the most likely next tokens after the prompt: softmax in double over the last
//              position's logits, then the top k
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hf/model.h"
#include "probe/residual_layers.h"

namespace blocklab::probe {

// ---- residual ----------------------------------------------------------------------------------

struct ResidualProbeOptions {
  bool save_hidden = false;  // also keep every layer's hidden states
  // Called after each layer l = 0 (embeddings) .. L with its statistics, e.g. for progress.
  std::function<void(const ResidualLayerStats&)> on_layer;
};

struct ResidualProbeResult {
  std::vector<ResidualLayerStats> layers;  // l = 0 .. L
  std::vector<float> hidden;               // (L+1, T, C) with save_hidden, else empty
  double forward_seconds = 0;
};

// One forward pass (weights streamed block by block, no logits).
ResidualProbeResult probe_residual(const hf::Model& model, std::span<const int32_t> tokens,
                                   const ResidualProbeOptions& options = {});

// What the probe ran on, for residual.json.
struct ResidualProbeRun {
  std::string model_dir;            // as given
  std::optional<std::string> text;  // the prompt, when it was given as text
  std::vector<int32_t> tokens;
  double total_seconds = 0;         // the whole probe, loading included
};

struct WrittenFiles {
  std::vector<std::string> names;  // file names in the directory, in the order written
};

// Writes DIR/residual.csv, DIR/residual.json, DIR/hidden_states.safetensors (when result holds hidden
// states). DIR must exist.
WrittenFiles write_residual_probe(const std::filesystem::path& dir, const hf::Model& model, const ResidualProbeRun& run,
                                  const ResidualProbeResult& result);

// ---- logits ------------------------------------------------------------------------------------

struct TokenProbability {
  int32_t id = 0;
  double probability = 0;  // softmax over the whole vocabulary, in double
  float logit = 0;
};

// The k most likely tokens (fewer when the vocabulary is smaller), most likely first; equal logits in
// the order of their ids. Throws Error for k < 1 or no logits.
std::vector<TokenProbability> top_tokens(std::span<const float> logits, int k);

struct LogitsProbeOptions {
  int top = 10;
  std::function<void(int layer)> on_layer;  // called after each layer l = 0 .. L, e.g. for progress
};

// One forward pass (weights streamed block by block) and the top tokens after the last position.
std::vector<TokenProbability> probe_logits(const hf::Model& model, std::span<const int32_t> tokens,
                                           const LogitsProbeOptions& options = {});

}  // namespace blocklab::probe
