#include "probe/stream_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace blocklab::probe {

template <typename T>
StreamNorms stream_norms(const T* h, int B, int Tn, int C) {
  std::vector<double> mean(static_cast<std::size_t>(C));
  double vector_norms = 0, token_norms = 0;
  for (int b = 0; b < B; ++b) {
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int t = 0; t < Tn; ++t) {
      const T* x = h + (static_cast<long>(b) * Tn + t) * C;
      double sq = 0;
      for (int c = 0; c < C; ++c) {
        mean[c] += x[c];
        sq += static_cast<double>(x[c]) * x[c];
      }
      token_norms += std::sqrt(sq);
    }
    double sq = 0;
    for (int c = 0; c < C; ++c) sq += (mean[c] / Tn) * (mean[c] / Tn);
    vector_norms += std::sqrt(sq);
  }
  return {vector_norms / B, token_norms / (static_cast<double>(B) * Tn)};
}

template <typename T>
StreamPeak stream_peak(const T* h, long rows, int C) {
  StreamPeak p;
  for (long n = 0; n < rows; ++n) {
    const T* x = h + n * C;
    for (int c = 0; c < C; ++c) {
      const double a = std::fabs(static_cast<double>(x[c]));
      if (std::isnan(a)) return {std::numeric_limits<double>::quiet_NaN(), c};
      if (p.channel < 0 || a > p.max_abs) p = {a, c};
    }
  }
  return p;
}

template <typename T>
double sink_share(const T* att, int B, int H, int Tq, int Tk) {
  if (Tq < 2) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (long bh = 0; bh < static_cast<long>(B) * H; ++bh)
    for (int t = 1; t < Tq; ++t) sum += att[(bh * Tq + t) * Tk];
  return sum / (static_cast<double>(B) * H * (Tq - 1));
}

template StreamNorms stream_norms(const float*, int, int, int);
template StreamNorms stream_norms(const double*, int, int, int);
template StreamPeak stream_peak(const float*, long, int);
template StreamPeak stream_peak(const double*, long, int);
template double sink_share(const float*, int, int, int, int);
template double sink_share(const double*, int, int, int, int);

}  // namespace blocklab::probe
