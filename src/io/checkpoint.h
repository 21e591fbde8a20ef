#pragma once
// Checkpoints of a training run, one directory per step:
//
//   RUN/checkpoints/step_0000120/
//     model.safetensors   the parameters, F32, PyTorch names (tok_emb.weight, blocks.0.attn.qkv.weight, ...);
//                         __metadata__: format "pt", step
//     state.safetensors   the optimizer's state arrays, each as <array>.<param> (F32, the parameter's shape):
//                         adam.m.<param>, adam.v.<param> for adam and adamw (the only optimizers of the first
//                         checkpoints, which therefore still load as they are), radam.m/v, sgd.momentum (none
//                         when momentum is 0), lion.m, muon.momentum + adam.m/v (train/optimizer.h);
//                         step, adam.step (the optimizer's update count, whatever the optimizer), skipped_steps,
//                         data.batches_drawn (I64 scalars);
//                         rng.data (the data stream's xoshiro256** state, 4 words stored as I64 bit patterns);
//                         __metadata__: format "blocklab-checkpoint", format_version, step, config (resolved JSON),
//                         and for the text task data ("<count> token ids, xxh3_64 <hex>": the ids it trains on)
//     COMPLETE            written last: "step N", then per file "<name> <bytes> xxh3_64:<16 hex digits>"
//
// Both safetensors files carry the XXH3-64 of every tensor in their __metadata__ (io/safetensors.h), and
// COMPLETE records each file's size and whole-file checksum, so any changed byte (header, padding or data),
// a truncated or a missing file is found before a checkpoint is used (verify_checkpoint).
//
// A checkpoint is written into a hidden temporary directory beside the others (every file fsynced),
// which is then renamed into place and the parent fsynced. A directory named step_* therefore exists only
// once it is complete, and a process killed at any moment leaves the previous checkpoints untouched (at
// worst a stale temporary directory, which the next write removes). Old checkpoints are renamed to a
// hidden name before they are deleted, so a half-deleted one is never mistaken for a checkpoint.
#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace blocklab::io {

inline constexpr int kCheckpointFormatVersion = 1;

// One parameter tensor: its name, shape and element range in each of the arenas below.
struct CheckpointTensor {
  std::string name;
  std::vector<int64_t> shape;
  long offset = 0, numel = 0;
};

// One state array of the optimizer, as long as the parameter arena: "adam.m" is stored as adam.m.<param>.
struct StateArray {
  std::string name;
  std::span<float> values;
};

// Everything a checkpoint holds. The arenas are views of the trainer's own memory: written from on
// save, filled in place on load.
struct TrainingState {
  std::vector<CheckpointTensor> layout;
  std::span<float> params;                  // as long as the layout
  std::vector<StateArray> optimizer_state;  // the optimizer's arrays, in its order; each as long as params
  int64_t step = 0;                         // training steps done (updates + skipped steps)
  int64_t optimizer_steps = 0;              // updates the optimizer has taken (Adam's bias-correction t)
  int64_t skipped_steps = 0;                // steps skipped for a non-finite loss or gradient
  std::array<uint64_t, 4> data_rng{};       // the data stream's generator state
  int64_t data_batches_drawn = 0;
  std::string config_json;                  // the resolved run config
  // Text task: "<count> token ids, xxh3_64 <16 hex digits>", the ids the run trains on; empty otherwise.
  // read_checkpoint refuses a checkpoint whose recorded ids differ from the ones given here.
  std::string data_ids;
};

struct CheckpointRef {
  int64_t step = 0;
  std::filesystem::path path;
  bool complete = true;  // holds a COMPLETE marker
};

std::filesystem::path checkpoints_dir(const std::filesystem::path& run_dir);  // RUN/checkpoints
std::string checkpoint_name(int64_t step);                                    // step_0000120

// The complete checkpoints of a run, oldest first (empty when there are none).
std::vector<CheckpointRef> list_checkpoints(const std::filesystem::path& run_dir);
// Every step_* directory, oldest first, also those without COMPLETE (which the writer never leaves behind:
// such a directory was damaged afterwards).
std::vector<CheckpointRef> list_checkpoint_dirs(const std::filesystem::path& run_dir);

// Writes RUN/checkpoints/step_N (N = state.step), replacing one already there, then deletes all but the
// newest `keep` checkpoints (keep 0: delete none) and stale temporary directories. Returns its path.
// Throws Error on I/O failure; the checkpoints already there are then left as they were.
std::filesystem::path write_checkpoint(const std::filesystem::path& run_dir, const TrainingState& state, int keep);

// The resolved config JSON stored in a checkpoint. Throws Error when the checkpoint is not readable.
std::string read_checkpoint_config(const std::filesystem::path& checkpoint);

// Checks that a checkpoint is what was written: COMPLETE is present and well formed, both files are there
// with the recorded size and checksum; on a mismatch, the error names the damaged tensor (from the
// tensor checksums) or the header. Throws Error at the first problem. Returns notes on what could not be
// verified (checkpoints of an older blocklab, whose COMPLETE records no checksums: then the tensor
// checksums, if any, are checked instead).
std::vector<std::string> verify_checkpoint(const std::filesystem::path& checkpoint);

// Loads a checkpoint into `state`, whose layout and arena sizes describe the model it must match.
// The checkpoint is verified (verify_checkpoint) and every file, tensor name, dtype, shape and counter is
// checked before anything is copied, and so are the token ids a text run trains on (state.data_ids, when the
// checkpoint records them); a mismatch, a damaged or malformed file throws Error naming the file and the
// problem, and leaves `state` untouched. Returns verify_checkpoint's notes.
std::vector<std::string> read_checkpoint(const std::filesystem::path& checkpoint, TrainingState& state);

}  // namespace blocklab::io
