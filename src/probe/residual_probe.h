#pragma once
// Residual-stream probes during training: every `every` steps (and before the first and after the
// last step) the model runs forward on one fixed probe batch, and the stream norms after each block
// are appended to a CSV:
//   step,layer,mean_vector_norm,mean_token_norm      (layer 0 = embeddings, l = after block l)
// The probe batch comes from its own data stream, and a probe only runs forward between updates (the
// next step recomputes every activation), so probing never changes a run's numbers. When the run writes a
// TensorBoard event file (Trainer::event_writer), each probe also adds there the same norms
// (stream/mean_vector_norm/layer_LL, stream/mean_token_norm/layer_LL) and, after a step, the gradient norm of
// every block (grad_norm/block_BB: over the block's parameters, of the gradient that step's update used, i.e.
// after clipping).
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "data/copy_task.h"
#include "probe/residual_norms.h"
#include "train/trainer.h"

namespace blocklab::probe {

class ResidualProbeWriter {
 public:
  // Throws Error when every < 1.
  ResidualProbeWriter(std::string path, int every);
  ~ResidualProbeWriter();
  ResidualProbeWriter(const ResidualProbeWriter&) = delete;
  ResidualProbeWriter& operator=(const ResidualProbeWriter&) = delete;

  // Probes when trainer.steps_done() is 0, a multiple of every, or the run's last step. The first call
  // opens the file: at step 0 it starts a new file; later (a resumed run) it keeps the rows of earlier
  // steps and appends.
  void operator()(Trainer& trainer);

  static uint64_t probe_seed(uint64_t seed) { return seed ^ 0x9b0b'e5ee'd0f0'0d5aULL; }
  // What a probe adds to the event file: the norms, and after a step the per-block gradient norms.
  static std::vector<std::pair<std::string, double>> tensorboard_scalars(Trainer& trainer, const ResidualNorms& norms);

 private:
  void open(int first_step);
  std::string path_;
  int every_;
  std::FILE* file_ = nullptr;
  Batch batch_;
  bool have_batch_ = false;
};

}  // namespace blocklab::probe
