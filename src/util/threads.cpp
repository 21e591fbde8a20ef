#include "util/threads.h"

#if BLOCKLAB_HAVE_OPENBLAS
#include <cblas.h>
#endif
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "util/openmp.h"

namespace blocklab {

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void set_num_threads(int n) {
  if (n <= 0) n = hardware_threads();
  omp_set_num_threads(n);
#if BLOCKLAB_HAVE_OPENBLAS
  openblas_set_num_threads(n);
#endif
}

int num_threads() { return omp_get_max_threads(); }

void prefer_short_openmp_waits(char** argv) {
#if defined(_OPENMP)
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  ::setenv("GOMP_SPINCOUNT", "3000", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure
#else
  (void)argv;  // one thread: nothing waits
#endif
}

}  // namespace blocklab
