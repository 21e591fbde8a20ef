#pragma once
// Residual-stream probes during training: every `every` steps (and before the first and after the
// last step) the model runs forward on one fixed probe batch, and the stream norms after each block
// are appended to a CSV:
//   step,layer,mean_vector_norm,mean_token_norm      (layer 0 = embeddings, l = after block l)
// The probe batch comes from its own data stream, and a probe only runs forward between updates (the
// next step recomputes every activation), so probing never changes a run's numbers.
#include <cstdio>
#include <string>

#include "data/copy_task.h"
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

 private:
  void open(int first_step);
  std::string path_;
  int every_;
  std::FILE* file_ = nullptr;
  Batch batch_;
  bool have_batch_ = false;
};

}  // namespace blocklab::probe
