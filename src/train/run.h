#pragma once
// A training run on disk: validates the config, prepares the output directory, trains, and writes
//   DIR/config.json   the fully resolved config (written before the first step)
//   DIR/metrics.csv   step,loss,lr,grad_norm,skipped  (one row per step, flushed as it goes; skipped
//                     counts the steps so far whose update was skipped for a non-finite value); the text
//                     task adds val_loss, filled at the steps that evaluate it (eval_every, the last)
//   DIR/tokens.bin    text task: the token ids of the data (data/text_data.h), memory-mapped while training
//   DIR/tokenizer.json text task with a tokenizer.json: a copy, so that the directory is self-contained
//   DIR/model.safetensors  the final weights (PyTorch names; metadata step; per-tensor checksums), written at
//                     the end unless weights = false (--no-weights)
//   DIR/summary.json  final/min loss and timing (written at the end)
//   DIR/events.out.tfevents.<seconds>.<host>  unless tensorboard = false: TensorBoard's event file (io/tfevents.h)
//                     with the scalars of metrics.csv per step (loss/train, loss/val, train/lr, train/grad_norm,
//                     train/skipped_steps, time/step_ms), the config as text, and what probes add (the residual
//                     probe: stream/*, grad_norm/block_NN). A resumed run cuts the earlier files after the
//                     checkpoint's step and writes a new file from the step after it: each step once in the dir.
//   DIR/checkpoints/  step_NNNNNNN/ every checkpoint_every steps, at the end, and on SIGINT/SIGTERM
//                     (see io/checkpoint.h); resume_run continues from the newest one bit-exactly.
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "train/run_config.h"
#include "train/trainer.h"

namespace blocklab {

struct RunSummary {
  int steps = 0;
  double first_loss = 0, final_loss = 0, min_loss = 0;
  int min_loss_step = 0;
  double seconds = 0;
  int64_t skipped_steps = 0;  // steps whose update was skipped (on_nonfinite = skip)
  int start_step = 0;         // 0 for a new run; the checkpoint's step for a resumed one
  // Text task: the last validation loss and the lowest, with their steps.
  std::optional<double> val_loss, min_val_loss;
  int val_loss_step = 0, min_val_loss_step = 0;
  // Text task: the unigram entropy (nats) of the training split: the loss of a model that knows each
  // token's frequency and nothing else. A loss below it means the model uses the context.
  std::optional<double> unigram_entropy;
  // Set when on_nonfinite = abort stopped the run: the step and the first non-finite gradient tensor.
  std::string nonfinite_error;
  // seconds covers only the steps run by this process (start_step + 1 .. steps); seconds_before the steps
  // 1 .. start_step, run by earlier processes, as the summary.json of the interruption that wrote the checkpoint
  // resumed from recorded it (< 0: not known, e.g. after a crash).
  double seconds_before = 0;
  double ms_per_step() const { return steps > start_step ? 1000.0 * seconds / (steps - start_step) : 0.0; }
  // The run's training time so far, over every process that ran it (only this process's where seconds_before
  // is unknown): summary.json's "seconds".
  double total_seconds() const { return seconds + (seconds_before > 0 ? seconds_before : 0.0); }
};

// Thrown by train_run / resume_run after SIGINT or SIGTERM: the step in progress was finished and a
// checkpoint, the metrics and summary.json were written. The CLI exits with 128 + signal.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int signal, int step, std::string checkpoint);
  int signal() const { return signal_; }
  int step() const { return step_; }
  const std::string& checkpoint() const { return checkpoint_; }

 private:
  int signal_, step_;
  std::string checkpoint_;
};

// DIR/config.json: the fully resolved config, to_json(config), pretty-printed; written atomically.
void write_config_json(const std::string& path, const RunConfig& config);
// Reads a config.json (a run's, or one that blocklab sweep wrote for its worker) over the defaults.
// Throws Error naming the file when it cannot be read, is not JSON, or holds an unknown key or a bad value.
RunConfig read_config_json(const std::string& path);

