#pragma once
// Everything a training run needs, as one flat set of named keys. The same key table drives the
// command-line flags (--norm-placement), TOML config files (norm_placement = "pre"), the resolved
// config.json a run writes, and sweep grids, so a key means the same thing everywhere.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace blocklab {

// What a step with a non-finite loss or gradient norm does: stop the run (abort), or leave weights,
// moments and the Adam step count untouched and go on with the next batch (skip).
enum class NonFinitePolicy { Abort, Skip };
std::string to_string(NonFinitePolicy);
NonFinitePolicy parse_nonfinite_policy(const std::string&);

struct RunConfig {
  RunConfig() { model.seq_len = 0; }  // 0: derived from the task by resolve()

  std::string task = "copy";  // copy, reverse or text
  ModelConfig model;
  // True once the vocab key was set (flag, TOML, JSON): the text task otherwise takes its tokenizer's size.
  bool vocab_given = false;
  int copy_len = 32;  // n: the model reads 2n-1 tokens
  std::string data;                 // text task: the UTF-8 text file
  std::string tokenizer = "bytes";  // text task: bytes, or the path of a Hugging Face tokenizer.json
  double val_fraction = 0.1;        // text task: the last fraction of the token ids is held out
  int eval_every = 100;             // text task: validation loss every N steps and at the last step
  int batch = 32;
  int steps = 1200;
  int micro_shards = 1;  // M: the batch splits into M equal shards; 1 = the plain step
  double lr = 1e-3;
  int warmup = 0;
  ScheduleKind schedule = ScheduleKind::Constant;
  double min_lr = 0.0;
  OptimizerOptions optimizer;
  double clip_grad_norm = 0.0;  // 0 disables clipping
  uint64_t seed = 0;            // model init and data stream
  int threads = 0;              // 0 = all cores
  int log_every = 0;            // 0 = about 20 lines per run when not on a terminal
  std::string out = "runs/copy";
  int checkpoint_every = 0;   // 0: checkpoints only when interrupted by SIGINT/SIGTERM
  int keep_checkpoints = 2;   // 0: keep all
  NonFinitePolicy on_nonfinite = NonFinitePolicy::Abort;
  bool tensorboard = true;  // OUT/events.out.tfevents.* beside metrics.csv (train/run.h)
  bool weights = true;      // OUT/model.safetensors, the final weights, at the end of the run (train/run.h)
  // Recorders that read the model while it trains; none changes the run's numbers (jobs/train_job.h runs them).
  int stream_every = 0;     // > 0: OUT/stream.csv, residual-stream statistics every N steps (probe/stream_probe.h)
  int probe_every = 0;      // > 0: OUT/residual.csv, residual-stream norms after each block (probe/residual_probe.h)
  int curvature_every = 0;  // > 0: OUT/curvature.csv, sharpness and its thresholds (probe/curvature_run.h)
  bool curvature_per_block = true;  // curvature.csv also holds each block's sharpness (the costliest part)
  int update_probe_every = 0;   // > 0: OUT/updates.csv, Adam's step-size spread, |dW|/|W| and the critical sharpness
                                // of every N-th update (probe/update_probe.h)
  int update_probe_passes = 8;  // the critical sharpness's line search: at most this many forward passes

  Schedule make_schedule() const { return Schedule{schedule, lr, warmup, steps, min_lr}; }
  bool is_text() const { return task == "text"; }
  // copy and reverse: n random tokens, then a function of them; the loss on the second half.
  bool is_sequence_task() const { return task == "copy" || task == "reverse"; }
};

// The text task's defaults: windows of this many tokens unless seq_len is given.
inline constexpr int kTextSeqLen = 128;

enum class KeyType { Int, Float, String, Bool };
// "int", "float", "str", "bool": the type as the Python package and the page name it.
const char* key_type_name(KeyType type);

struct ConfigKey {
  std::string name;  // snake_case; the flag is --name-with-dashes
  KeyType type;
  std::string help;
  std::function<void(RunConfig&, const std::string&)> set;  // from text, validated
  std::function<nlohmann::json(const RunConfig&)> get;
  // False for keys that say how or where a run executes (out, threads, logging, checkpoint cadence),
  // not what it computes: two configs that differ only in such keys give the same numbers.
  bool changes_results = true;
};

// The key that selects a block preset. Every config source (flags, TOML, JSON) applies it before its
// other keys, so that `--block qwen3 --kv-heads 2` means the qwen3 block with 2 kv heads.
inline constexpr const char* kBlockKey = "block";
// The entry of a config.json that holds derived constants (DeepNorm's a and b, T-Fixup's scale): written
// by to_json for the reader, skipped by apply_json.
inline constexpr const char* kDerivedKey = "derived";

const std::vector<ConfigKey>& config_keys();
const ConfigKey* find_config_key(const std::string& name);

// Sets one key from text ("24", "1e-3", "pre", "true"). Throws Error for an unknown key or a bad value.
void set_config_value(RunConfig& config, const std::string& key, const std::string& value);
// Sets several keys from text the way every front end does (CLI flags, Python keywords; TOML and JSON follow
// the same rule): the block preset first, since it sets the architecture keys, which the others then
// override; then the rest in the given order.
void set_config_values(RunConfig& config, const std::vector<std::pair<std::string, std::string>>& values);
// Whether this build reads TOML (toml++ is an optional part); without it the two below throw Error saying so.
bool have_toml();
// Applies a TOML file of top-level keys. Unknown keys, wrong types, tables: Error naming file and line.
void apply_toml_file(RunConfig& config, const std::string& path);
// The same for TOML text; source_name plays the role of the path in messages.
void apply_toml_text(RunConfig& config, std::string_view text, const std::string& source_name);
// Applies a JSON object of keys (e.g. a run's config.json). Unknown keys are errors.
void apply_json(RunConfig& config, const nlohmann::json& values);

// Fills derived values (seq_len from the task; for text also vocab from the tokenizer, and data and tokenizer
// made absolute paths) and checks every key; throws Error on the first problem. For the text task it reads
// the tokenizer (not the data).
void resolve(RunConfig& config);
nlohmann::json to_json(const RunConfig& config);
// The keys that change results (ConfigKey::changes_results), for comparing what two runs compute.
nlohmann::json results_json(const RunConfig& config);

}  // namespace blocklab
