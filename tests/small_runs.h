#pragma once
// What the training tests share: a small copy-task run that learns in a few hundred steps, and the losses
// of its first steps at a given thread count.
#include <string>
#include <vector>

#include "model/model.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "util/threads.h"

namespace blocklab::testing {

// 2 blocks of width 32, 2 heads, vocab 8, copy length 8, batch 16, 300 steps at lr 3e-3, one thread.
inline RunConfig small_copy_run(NormPlacement placement, Precision precision = Precision::Fp32,
                                const std::string& block = "seed") {
  RunConfig c;
  set_config_value(c, "block", block);
  c.model.norm_placement = placement;
  c.model.layers = 2;
  c.model.width = 32;
  c.model.heads = 2;
  if (block == "qwen3") c.model.kv_heads = 1;
  c.model.vocab = 8;
  c.copy_len = 8;
  c.batch = 16;
  c.steps = 300;
  c.lr = 3e-3;
  c.threads = 1;
  c.model.precision = precision;
  resolve(c);
  return c;
}

// The losses of the first `steps` steps with `threads` threads; the parameters after them in *params.
inline std::vector<double> step_losses(const RunConfig& c, int steps, int threads, std::vector<float>* params = nullptr) {
  set_num_threads(threads);
  Trainer t(c);
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) out.push_back(t.step().loss);
  if (params != nullptr) params->assign(t.model().params().begin(), t.model().params().end());
  set_num_threads(0);
  return out;
}

}  // namespace blocklab::testing
