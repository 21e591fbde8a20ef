#include "probe/hf_probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/memory.h"

namespace blocklab::probe {

namespace fs = std::filesystem;

ResidualProbeResult probe_residual(const hf::Model& model, std::span<const int32_t> tokens,
                                   const ResidualProbeOptions& options) {
  const blocklab::ModelConfig& c = model.config().model;
  const int T = static_cast<int>(tokens.size());
  const double hidden_bytes = options.save_hidden ? 4.0 * (c.layers + 1) * T * c.width : 0.0;
  const double forward_bytes = model.forward_bytes(T, hf::LogitsFor::None);
  require_memory("probe residual", forward_bytes + hidden_bytes,
                 "activations and work space " + format_bytes(forward_bytes) +
                     (options.save_hidden ? ", saved hidden states " + format_bytes(hidden_bytes) : "") +
                     "; the mapped weights aside",
                 options.save_hidden ? "; use fewer tokens or drop --save-hidden" : "; use fewer tokens");
  ResidualProbe probe(T, c.width);
  ResidualProbeResult result;
  if (options.save_hidden) result.hidden.reserve(static_cast<std::size_t>(c.layers + 1) * T * c.width);
  hf::ForwardOptions opt;
  opt.logits = hf::LogitsFor::None;
  opt.stream_weights = true;
  opt.on_attention = [&](int layer, std::span<const float> p) { probe.observe_attention(layer, p, c.heads); };
  opt.on_hidden = [&](int layer, std::span<const float> h) {
    probe.observe(layer, h);
    if (options.save_hidden) result.hidden.insert(result.hidden.end(), h.begin(), h.end());
    if (options.on_layer) options.on_layer(probe.layers().back());
  };
  const auto start = std::chrono::steady_clock::now();
  model.forward(tokens, opt);
  result.forward_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.layers = probe.layers();
  return result;
}

WrittenFiles write_residual_probe(const fs::path& dir, const hf::Model& model, const ResidualProbeRun& run,
                                  const ResidualProbeResult& result) {
  const blocklab::ModelConfig& c = model.config().model;
  const int T = static_cast<int>(run.tokens.size());
  WrittenFiles written;
  write_residual_csv(dir / "residual.csv", result.layers);
  nlohmann::ordered_json summary;
  summary["model"] = run.model_dir;
  summary["model_type"] = model.config().model_type;
  summary["layers"] = c.layers;
  summary["hidden_size"] = c.width;
  summary["parameters"] = model.parameter_count();
  summary["weight_dtype"] = model.dtype_summary();
  if (run.text) summary["text"] = *run.text;
  summary["tokens"] = run.tokens;
  summary["forward_seconds"] = result.forward_seconds;
  summary["total_seconds"] = run.total_seconds;
  summary["csv_columns"] = residual_csv_columns();
  io::write_file_atomic((dir / "residual.json").string(), summary.dump(2) + "\n");
  written.names = {"residual.csv", "residual.json"};
  if (!result.hidden.empty()) {
    const std::vector<int64_t> tokens(run.tokens.begin(), run.tokens.end());
    io::write_safetensors((dir / "hidden_states.safetensors").string(),
                          {io::tensor_view("hidden_states", {c.layers + 1, T, c.width}, std::span<const float>(result.hidden)),
                           io::tensor_view("tokens", {T}, std::span<const int64_t>(tokens))});
    written.names.push_back("hidden_states.safetensors");
  }
  return written;
}

std::vector<TokenProbability> top_tokens(std::span<const float> z, int k) {
  if (k < 1) throw Error("top: need at least 1 token, got " + std::to_string(k));
  if (z.empty()) throw Error("top: no logits");
  // Softmax in double.
  const double zmax = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (float v : z) sum += std::exp(v - zmax);
  std::vector<int32_t> order(z.size());
  std::iota(order.begin(), order.end(), 0);
  k = std::min<int>(k, static_cast<int>(z.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return z[a] != z[b] ? z[a] > z[b] : a < b; });
  std::vector<TokenProbability> top;
  for (int i = 0; i < k; ++i) {
    const int32_t id = order[i];
    top.push_back({id, std::exp(z[id] - zmax) / sum, z[id]});
  }
  return top;
}

std::vector<TokenProbability> probe_logits(const hf::Model& model, std::span<const int32_t> tokens,
                                           const LogitsProbeOptions& options) {
  if (options.top < 1) throw Error("top: need at least 1 token, got " + std::to_string(options.top));
  hf::ForwardOptions opt;
  opt.logits = hf::LogitsFor::Last;
  opt.stream_weights = true;
  const double bytes = model.forward_bytes(static_cast<int>(tokens.size()), hf::LogitsFor::Last);
  require_memory("probe logits", bytes, "activations and work space; the mapped weights aside", "; use fewer tokens");
  opt.on_hidden = [&](int layer, std::span<const float>) {
    if (options.on_layer) options.on_layer(layer);
  };
  const hf::ForwardResult r = model.forward(tokens, opt);
  return top_tokens(r.logits, options.top);
}

}  // namespace blocklab::probe
