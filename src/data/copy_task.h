#pragma once
// The copy task: n uniform random tokens from a vocabulary of V, then the same n tokens again.
// The reverse task: the same n tokens, then those n in reverse order.
// The model reads the first 2n-1 tokens; position t predicts token t+1; the loss counts only the n
// predictions of the second half (positions n-1 .. 2n-2). Learning nothing gives ln V.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "util/rng.h"

namespace blocklab {

struct Batch {
  int batch = 0, seq_len = 0;
  std::vector<int32_t> inputs;   // (B, T)
  std::vector<int32_t> targets;  // (B, T)
  std::vector<uint8_t> loss_mask;  // (B, T), 1 where the loss counts

  // Sets the shape and sizes the three arrays (no-ops after the first batch of this size).
  void resize(int batch_size, int seq) {
    const size_t size = static_cast<size_t>(batch_size) * seq;
    batch = batch_size;
    seq_len = seq;
    inputs.resize(size);
    targets.resize(size);
    loss_mask.resize(size);
  }
};

class CopyTask {
 public:
  // Throws Error for vocab < 2 or copy_len < 1. reverse: the second half is the first one reversed.
  CopyTask(int vocab, int copy_len, uint64_t seed, bool reverse = false);

  int vocab() const { return vocab_; }
  int copy_len() const { return copy_len_; }
  bool reverse() const { return reverse_; }
  int seq_len() const { return 2 * copy_len_ - 1; }

  // Fills the next batch of the deterministic stream into `batch`, which the caller keeps from step to
  // step: its buffers are sized on the first call (and when batch_size changes), so drawing a batch of
  // the same size never allocates.
  void next(Batch& batch, int batch_size);

  // The stream's position, for checkpoints: the generator state and how many batches were drawn.
  const Rng& rng() const { return rng_; }
  void set_rng(const Rng& rng) { rng_ = rng; }
  uint64_t batches_drawn() const { return batches_drawn_; }
  void set_batches_drawn(uint64_t n) { batches_drawn_ = n; }

 private:
  int vocab_, copy_len_;
  bool reverse_;
  Rng rng_;
  uint64_t batches_drawn_ = 0;
};

}  // namespace blocklab
