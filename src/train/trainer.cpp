#include "train/trainer.h"

#include <chrono>

namespace blocklab {

Trainer::Trainer(const RunConfig& config)
    : config_(config),
      model_(config.model, config.batch, 2 * config.copy_len - 1),
      optimizer_(config.adam, model_.params().size()),
      task_(config.model.vocab, config.copy_len, data_seed(config.seed)),
      schedule_(config.make_schedule()) {
  model_.init_weights(config.seed);
}

StepResult Trainer::step() {
  const auto start = std::chrono::steady_clock::now();
  StepResult r;
  r.step = steps_done_ + 1;
  task_.next(batch_, config_.batch);
  r.loss = model_.forward(batch_.inputs.data(), batch_.targets.data(), batch_.loss_mask.data());
  model_.backward();
  r.grad_norm = global_norm<float>(model_.grads());
  clip_to_norm<float>(model_.grads(), r.grad_norm, config_.clip_grad_norm);
  r.lr = schedule_.at(r.step);
  optimizer_.step(model_.params(), model_.grads(), r.lr);
  ++steps_done_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace blocklab
