#pragma once
// The probes of a Hugging Face model (probe/hf_probe.h) as library calls that start from what a user gives:
// a model directory and a prompt, as text (encoded with the model's tokenizer.json) or as token ids.
// `blocklab probe residual|logits` and the Python residual_of_hf_model() call these.
//   residual_probe_job   the residual stream's norms per layer; with an output directory also residual.csv,
//                        residual.json, optionally hidden_states.safetensors, and the figure residual.{gp,png,svg}
//   logits_probe_job     the most likely next tokens after the prompt
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hf/model.h"
#include "probe/hf_probe.h"
#include "text/tokenizer.h"

namespace blocklab::jobs {

struct HfPromptSpec {
  std::string model_dir;
  std::optional<std::string> text;                 // encoded with model_dir/tokenizer.json
  std::optional<std::vector<int32_t>> tokens;      // or the ids themselves (exactly one of the two)
  int threads = 0;                                 // 0: all cores
  std::function<void()> on_loading;  // before the model is loaded (it may take a while)
  // After the model is loaded and the prompt encoded, before the forward pass: for a front end's lines.
  std::function<void(const hf::Model&, const std::vector<int32_t>& tokens, const text::Tokenizer* tokenizer)> on_loaded;
  // A problem that does not stop the probe (a tokenizer.json that cannot be read, with ids given).
  std::function<void(const std::string&)> on_warning;
};

struct ResidualProbeJob {
  HfPromptSpec prompt;
  std::string out;           // the output directory; empty: nothing is written
  bool overwrite = false;    // replace residual.csv already in out
  bool save_hidden = false;  // also write every layer's hidden states
  bool plot = true;          // residual.{gp,png,svg}
  std::function<void(const probe::ResidualLayerStats&)> on_layer;  // after each layer, e.g. for progress
};

struct ResidualProbeJobResult {
  std::string model_type;
  std::vector<int32_t> tokens;
  probe::ResidualProbeResult result;
  std::vector<std::string> written;  // file names in out, in the order written
  std::optional<std::string> plot_problem;  // why the figure was not drawn (no gnuplot)
};

// Throws Error naming the problem: no prompt or both forms, no tokenizer.json for text, an empty prompt, a model
// that cannot be loaded, a residual.csv already in out without overwrite (checked before the model is loaded).
ResidualProbeJobResult residual_probe_job(const ResidualProbeJob& job);

struct LogitsProbeJob {
  HfPromptSpec prompt;
  int top = 10;
  std::function<void(int layer)> on_layer;
};

struct LogitsProbeJobResult {
  std::vector<int32_t> tokens;
  std::shared_ptr<const text::Tokenizer> tokenizer;  // the model's, when it has one that loads (to show tokens)
  std::vector<probe::TokenProbability> top;
};

LogitsProbeJobResult logits_probe_job(const LogitsProbeJob& job);

}  // namespace blocklab::jobs
