#pragma once
// The training data of a run, whichever its task (copy, reverse, text): one deterministic stream of
// batches whose position (generator state, batches drawn) a checkpoint records.
#include <cstdint>
#include <memory>
#include <optional>

#include "data/copy_task.h"
#include "data/text_data.h"

namespace blocklab {

class TaskStream {
 public:
  explicit TaskStream(CopyTask task) : copy_(std::move(task)) {}
  explicit TaskStream(TextTask task) : text_(std::move(task)) {}

  void next(Batch& batch, int batch_size) { copy_ ? copy_->next(batch, batch_size) : text_->next(batch, batch_size); }

  const Rng& rng() const { return copy_ ? copy_->rng() : text_->rng(); }
  void set_rng(const Rng& rng) { copy_ ? copy_->set_rng(rng) : text_->set_rng(rng); }
  uint64_t batches_drawn() const { return copy_ ? copy_->batches_drawn() : text_->batches_drawn(); }
  void set_batches_drawn(uint64_t n) { copy_ ? copy_->set_batches_drawn(n) : text_->set_batches_drawn(n); }

  // The text task (validation windows, tokens); null for copy and reverse.
  const TextTask* text() const { return text_ ? &*text_ : nullptr; }

 private:
  std::optional<CopyTask> copy_;
  std::optional<TextTask> text_;
};

}  // namespace blocklab
