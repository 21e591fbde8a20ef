#pragma once
// `blocklab export RUN_DIR --out HF_DIR`: a trained run's weights as a model directory in one of the
// formats of hf/export.h. This file reads the run (its checkpoints, the config the weights were written with,
// summary.json); hf/export.h knows only the model and its weights.
//
// Weights come from the run's final weights (RUN_DIR/model.safetensors, which every finished run writes unless
// trained with --no-weights) or a complete checkpoint (io/checkpoint.h), whichever holds the later step.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hf/export.h"

namespace blocklab {

struct ExportOptions {
  std::filesystem::path checkpoint;    // empty: the run's final weights or its newest complete checkpoint
  hf::ExportFormat format = hf::ExportFormat::Auto;
  bool force = false;                  // replace a non-empty HF_DIR
};

struct ExportResult {
  hf::ExportFormat format = hf::ExportFormat::Auto;
  std::string reason;                  // where the format came from, e.g. "block = qwen3"
  std::filesystem::path checkpoint;    // the checkpoint directory or final model file the weights came from
  int64_t step = 0;                    // its step
  int64_t run_steps = -1;              // steps the run trained (summary.json), -1 when unknown
  std::filesystem::path directory;     // HF_DIR as written (normalised: no trailing slash)
  std::vector<std::string> files;      // written into it, in order
  std::size_t tensors = 0;
  int64_t parameters = 0;              // elements written
  // With the blocklab format: the Hugging Face formats that could express the model all the same
  // (e.g. a Pre-LN seed run as gpt2), for --format.
  std::vector<hf::ExportFormat> also_expressible;
};

// Exports run_dir's weights (its final model.safetensors or newest checkpoint, whichever is later; or
// options.checkpoint: a checkpoint directory, or the name of one in run_dir/checkpoints) to `out`. Throws Error, leaving `out` as it was, when the run directory or its
// checkpoint is missing or malformed, the format cannot express the run's architecture, `out` exists and
// is not empty (without force), or `out` overlaps the run directory.
ExportResult export_run(const std::filesystem::path& run_dir, const std::filesystem::path& out,
                        const ExportOptions& options = {});

}  // namespace blocklab
