#pragma once
// One training run in memory: model, optimizer, data stream and schedule, advanced one step at a time.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "data/copy_task.h"
#include "data/task_stream.h"
#include "data/text_data.h"
#include "io/checkpoint.h"
#include "model/model.h"
#include "train/optimizer.h"
#include "train/run_config.h"
#include "train/shard_reduce.h"

namespace blocklab {

namespace io {
class EventFileWriter;
}

struct StepResult {
  int step = 0;            // 1-based index of the update just taken
  double loss = 0;         // mean loss of this step's batch, before the update
  double lr = 0;           // learning rate used for the update
  double grad_norm = 0;    // global gradient norm before clipping
  double seconds = 0;      // wall time of the step
  bool nonfinite = false;  // the loss or the gradient norm was not finite: no update was applied
  // Text task: the validation loss after this step's update, at the steps the run evaluates (eval_every, last).
  std::optional<double> val_loss;
};

// The run's data stream with its own seed: the copy or reverse task, or windows of the text task's training
// split. tokens: the text task's ids (null: the text file is tokenized in memory here).
TaskStream make_task_stream(const RunConfig& config, uint64_t seed, std::shared_ptr<const TokenIds> tokens = nullptr);

class Trainer {
 public:
  // config must have been resolve()d. Initialises the weights from config.seed.
  // With config.micro_shards M > 1, a step splits its batch into M shards and sums their gradients in the
  // fixed tree of train/shard_reduce.h. exchange (may be null: one process) spreads the shards over its
  // ranks; every rank draws the same batches and ends each step with the same weights, bit for bit, as
  // one process with the same M. Throws Error when the number of ranks does not divide M.
  // tokens: the text task's ids (null: the text file is tokenized in memory); unused by the other tasks.
  explicit Trainer(const RunConfig& config, ShardExchange* exchange = nullptr,
                   std::shared_ptr<const TokenIds> tokens = nullptr);

  // One step: next batch, forward, backward, gradient norm, clipping, update. The update clears the gradients
  // as it reads them, for the next backward, unless config.probe_every > 0: then model().grads() holds the step's
  // clipped gradient afterwards, as the residual probe reads it (the weights are the same either way). When the
  // loss or the
  // gradient norm is not finite the update is skipped (weights, moments and the optimizer's step count
  // stay as they were), the result says nonfinite, and skipped_steps() counts it; stopping the run
  // instead (on_nonfinite = abort) is the caller's decision.
  StepResult step();
  int steps_done() const { return steps_done_; }
  int64_t skipped_steps() const { return skipped_steps_; }

  // The first parameter (in table order) whose gradient from the last step holds a non-finite value;
  // empty when all are finite.
  std::string first_nonfinite_grad() const;

  // Whether the update of step `step` (1-based) is probed (config.update_probe_every > 0: every N-th step and the
  // run's last; probe/update_probe.h). Before such an update the trainer keeps a copy of the weights.
  static bool update_probed(const RunConfig& config, int step);
  // The weights just before the last step's update when that step is probed and its update was applied (not
  // skipped for a non-finite loss or gradient); empty otherwise.
  std::span<const float> params_before_update() const {
    return have_params_before_ ? std::span<const float>(params_before_) : std::span<const float>();
  }

  // Views of everything a checkpoint holds; the arenas are this trainer's own memory.
  io::TrainingState checkpoint_state();
  // Restores weights, moments, counters and the data stream from a checkpoint of a run with the same
  // model. Throws Error (changing nothing) when the checkpoint is malformed or does not fit the model.
  void load_checkpoint(const std::filesystem::path& checkpoint);

  // Fault injection for tests: at each of these (1-based) steps, one gradient value of `tensor` is set
  // to NaN after the backward pass. Throws Error for an unknown tensor.
  void inject_nonfinite(std::vector<int> steps, const std::string& tensor);

  const RunConfig& config() const { return config_; }
  Model<float>& model() { return model_; }
  // The activations of the last step's forward. A step runs its backward before it returns, so between
  // steps they are free for another forward (e.g. a probe) on the same batch shape.
  Activations<float>& activations() { return acts_; }
  Optimizer<float>& optimizer() { return *optimizer_; }
  // The batch of the last step (its loss mask says which positions the head ran for).
  const Batch& last_batch() const { return batch_; }
  TaskStream& task() { return task_; }

  // Text task: the mean next-token loss over the fixed validation windows (text_data.h), computed with this
  // trainer's activations in chunks of shard_batch() windows; the same on every rank and for every thread
  // count. Throws Error for the other tasks.
  double validation_loss();

  // The run's TensorBoard event file while train_run / resume_run writes one (null otherwise), for probes
  // that add their own scalars (probe/residual_probe.h); the trainer itself never writes to it.
  io::EventFileWriter* event_writer() const { return event_writer_; }
  void set_event_writer(io::EventFileWriter* writer) { event_writer_ = writer; }

  // Sequences per forward pass: batch / micro_shards.
  int shard_batch() const { return config_.batch / config_.micro_shards; }
  ShardExchange* exchange() const { return exchange_; }
  // Gradient bytes this rank sent and received in the last step.
  size_t bytes_sent() const { return reducer_ ? reducer_->bytes_sent() : 0; }
  size_t bytes_received() const { return reducer_ ? reducer_->bytes_received() : 0; }

  // The data stream's seed, derived from the run seed so that init and data never share a stream.
  static uint64_t data_seed(uint64_t seed) { return seed ^ 0x5eed'da7a'5eed'da7aULL; }

 private:
  // The micro-shard step: this rank's shards' forward and backward, then the tree sum; returns the loss.
  double sharded_forward_backward();

  RunConfig config_;
  ShardExchange* exchange_ = nullptr;
  Model<float> model_;
  Activations<float> acts_;
  std::unique_ptr<Optimizer<float>> optimizer_;  // config.optimizer.kind's
  TaskStream task_;
  Batch batch_, eval_batch_;

  Schedule schedule_;
  int steps_done_ = 0;
  int64_t skipped_steps_ = 0;
  std::vector<int> inject_steps_;
  long inject_offset_ = -1;
  std::optional<ShardReducer> reducer_;  // micro_shards > 1 or several ranks
  std::vector<float> shard_values_, sum_;  // a shard's gradient + its loss; the tree's sum
  io::EventFileWriter* event_writer_ = nullptr;
  std::vector<float> params_before_;  // update_probed steps: the weights before the update
  bool have_params_before_ = false;
};

}  // namespace blocklab
