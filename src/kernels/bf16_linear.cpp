#include "kernels/bf16_linear.h"

#include <algorithm>

#include "kernels/fast_math.h"
#include "util/bit_cast.h"
#include "util/openmp.h"

namespace blocklab::kernels {

namespace {

// Rows [o0, o1) of the output for all N inputs. The dot products use a vector reduction (fixed order
// for a given instruction set, independent of the thread count).
BLOCKLAB_ALWAYS_INLINE void bf16_rows(float* out, const float* inp, const uint16_t* weight, int N, int C, int OC,
                                     int o0, int o1, float* row) {
  for (int o = o0; o < o1; ++o) {
    const uint16_t* w = weight + static_cast<long>(o) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) row[c] = bit_cast<float>(static_cast<uint32_t>(w[c]) << 16);
    for (int n = 0; n < N; ++n) {
      const float* x = inp + static_cast<long>(n) * C;
      float acc = 0.f;
#pragma omp simd reduction(+ : acc)
      for (int c = 0; c < C; ++c) acc += x[c] * row[c];
      out[static_cast<long>(n) * OC + o] = acc;
    }
  }
}

}  // namespace

void bf16_linear_forward(float* out, const float* inp, const uint16_t* weight, int N, int C, int OC, float* scratch) {
#pragma omp parallel if (static_cast<long>(OC) * C > 65536)
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    const long per = (static_cast<long>(OC) + threads - 1) / threads;
    const int o0 = static_cast<int>(std::min<long>(OC, per * id)), o1 = static_cast<int>(std::min<long>(OC, per * (id + 1)));
    on_isa([&](auto) { bf16_rows(out, inp, weight, N, C, OC, o0, o1, scratch + static_cast<long>(id) * C); });
  }
}

}  // namespace blocklab::kernels
