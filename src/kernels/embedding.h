#pragma once
// Token and learned position embeddings.
#include <cstdint>

namespace blocklab::kernels {

// out (N,C) = table[tokens[n]], tokens (N) in [0,V), table (V,C). Overwrites out.
template <typename T>
void token_embedding_forward(T* out, const int32_t* tokens, const T* table, int N, int C);
// dtable (V,C) += scatter of dout (N,C) by token. Runs in row order (fixed summation order).
template <typename T>
void token_embedding_backward(T* dtable, const T* dout, const int32_t* tokens, int N, int C);

// out (B,T,C) += table[t] for every position t < T; table (>=T, C).
template <typename T>
void position_embedding_forward(T* out, const T* table, int B, int Tn, int C);
// dtable (T,C) += sum over batch of dout (B,T,C), batch order fixed.
template <typename T>
void position_embedding_backward(T* dtable, const T* dout, int B, int Tn, int C);

}  // namespace blocklab::kernels
