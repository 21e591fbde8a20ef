#pragma once
// Thread control. blocklab's kernels parallelise with OpenMP over independent rows/heads only, and
// every reduction runs in a fixed order, so results are bit-identical for any thread count.
namespace blocklab {

// Sets the thread count for OpenMP regions and for OpenBLAS. n <= 0 means "all cores".
void set_num_threads(int n);
int num_threads();
int hardware_threads();

}  // namespace blocklab
