#pragma once
// Linear layer with a BF16 weight read in place, for few input rows (a short prompt): each output row
// of the weight is widened to float once, into a per-thread row buffer, and dotted with every input
// row. The weight is read once, as 2 bytes per value, with one parallel region per call. Forward only.
#include <cstdint>

namespace blocklab::kernels {

// inp (N, C) float, weight (OC, C) as raw little-endian BF16 -> out (N, OC) = inp @ weight^T, overwritten.
// scratch: at least threads x C floats, threads = omp_get_max_threads().
void bf16_linear_forward(float* out, const float* inp, const uint16_t* weight, int N, int C, int OC, float* scratch);

}  // namespace blocklab::kernels
