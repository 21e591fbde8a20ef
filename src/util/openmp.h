#pragma once
// OpenMP's run-time functions, or, in a build without OpenMP (the browser's WebAssembly build, which runs on one
// thread), what they return on one thread: the stubs the OpenMP specification describes for a serial program.
// The `#pragma omp` directives need nothing: a compiler without OpenMP ignores them.
#if defined(_OPENMP)
#include <omp.h>
#else
inline int omp_get_max_threads() { return 1; }
inline int omp_get_num_threads() { return 1; }
inline int omp_get_thread_num() { return 0; }
inline int omp_in_parallel() { return 0; }
inline void omp_set_num_threads(int) {}
#endif
