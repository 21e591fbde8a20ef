#include "data/copy_task.h"

#include "util/error.h"

namespace blocklab {

CopyTask::CopyTask(int vocab, int copy_len, uint64_t seed, bool reverse)
    : vocab_(vocab), copy_len_(copy_len), reverse_(reverse), rng_(seed) {
  if (vocab < 2) throw Error("copy task: vocab must be at least 2, got " + std::to_string(vocab));
  if (copy_len < 1) throw Error("copy task: copy_len must be positive, got " + std::to_string(copy_len));
}

void CopyTask::next(Batch& batch, int batch_size) {
  const int n = copy_len_, T = seq_len();
  batch.resize(batch_size, T);
  // Sequence s (2n tokens): s[i] random for i < n, s[n + i] = s[i] (copy) or s[n - 1 - i] (reverse).
  // inputs = s[0 .. 2n-2], targets = s[1 .. 2n-1], both written in place.
  for (int b = 0; b < batch_size; ++b) {
    int32_t* in = batch.inputs.data() + static_cast<size_t>(b) * T;
    int32_t* target = batch.targets.data() + static_cast<size_t>(b) * T;
    uint8_t* mask = batch.loss_mask.data() + static_cast<size_t>(b) * T;
    for (int i = 0; i < n; ++i) in[i] = static_cast<int32_t>(rng_.below(vocab_));
    // the first-half index that s[j] (j >= n) repeats
    auto source = [&](int j) { return reverse_ ? 2 * n - 1 - j : j - n; };
    for (int i = 0; i < n - 1; ++i) in[n + i] = in[source(n + i)];
    for (int t = 0; t < T; ++t) {
      target[t] = t + 1 < n ? in[t + 1] : in[source(t + 1)];  // s[t + 1]
      mask[t] = t >= n - 1 ? 1 : 0;
    }
  }
  ++batches_drawn_;
}

}  // namespace blocklab
