#pragma once
// Causal multi-head self-attention core (the part between the qkv projection and the output projection).
// qkv (B,T,3C): per token [q | k | v], each C wide; head h owns columns h*hs .. (h+1)*hs of q, k and v,
// hs = C/H. Position t attends to positions 0..t with softmax(q.k / sqrt(hs)).
#include <cstddef>

namespace blocklab::kernels {

// Elements of the scratch buffer that attention_forward/backward need: (B,H) x (T*T + hs*T).
size_t attention_scratch_size(int B, int Tn, int C, int H);

// -> out (B,T,C) (heads concatenated in order), att (B,H,T,T) softmax probabilities (zero above the
// diagonal), both overwritten. scratch: attention_scratch_size elements, overwritten.
template <typename T>
void attention_forward(T* out, T* att, T* scratch, const T* qkv, int B, int Tn, int C, int H);

// -> dqkv (B,T,3C), overwritten, from dout (B,T,C). scratch: attention_scratch_size elements, overwritten.
template <typename T>
void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* att, int B, int Tn, int C,
                        int H);

}  // namespace blocklab::kernels
