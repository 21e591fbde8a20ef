#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "io/checksum.h"
#include "util/error.h"

namespace blocklab {

TaskStream make_task_stream(const RunConfig& config, uint64_t seed, std::shared_ptr<const TokenIds> tokens) {
  if (!config.is_text()) return TaskStream(CopyTask(config.model.vocab, config.copy_len, seed, config.task == "reverse"));
  if (!tokens) tokens = tokenize_text_file(config.data, TextTokenizer::from_key(config.tokenizer));
  for (int32_t id : tokens->ids())
    if (id < 0 || id >= config.model.vocab)
      throw Error(config.data + ": token id " + std::to_string(id) + " does not fit the vocab " +
                  std::to_string(config.model.vocab));
  const TextSplit split = split_tokens(tokens->size(), config.val_fraction, config.model.seq_len, config.data);
  return TaskStream(TextTask(std::move(tokens), split, config.model.seq_len, seed));
}

Trainer::Trainer(const RunConfig& config, ShardExchange* exchange, std::shared_ptr<const TokenIds> tokens)
    : config_(config),
      exchange_(exchange),
      model_(config.model),
      acts_(model_.make_activations(config.batch / config.micro_shards, config.model.seq_len)),
      optimizer_(make_optimizer<float>(config.optimizer, model_.params().size(), hidden_matrices(model_.table()),
                                       config.lr)),
      task_(make_task_stream(config, data_seed(config.seed), std::move(tokens))),
      schedule_(config.make_schedule()) {
  model_.init_weights(config.seed);
  const int ranks = exchange != nullptr ? exchange->size() : 1;
  if (config.micro_shards > 1 || ranks > 1) {
    // Each node of the tree carries a shard's gradient and, in its last float, the shard's loss.
    const size_t n = model_.grads().size() + 1;
    reducer_.emplace(config.micro_shards, ranks, exchange != nullptr ? exchange->rank() : 0, n);
    shard_values_.assign(n, 0.0f);
    sum_.assign(n, 0.0f);
  }
}

double Trainer::sharded_forward_backward() {
  const int rows = shard_batch(), T = config_.model.seq_len, M = config_.micro_shards;
  const size_t P = model_.grads().size();
  reducer_->begin();
  for (int k = 0; k < reducer_->shard_count(); ++k) {
    // shard s = rows s*rows .. (s+1)*rows - 1 of the step's batch; it draws nothing of its own, so its data
    // depends on (seed, step, s) only
    const size_t offset = static_cast<size_t>(reducer_->first_shard() + k) * rows * T;
    const float loss = model_.forward_backward(acts_, batch_.inputs.data() + offset, batch_.targets.data() + offset,
                                               batch_.loss_mask.data() + offset);
    std::copy(model_.grads().begin(), model_.grads().end(), shard_values_.begin());
    shard_values_[P] = loss;
    reducer_->add(shard_values_);
  }
  reducer_->finish(sum_, exchange_);
  // Every shard has the same number of loss positions (the copy task's n per sequence, the text task's T), so the batch's
  // mean loss and its gradient are the mean over shards.
  const float scale = 1.0f / static_cast<float>(M);
  std::span<float> g = model_.grads();
  for (size_t i = 0; i < P; ++i) g[i] = sum_[i] * scale;
  return static_cast<double>(sum_[P] * scale);
}

StepResult Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  StepResult r;
  r.step = steps_done_ + 1;
  have_params_before_ = false;
  task_.next(batch_, config_.batch);
  if (reducer_) {
    r.loss = sharded_forward_backward();
  } else {  // one shard, one process: the plain step
    r.loss = model_.forward_backward(acts_, batch_.inputs.data(), batch_.targets.data(), batch_.loss_mask.data());
  }
  if (std::find(inject_steps_.begin(), inject_steps_.end(), r.step) != inject_steps_.end())
    model_.grads()[inject_offset_] = std::numeric_limits<float>::quiet_NaN();
  r.grad_norm = model_.grad_norm();
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    r.nonfinite = true;
    r.lr = schedule_.at(r.step);
    ++steps_done_;
    ++skipped_steps_;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  r.lr = schedule_.at(r.step);
  if (update_probed(config_, r.step)) {  // the update probe measures this update: keep the weights it starts from
    params_before_.assign(model_.params().begin(), model_.params().end());
    have_params_before_ = true;
  }
  if (config_.probe_every > 0) {
    // the residual probe reads each block's (clipped) gradient after the step: keep it (the same update)
    clip_to_norm<float>(model_.grads(), r.grad_norm, config_.clip_grad_norm);
    optimizer_->step(model_.params(), model_.grads(), r.lr);
  } else {
    // clipping folded into the update, the gradients cleared in the same pass for the next backward, and, where
    // the bf16 products read them so, the new weights rounded to bf16 beside them
    const double scale = clip_scale(r.grad_norm, config_.clip_grad_norm);
    const std::span<uint16_t> rounded =
        optimizer_->writes_rounded_params() ? model_.rounded_params_to_write() : std::span<uint16_t>{};
    if (optimizer_->step_and_zero_grads(model_.params(), model_.grads(), r.lr, scale, rounded))
      model_.rounded_params_were_written();
    model_.grads_were_zeroed();
  }
  model_.normalize_weights();  // the sphere stream: unit weight vectors after every update (a no-op otherwise)
  ++steps_done_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

bool Trainer::update_probed(const RunConfig& config, int step) {
  return config.update_probe_every > 0 && step >= 1 && (step % config.update_probe_every == 0 || step == config.steps);
}

double Trainer::validation_loss() {
  const TextTask* text = task_.text();
  if (text == nullptr) throw Error("validation_loss: only the text task holds out a validation split");
  const int rows = shard_batch();
  const size_t windows = text->validation_windows();
  // Each chunk's loss is the mean over its real windows' positions (padding rows are masked out); every window
  // has T positions, so the mean over all windows weighs each chunk by its number of real windows.
  double sum = 0;
  for (size_t first = 0; first < windows; first += rows) {
    text->validation_batch(eval_batch_, first, rows);
    const size_t real = std::min<size_t>(rows, windows - first);
    const double loss = model_.forward(acts_, eval_batch_.inputs.data(), eval_batch_.targets.data(),
                                       eval_batch_.loss_mask.data());
    sum += loss * static_cast<double>(real);
  }
  return sum / static_cast<double>(windows);
}

std::string Trainer::first_nonfinite_grad() const {
  const Model<float>& model = model_;
  for (const ParamSpec& p : model.table().specs()) {
    const auto g = model.grads().subspan(p.offset, p.numel);
    if (std::any_of(g.begin(), g.end(), [](float x) { return !std::isfinite(x); })) return p.name;
  }
  return {};
}

io::TrainingState Trainer::checkpoint_state() {
  io::TrainingState s;
  for (const ParamSpec& p : model_.table().specs()) s.layout.push_back({p.name, p.shape, p.offset, p.numel});
  s.params = model_.params();
  for (const auto& [name, values] : optimizer_->state()) s.optimizer_state.push_back({name, values});
  s.step = steps_done_;
  s.optimizer_steps = optimizer_->steps_taken();
  s.skipped_steps = skipped_steps_;
  s.data_rng = task_.rng().state();
  s.data_batches_drawn = static_cast<int64_t>(task_.batches_drawn());
  // What the run computes, not where it ran: without out (resume takes the directory it reads from) and
  // threads (results do not depend on them), so that the same run in another directory, with another thread
  // count or on another number of ranks writes byte-identical checkpoints.
  nlohmann::json config = to_json(config_);
  config.erase("out");
  config.erase("threads");
  s.config_json = config.dump();
  if (const TextTask* text = task_.text()) {
    const TokenFileHeader& h = text->tokens().header();
    s.data_ids = std::to_string(h.count) + " token ids, xxh3_64 " + io::checksum_hex(h.ids_checksum);
  }
  return s;
}

void Trainer::load_checkpoint(const std::filesystem::path& checkpoint) {
  io::TrainingState s = checkpoint_state();
  io::read_checkpoint(checkpoint, s);  // fills the arenas in place only once everything is checked
  if (s.step > std::numeric_limits<int>::max()) throw Error(checkpoint.string() + ": step out of range");
  steps_done_ = static_cast<int>(s.step);
  skipped_steps_ = s.skipped_steps;
  optimizer_->set_steps_taken(s.optimizer_steps);
  Rng rng;
  rng.set_state(s.data_rng);
  task_.set_rng(rng);
  task_.set_batches_drawn(static_cast<uint64_t>(s.data_batches_drawn));
}

void Trainer::inject_nonfinite(std::vector<int> steps, const std::string& tensor) {
  inject_offset_ = model_.table().at(tensor).offset;
  inject_steps_ = std::move(steps);
}

}  // namespace blocklab
