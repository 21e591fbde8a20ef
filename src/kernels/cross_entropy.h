#pragma once
// Softmax cross-entropy over the positions selected by a mask (e.g. the copied half of a copy-task
// sequence). The loss is the mean over selected positions.
//
// Forward and backward are one pass: the loss's gradient with respect to the logits needs nothing that the
// forward does not already have (the softmax and the count of selected rows), so the forward writes it in place
// of the probabilities that a separate backward would read again. The (N, V) logits' gradient is then the only
// (N, V) array besides the logits, and the backward neither clears nor fills it.
#include <cstdint>

namespace blocklab::kernels {

// logits (N,V), targets (N) in [0,V), mask (N) of 0/1 ->
//   losses (N): -log softmax(z)[target] where selected, 0 elsewhere;
//   dlogits (N,V): d(mean loss)/d logits = (softmax(z) - onehot(target)) / count on selected rows, 0 elsewhere
//     (overwritten);
// returns the mean loss over the selected rows, summed in row order. The caller guarantees at least one selected
// row. In float the softmax's exponentials and sums are vectorised (kernels/fast_math.h's exp, sums in 16 lanes
// added pairwise, the same order at every level and thread count); in double they are libm's, summed in order.
template <typename T>
T cross_entropy_forward(T* dlogits, T* losses, const T* logits, const int32_t* targets, const uint8_t* mask, int N,
                        int V);

// The same for `rows` rows that all count, of a batch whose mean is taken over `count` rows in all (a chunk of the
// selected rows: model/model.h runs the head and the loss chunk by chunk): losses (rows) and dlogits (rows,V)
// = (softmax(z) - onehot(target)) / count. Each row's numbers are those cross_entropy_forward gives it. dlogits
// may be logits itself: the gradient then replaces the logits, with the same numbers.
template <typename T>
void cross_entropy_rows(T* dlogits, T* losses, const T* logits, const int32_t* targets, int rows, int V, int count);

}  // namespace blocklab::kernels
