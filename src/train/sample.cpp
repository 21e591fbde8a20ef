#include "train/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "io/safetensors.h"
#include "train/run.h"
#include "util/error.h"
#include "util/parse_list.h"

namespace blocklab {

namespace fs = std::filesystem;

namespace {

// Copies every parameter of the model from a safetensors file of PyTorch-named tensors (a run's
// model.safetensors, a checkpoint's), after checking each one's presence and shape.
void load_weights(Model<float>& model, const io::SafetensorsReader& reader) {
  for (const ParamSpec& s : model.table().specs()) {
    const io::TensorEntry* e = reader.find(s.name);
    if (e == nullptr) throw Error(reader.path() + ": no tensor '" + s.name + "' (the weights do not fit the run's config)");
    if (e->shape != s.shape) throw Error(reader.path() + ": tensor '" + s.name + "' has another shape than the config's");
  }
  for (const ParamSpec& s : model.table().specs()) reader.read(reader.at(s.name), model.param(s.name));
}

int step_of(const io::SafetensorsReader& reader, int fallback) {
  const auto it = reader.metadata().find("step");
  if (it == reader.metadata().end()) return fallback;
  try {
    return std::stoi(it->second);
  } catch (const std::exception&) {
    throw Error(reader.path() + ": metadata step is not a number: '" + it->second + "'");
  }
}

// The run's context length as resolve() derives it (config.json records the keys, not this).
void derive_context(RunConfig& config) {
  config.model.context_len = config.model.cross_attention && config.is_sequence_task() ? config.copy_len : 0;
}

}  // namespace

void check_sample_options(const SampleOptions& o, int vocab) {
  if (o.tokens < 1) throw Error("tokens must be at least 1, got " + std::to_string(o.tokens));
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    throw Error("temperature must be a finite number >= 0 (0: greedy), got " + std::to_string(o.temperature));
  if (o.top_k < 0 || o.top_k > vocab)
    throw Error("top_k must be in 0.." + std::to_string(vocab) + " (0: every token; the vocab is " +
                std::to_string(vocab) + "), got " + std::to_string(o.top_k));
}

RunModel load_run_model(const fs::path& run_dir) {
  const std::string dir = run_dir.string();
  if (!fs::is_directory(run_dir)) throw Error(dir + ": no such run directory");
  const fs::path config_path = run_dir / "config.json";
  const fs::path model_path = run_dir / "model.safetensors";
  std::vector<std::string> notes;

  // The final weights, when they verify.
  std::optional<io::SafetensorsReader> final_model;
  std::optional<RunConfig> final_config;
  int final_step = -1;
  if (fs::exists(model_path)) {
    try {
      if (!fs::exists(config_path)) throw Error(config_path.string() + ": missing (the run's config)");
      RunConfig config = read_config_json(config_path.string());
      io::SafetensorsReader reader(model_path.string());
      reader.verify_checksums();
      final_step = step_of(reader, config.steps);
      final_model.emplace(std::move(reader));
      final_config = std::move(config);
    } catch (const Error& e) {
      notes.push_back(std::string("passed over ") + e.what());
    }
  }
  // The newest checkpoint that verifies, when it is later than the final weights (a run resumed and stopped).
  std::optional<ResumePoint> checkpoint;
  if (fs::exists(run_dir / "checkpoints")) {
    try {
      ResumePoint p = find_resume_point(dir);
      for (const SkippedCheckpoint& s : p.skipped) notes.push_back("passed over " + s.path.string() + ": " + s.reason);
      if (p.step > final_step) checkpoint = std::move(p);
    } catch (const Error& e) {
      if (!final_model) notes.push_back(e.what());
    }
  }
  if (!final_model && !checkpoint) {
    std::string why;
    for (const std::string& n : notes) why += "; " + n;
    throw Error(dir + ": no weights to sample from: no model.safetensors and no checkpoint that verifies (a run "
                "writes model.safetensors when it finishes, unless trained with --no-weights)" +
                why);
  }
  RunConfig config = checkpoint ? checkpoint->config : *final_config;
  derive_context(config);
  RunModel run{config, {}, 0, Model<float>(config.model), std::nullopt, std::move(notes)};
  if (checkpoint) {
    const io::SafetensorsReader reader((checkpoint->checkpoint / "model.safetensors").string());
    load_weights(run.model, reader);
    run.weights = checkpoint->checkpoint / "model.safetensors";
    run.step = checkpoint->step;
  } else {
    load_weights(run.model, *final_model);
    run.weights = model_path;
    run.step = final_step;
  }
  if (config.is_text()) {
    if (config.tokenizer == "bytes") {
      run.tokenizer = TextTokenizer::bytes();
    } else {
      const fs::path copy = run_dir / "tokenizer.json";
      if (!fs::exists(copy))
        throw Error(copy.string() + ": missing: the run was trained with a tokenizer.json, which it keeps here");
      run.tokenizer = TextTokenizer::load(copy);
    }
    if (run.tokenizer->vocab_size() > config.model.vocab)
      throw Error(dir + ": the tokenizer's ids do not fit the model's vocab " + std::to_string(config.model.vocab));
  }
  return run;
}

int32_t choose_token(std::span<const float> logits, double temperature, int top_k, Rng& rng) {
  const int V = static_cast<int>(logits.size());
  if (V == 0) throw Error("choose_token: no logits");
  if (temperature == 0) return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // The candidates: every id, or the top_k largest logits (ties: the lower id first), in that order.
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  const int k = top_k > 0 ? std::min(top_k, V) : V;
  auto larger = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (k < V) {
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), larger);
    ids.resize(k);
  }
  double top = -INFINITY;
  for (int32_t id : ids) top = std::max(top, static_cast<double>(logits[id]));
  std::vector<double> weights(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i) total += weights[i] = std::exp((logits[ids[i]] - top) / temperature);
  const double u = rng.uniform() * total;
  double cumulative = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    cumulative += weights[i];
    if (u < cumulative) return ids[i];
  }
  return ids.back();  // u within rounding of the total
}

