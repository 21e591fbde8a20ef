#include "kernels/embedding.h"

#include "util/profiler.h"

namespace blocklab::kernels {

template <typename T>
void token_embedding_forward(T* out, const int32_t* tokens, const T* table, int N, int C) {
  BLOCKLAB_PROFILE("token_embedding_forward");
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* src = table + static_cast<long>(tokens[n]) * C;
    T* dst = out + static_cast<long>(n) * C;
    for (int c = 0; c < C; ++c) dst[c] = src[c];
  }
}

template <typename T>
void token_embedding_backward(T* dtable, const T* dout, const int32_t* tokens, int N, int C) {
  BLOCKLAB_PROFILE("token_embedding_backward");
  // forward: out[n] = table[tokens[n]]. Several rows may hit the same token, so rows are added in order.
  for (int n = 0; n < N; ++n) {
    T* dst = dtable + static_cast<long>(tokens[n]) * C;
    const T* src = dout + static_cast<long>(n) * C;
    for (int c = 0; c < C; ++c) dst[c] += src[c];
  }
}

template <typename T>
void position_embedding_forward(T* out, const T* table, int B, int Tn, int C) {
  BLOCKLAB_PROFILE("position_embedding_forward");
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      T* dst = out + (static_cast<long>(b) * Tn + t) * C;
      const T* src = table + static_cast<long>(t) * C;
      for (int c = 0; c < C; ++c) dst[c] += src[c];
    }
}

template <typename T>
void position_embedding_backward(T* dtable, const T* dout, int B, int Tn, int C) {
  BLOCKLAB_PROFILE("position_embedding_backward");
  // forward: out[b,t] += table[t]; positions are independent, the batch sum runs in order.
#pragma omp parallel for schedule(static)
  for (int t = 0; t < Tn; ++t) {
    T* dst = dtable + static_cast<long>(t) * C;
    for (int b = 0; b < B; ++b) {
      const T* src = dout + (static_cast<long>(b) * Tn + t) * C;
      for (int c = 0; c < C; ++c) dst[c] += src[c];
    }
  }
}

#define BLOCKLAB_INSTANTIATE(T)                                                            \
  template void token_embedding_forward<T>(T*, const int32_t*, const T*, int, int);        \
  template void token_embedding_backward<T>(T*, const T*, const int32_t*, int, int);       \
  template void position_embedding_forward<T>(T*, const T*, int, int, int);                \
  template void position_embedding_backward<T>(T*, const T*, int, int, int);
BLOCKLAB_INSTANTIATE(float)
BLOCKLAB_INSTANTIATE(double)

}  // namespace blocklab::kernels
