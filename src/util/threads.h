#pragma once
// Thread control. blocklab's kernels parallelise with OpenMP over independent rows/heads only, and
// every reduction runs in a fixed order, so results are bit-identical for any thread count.
namespace blocklab {

// Sets the thread count for OpenMP regions and for OpenBLAS. n <= 0 means "all cores".
void set_num_threads(int n);
int num_threads();
int hardware_threads();

// OpenMP threads that wait by spinning (libgomp's default: up to ~3 ms) make every parallel region wait
// for the slowest core: on a 2-core machine shared with other work, a 2-thread training step measured 7x
// slower than with passive waiting (8.7 s vs 1.2 s), and two test programs running side by side, each with
// two threads, turned a 0.1 s gradient check into 33 s. Purely passive waiting (sleep at once) costs a
// wake-up per parallel region instead: ~12% of a 2-thread step on an idle machine (470 vs 415 ms). A short
// spin (GOMP_SPINCOUNT 3000, tens of microseconds) bridges the gaps between the regions of a step and still
// gives the core away soon when another program wants it (busy machine: 830 vs 790 ms).
// libgomp reads both variables when it loads, so when the user has set neither, this sets
// OMP_WAIT_POLICY=passive and GOMP_SPINCOUNT=3000 and restarts the program once (execv of /proc/self/exe
// with argv; on failure it returns and the program runs on with the default policy). Call it first thing in
// main(). Results do not depend on it.
void prefer_short_openmp_waits(char** argv);

}  // namespace blocklab
