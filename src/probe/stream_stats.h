#pragma once
// Statistics of a forward pass that the stream probes report (probe/stream_probe.h and probe/residual_norms.h
// for a training run, probe/residual_layers.h for a Hugging Face model), written once for all of them:
//
//   stream_norms(h, B, T, C)  over B sequences of T token vectors h[b][t] (C wide):
//                               mean_vector_norm  (1/B) sum_b || (1/T) sum_t h[b][t] ||   (the mean token vector)
//                               mean_token_norm   (1/(B T)) sum_{b,t} || h[b][t] ||        (the mean token norm)
//                             summed in double, in index order.
//   stream_peak(h, rows, C)   the largest |h[n][c]| over rows n < rows and channels c < C, and its channel c.
//                             Ties keep the first in row-major order; a NaN wins (the first one) and is reported
//                             as max_abs = NaN, so a diverged stream never looks tame.
//   sink_share(att, B, H, Tq, Tk)
//                             the attention sink: the share of attention mass on the first key,
//                               (1 / (B H (Tq-1))) sum_{b<B} sum_{h<H} sum_{1<=t<Tq} att[b][h][t][0]
//                             over the softmax probabilities att (B,H,Tq,Tk) of a causal self-attention. Query 0
//                             is left out: it can only attend to key 0 (its share is 1 whatever the weights).
//                             A uniform causal attention gives (1/(Tq-1)) sum_{t=1}^{Tq-1} 1/(t+1).
//                             NaN when Tq < 2. Summed in double, in index order.
#include <cstdint>

namespace blocklab::probe {

struct StreamNorms {
  double mean_vector_norm = 0;
  double mean_token_norm = 0;
};

template <typename T>
StreamNorms stream_norms(const T* h, int B, int Tn, int C);

struct StreamPeak {
  double max_abs = 0;
  int channel = -1;  // -1 when there are no values
};

template <typename T>
StreamPeak stream_peak(const T* h, long rows, int C);

template <typename T>
double sink_share(const T* att, int B, int H, int Tq, int Tk);

}  // namespace blocklab::probe
