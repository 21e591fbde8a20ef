#include "probe/residual_layers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "io/atomic_file.h"
#include "io/csv.h"
#include "probe/stream_stats.h"
#include "util/error.h"

namespace blocklab::probe {

void ResidualProbe::observe(int layer, std::span<const float> h) {
  const long TC = static_cast<long>(tokens_) * width_;
  if (static_cast<long>(h.size()) != TC)
    throw Error("residual probe: hidden state has " + std::to_string(h.size()) + " values, expected " +
                std::to_string(TC));
  if (layer != static_cast<int>(layers_.size()))
    throw Error("residual probe: layer " + std::to_string(layer) + " out of order");
  ResidualLayerStats s;
  s.layer = layer;
  const StreamNorms norms = stream_norms(h.data(), 1, tokens_, width_);
  s.mean_vector_norm = norms.mean_vector_norm;
  s.mean_token_norm = norms.mean_token_norm;
  double updates = 0;
  if (layer > 0)
    for (int t = 0; t < tokens_; ++t) {
      const float* x = h.data() + static_cast<long>(t) * width_;
      const float* p = previous_.data() + static_cast<long>(t) * width_;
      double dsq = 0, psq = 0;
      for (int c = 0; c < width_; ++c) {
        const double d = static_cast<double>(x[c]) - p[c];
        dsq += d * d;
        psq += static_cast<double>(p[c]) * p[c];
      }
      updates += psq > 0 ? std::sqrt(dsq / psq) : 0.0;
    }
  s.relative_update = updates / tokens_;
  s.rms = s.mean_token_norm / std::sqrt(static_cast<double>(width_));
  const StreamPeak peak = stream_peak(h.data(), tokens_, width_);
  s.max_abs = peak.max_abs;
  s.max_channel = peak.channel;
  if (pending_sink_layer_ == layer) s.sink = pending_sink_;
  pending_sink_.reset();
  pending_sink_layer_ = -1;
  layers_.push_back(s);
  previous_.assign(h.begin(), h.end());
}

void ResidualProbe::observe_attention(int layer, std::span<const float> p, int heads) {
  const long expected = static_cast<long>(heads) * tokens_ * tokens_;
  if (static_cast<long>(p.size()) != expected)
    throw Error("residual probe: attention probabilities have " + std::to_string(p.size()) + " values, expected " +
                std::to_string(expected));
  pending_sink_layer_ = layer;
  pending_sink_.reset();
  if (tokens_ >= 2) pending_sink_ = sink_share(p.data(), 1, heads, tokens_, tokens_);
}

const std::vector<std::string>& residual_csv_columns() {
  static const std::vector<std::string> names = {"layer",           "mean_vector_norm", "mean_token_norm",
                                                 "sqrt_layer_plus_1", "relative_update", "rms",
                                                 "max_abs",         "max_channel",      "sink"};
  return names;
}

void write_residual_csv(const std::filesystem::path& path, const std::vector<ResidualLayerStats>& layers) {
  io::CsvWriter csv(residual_csv_columns());
  for (const ResidualLayerStats& s : layers)
    csv.row({std::to_string(s.layer), io::csv_number(s.mean_vector_norm), io::csv_number(s.mean_token_norm),
             io::csv_number(std::sqrt(s.layer + 1.0)), io::csv_number(s.relative_update), io::csv_number(s.rms),
             io::csv_number(s.max_abs), std::to_string(s.max_channel), s.sink ? io::csv_number(*s.sink) : ""});
  io::write_file_atomic(path.string(), csv.text());
}

}  // namespace blocklab::probe