// Creates dir if needed. Throws Error when it cannot be created or written, or when it already holds a
// run (config.json or metrics.csv) and overwrite is false. Writes nothing else.
void prepare_run_dir(const std::string& dir, bool overwrite);
// The checks of prepare_run_dir alone (not a directory; a run there without overwrite); creates nothing.
void refuse_existing_run(const std::string& dir, bool overwrite);

using StepObserver = std::function<void(const StepResult&)>;
// Called with the trainer before the first step of this process and after every step, between
// updates (trainer.steps_done() says which); for probes that read the model, e.g. residual-stream
// norms. It may run forward passes: the next step recomputes every activation.
using TrainerHook = std::function<void(Trainer&)>;

// config is resolved and validated here, before anything is written. While it trains, SIGINT and
// SIGTERM make it finish the current step, write a checkpoint and throw Interrupted (a second signal
// kills at once). The environment variable BLOCKLAB_INJECT_NONFINITE=STEP[,STEP...][:TENSOR] poisons
// one gradient value of TENSOR (default: the last parameter) with NaN at those steps, for tests.
//
// Data-parallel (exchange not null, from an MPI job): every rank trains the same run (Trainer above);
// rank 0 alone writes the directory (config, metrics, summary, checkpoints), which is then the same,
// byte for byte, whatever the number of ranks. The ranks agree after every step whether a signal
// arrived, so that all of them stop after the same step; an error while preparing (e.g. rank 0 finds
// a run in the directory) stops every rank.
RunSummary train_run(RunConfig config, bool overwrite, const StepObserver& observer = {},
                     const TrainerHook& hook = {}, ShardExchange* exchange = nullptr);

// The newest checkpoint of a run directory that verifies (io::verify_checkpoint) and the config it was
// written with (out set to run_dir). Newer checkpoints that are damaged (a changed byte, a truncated or
// missing file, no COMPLETE marker) are passed over and listed in `skipped`. Throws Error when there is no
// checkpoint or none verifies; nothing on disk is changed.
struct SkippedCheckpoint {
  std::filesystem::path path;
  std::string reason;
};
struct ResumePoint {
  std::filesystem::path checkpoint;
  int step = 0;
  RunConfig config;
  std::vector<SkippedCheckpoint> skipped;  // newest first
  std::vector<std::string> notes;          // what could not be verified (io::verify_checkpoint)
};
ResumePoint find_resume_point(const std::string& run_dir);

// The metrics.csv columns of a run with this config.
std::vector<std::string> metric_columns(const RunConfig& config);

// The text task's token ids for a run in run_dir (rank 0, which writes the directory): with reuse, the
// run's tokens.bin when its header names the same data (size and checksum) and tokenizer; otherwise the data
// is tokenized into tokens.bin afresh (and tokenizer.json copied beside it). Throws Error naming the file when
// the data is missing, empty, not UTF-8, or (reuse) has changed since tokens.bin was written.
std::shared_ptr<const TokenIds> prepare_run_tokens(const RunConfig& config, bool reuse);

// The final weights, DIR/model.safetensors (metadata: format pt, step).
void write_final_model(const std::filesystem::path& path, Trainer& trainer);

// Keys a resumed run may change; every other key must keep the checkpoint's value.
const std::vector<std::string>& keys_changeable_on_resume();
// Throws Error naming the first key (other than keys_changeable_on_resume) whose value differs, or when
// steps is below the checkpoint's step. Both configs resolved.
void check_resume_config(const ResumePoint& from, const RunConfig& requested);

// Continues the run in from.config.out from the checkpoint: weights, moments, counters and the data
// stream are restored, metrics.csv keeps the rows up to the checkpoint's step and goes on from there,
// config.json is rewritten with `config` (which may extend steps). Steps from.step+1 .. config.steps give
// bit-identical numbers to a run that never stopped. The damaged checkpoints in from.skipped are first
// renamed to step_NNNNNNN.damaged (kept for inspection; no longer taken for checkpoints or pruned).
// Checkpoints do not depend on the number of ranks: a run may continue with another one.
RunSummary resume_run(RunConfig config, const ResumePoint& from, const StepObserver& observer = {},
                      const TrainerHook& hook = {}, ShardExchange* exchange = nullptr);

}  // namespace blocklab
