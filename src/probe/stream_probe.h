#pragma once
// Residual-stream statistics during training (config key stream_every, `blocklab train --stream-every N`):
// before the first step, every N steps and after the last step the model runs forward on one fixed probe
// batch (the residual probe's: its own data stream, probe/residual_probe.h), and for every stream index
//   block 0 = the embeddings, block l = the output of block l (1..L)
// appends a row to OUT/stream.csv:
//   step,block,rms,max_abs,max_channel,sink
//     rms          (1/(B T)) sum_{b,t} ||h_{b,t}|| / sqrt(C)  (the mean token norm of probe/residual_norms.h
//                  over sqrt(C): 1 for a stream of unit-RMS rows, whatever the width)
//     max_abs      max over b, t, c of |h_{b,t,c}|, and max_channel its channel c (probe/stream_stats.h)
//     sink         block l >= 1: the share of block l's self-attention mass on the first token, the mean over
//                  heads, sequences and query positions t >= 1 of softmax probability on key 0
//                  (probe/stream_stats.h); empty for block 0 and for a block without self-attention
// The probe only runs forward between updates into the trainer's activations (the next step recomputes
// them) and draws from its own data stream, so recording never changes the run's numbers (tests show
// metrics.csv and the final weights bit-identical with and without). A resumed run keeps the rows of the
// steps before it and goes on from its first step.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "data/copy_task.h"
#include "model/model.h"
#include "train/run.h"
#include "train/trainer.h"

namespace blocklab::probe {

struct StreamBlockStats {
  int block = 0;  // stream index: 0 = embeddings, l = after block l
  double rms = 0, max_abs = 0;
  int max_channel = -1;
  std::optional<double> sink;  // blocks with self-attention
};

// The statistics of every stream index of the forward that filled acts (L+1 entries).
template <typename T>
std::vector<StreamBlockStats> stream_stats(const Activations<T>& acts, const ModelConfig& config);

// The columns of stream.csv, and its rows as read back (for the depth map and the figure).
const std::vector<std::string>& stream_columns();
struct StreamRow {
  int step = 0;
  StreamBlockStats stats;
};
// Throws Error naming the file when it cannot be read or its header is not stream_columns().
std::vector<StreamRow> read_stream_csv(const std::string& path);

// A run's stream at its first and its last recorded step: the RMS per stream index (0..L), and at the last step
// the largest |h| over the blocks and the largest sink share. Throws Error when rows is empty.
struct StreamSummary {
  int first_step = 0, last_step = 0;
  std::vector<double> rms_first, rms_last;  // by block index 0..L
  double max_abs_last = 0;
  std::optional<double> sink_max_last;
};
StreamSummary summarize_stream(const std::vector<StreamRow>& rows);

class StreamRecorder {
 public:
  // Throws Error when every < 1.
  StreamRecorder(std::string path, int every);
  ~StreamRecorder();
  StreamRecorder(const StreamRecorder&) = delete;
  StreamRecorder& operator=(const StreamRecorder&) = delete;

  // Records when trainer.steps_done() is 0, a multiple of every, or the run's last step (on the writing rank
  // only). The first call opens the file, keeping the rows of the steps before trainer.steps_done().
  void operator()(Trainer& trainer);

 private:
  void open(int first_step, bool records_first);
  std::string path_;
  int every_;
  std::FILE* file_ = nullptr;
  Batch batch_;
  bool have_batch_ = false;
};

// hook, and with config.stream_every > 0 also a StreamRecorder writing config.out/stream.csv (owned by the
// returned hook). Every front end that trains (blocklab train, sweep, depthmap, the Python train()) wraps
// its hook with it.
TrainerHook with_stream_recorder(const RunConfig& config, TrainerHook hook);

}  // namespace blocklab::probe
