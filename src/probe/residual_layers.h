#pragma once
// The residual-stream probe: how the norm of the residual stream h_l grows with depth l in a real model,
// next to the random-walk reference sqrt(l + 1) (a stream that starts at length 1 and gains one
// independent unit-length vector per block).
//
// Per layer l (0 = embeddings, l = output of block l), over the T prompt tokens:
//   mean_vector_norm  || (1/T) sum_t h_l[t] ||          (the source's "norm of the mean prompt-token vector")
//   mean_token_norm   (1/T) sum_t || h_l[t] ||      (both probe/stream_stats.h stream_norms, as in training runs)
//   relative_update   (1/T) sum_t || h_l[t] - h_{l-1}[t] || / || h_{l-1}[t] ||   (0 at l = 0)
// and the stream statistics that `blocklab train --stream-every N` records (probe/stream_probe.h), so that a
// trained toy stack and a real model read side by side:
//   rms               mean_token_norm / sqrt(C)
//   max_abs           max over t, c of |h_l[t][c]|, max_channel its channel c (probe/stream_stats.h)
//   sink              l >= 1: block l's attention-sink share, the mean over heads and query positions t >= 1 of
//                     the softmax probability on token 0 (probe/stream_stats.h); absent at l = 0 or when the
//                     probabilities were not observed (observe_attention)
// Sums run in double, in token order.
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace blocklab::probe {

struct ResidualLayerStats {
  int layer = 0;
  double mean_vector_norm = 0;
  double mean_token_norm = 0;
  double relative_update = 0;
  double rms = 0, max_abs = 0;
  int max_channel = -1;
  std::optional<double> sink;
};

class ResidualProbe {
 public:
  ResidualProbe(int tokens, int width) : tokens_(tokens), width_(width) {}
  // Feed h_l (tokens x width) for l = 0, 1, 2, ... in order.
  void observe(int layer, std::span<const float> hidden);
  // Block `layer`'s self-attention probabilities (heads x tokens x tokens), before observe(layer, ...).
  void observe_attention(int layer, std::span<const float> probabilities, int heads);
  const std::vector<ResidualLayerStats>& layers() const { return layers_; }

 private:
  int tokens_, width_;
  std::vector<float> previous_;
  std::optional<double> pending_sink_;
  int pending_sink_layer_ = -1;
  std::vector<ResidualLayerStats> layers_;
};

// layer,mean_vector_norm,mean_token_norm,sqrt_layer_plus_1,relative_update,rms,max_abs,max_channel,sink
// (9 significant digits; sink empty at layer 0).
const std::vector<std::string>& residual_csv_columns();
void write_residual_csv(const std::filesystem::path& path, const std::vector<ResidualLayerStats>& layers);

}  // namespace blocklab::probe