NextTokenLogits::NextTokenLogits(const Model<float>& model)
    : model_(model), acts_(model.make_activations(1, model.config().seq_len)), window_(model.config().seq_len, 0),
      logits_(model.config().vocab) {}

std::span<const float> NextTokenLogits::operator()(std::span<const int32_t> tokens) {
  const size_t T = window_.size();
  if (tokens.empty()) throw Error("next-token logits: no tokens");
  const size_t n = std::min(T, tokens.size());
  std::copy(tokens.end() - n, tokens.end(), window_.begin());
  std::fill(window_.begin() + n, window_.end(), 0);
  model_.forward_logits(acts_, window_.data(), static_cast<int>(n - 1), logits_);
  return logits_;
}

void check_prompt(const ModelConfig& m, std::span<const int32_t> prompt) {
  if (prompt.empty()) throw Error("the prompt has no tokens");
  for (int32_t id : prompt)
    if (id < 0 || id >= m.vocab)
      throw Error("prompt token id " + std::to_string(id) + " is outside the model's vocab 0.." + std::to_string(m.vocab - 1));
  if (m.context_len > 0 && prompt.size() < static_cast<size_t>(m.context_len))
    throw Error("this model cross-attends to its first " + std::to_string(m.context_len) +
                " tokens: give a prompt of at least that many");
}

std::vector<int32_t> generate(const Model<float>& model, std::span<const int32_t> prompt, const SampleOptions& options,
                              const std::function<void(int32_t)>& on_token) {
  check_sample_options(options, model.config().vocab);
  check_prompt(model.config(), prompt);
  NextTokenLogits logits(model);
  Rng rng(options.seed);
  std::vector<int32_t> text(prompt.begin(), prompt.end()), added;
  for (int i = 0; i < options.tokens; ++i) {
    const int32_t id = choose_token(logits(text), options.temperature, options.top_k, rng);
    text.push_back(id);
    added.push_back(id);
    if (on_token) on_token(id);
  }
  return added;
}

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& what) {
  return parse_list<int32_t>(text, what, 0);
}

}  // namespace blocklab
