#pragma once
// Softmax cross-entropy over the positions selected by a mask (e.g. the copied half of a copy-task
// sequence). The loss is the mean over selected positions.
#include <cstdint>

namespace blocklab::kernels {

// logits (N,V), targets (N) in [0,V), mask (N) of 0/1 -> probs (N,V) (softmax of every row, saved for
// backward), losses (N) (-log p[target] where selected, 0 elsewhere). Returns the mean loss over the
// selected rows, summed in row order. The caller guarantees at least one selected row.
template <typename T>
T cross_entropy_forward(T* probs, T* losses, const T* logits, const int32_t* targets, const uint8_t* mask,
                        int N, int V);

// dlogits += (probs - onehot(target)) / count for the selected rows (d mean-loss / d logits).
template <typename T>
void cross_entropy_backward(T* dlogits, const T* probs, const int32_t* targets, const uint8_t* mask, int N,
                            int V);

}  // namespace blocklab::kernels
