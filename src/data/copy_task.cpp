#include "data/copy_task.h"

#include "util/error.h"

namespace blocklab {

CopyTask::CopyTask(int vocab, int copy_len, uint64_t seed) : vocab_(vocab), copy_len_(copy_len), rng_(seed) {
  if (vocab < 2) throw Error("copy task: vocab must be at least 2, got " + std::to_string(vocab));
  if (copy_len < 1) throw Error("copy task: copy_len must be positive, got " + std::to_string(copy_len));
}

void CopyTask::next(Batch& batch, int batch_size) {
  const int n = copy_len_, T = seq_len();
  const size_t size = static_cast<size_t>(batch_size) * T;
  batch.batch = batch_size;
  batch.seq_len = T;
  batch.inputs.resize(size);
  batch.targets.resize(size);
  batch.loss_mask.resize(size);
  std::vector<int32_t> sequence(2 * n);
  for (int b = 0; b < batch_size; ++b) {
    for (int i = 0; i < n; ++i) {
      sequence[i] = static_cast<int32_t>(rng_.below(vocab_));
      sequence[n + i] = sequence[i];
    }
    for (int t = 0; t < T; ++t) {
      const size_t k = static_cast<size_t>(b) * T + t;
      batch.inputs[k] = sequence[t];
      batch.targets[k] = sequence[t + 1];
      batch.loss_mask[k] = t >= n - 1 ? 1 : 0;
    }
  }
  ++batches_drawn_;
}

}  // namespace blocklab
