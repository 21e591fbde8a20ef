#pragma once
// Export of a trained run as a Hugging Face model directory:
//
//   format    from                  HF_DIR holds
//   qwen3     block = qwen3         config.json (Qwen3ForCausalLM) + model.safetensors under Qwen3's names
//   gpt2      block = gpt2          config.json (GPT2LMHeadModel)  + model.safetensors under GPT-2's names
//   blocklab  block = seed or sd    the run's resolved config.json + its (or the checkpoint's) model.safetensors
//                                   (blocklab's PyTorch names), for architectures transformers has no class for
//
// The qwen3 and gpt2 formats write each parameter under the Hugging Face name and layout that hf/names.h
// gives it (the llama and gpt2 name schemes, the same rows hf::Model reads a checkpoint by): e.g. a gated MLP's
// fc1 becomes mlp.up_proj (its value rows) and mlp.gate_proj (its gate rows), and every GPT-2 linear weight is
// written transposed, as Conv1D stores it. The output head is written only when untied.
//
// This file knows models and weights only: a trained run's directory and checkpoints are read by
// train/export_run.h, which calls write_model_directory. Everything is F32.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"

namespace blocklab::hf {

enum class ExportFormat { Auto, Qwen3, GPT2, Blocklab };

const char* export_format_name(ExportFormat);  // "auto", "qwen3", "gpt2", "blocklab"
// From the names above; Error listing them otherwise.
ExportFormat parse_export_format(const std::string& name);

// The format a run exports to when none is asked for: qwen3 and gpt2 for those presets (config key
// `block`), blocklab's own for seed and sd.
ExportFormat default_export_format(const blocklab::ModelConfig& config);

// Throws Error naming the first architecture key whose value `format` cannot express, e.g.
//   "cannot export as Hugging Face qwen3 (block = qwen3): mlp is gelu; Qwen3ForCausalLM needs swiglu"
// `reason` says where the format came from ("block = qwen3", "--format gpt2"). Blocklab accepts any model.
void check_exportable(const blocklab::ModelConfig& config, ExportFormat format, const std::string& reason);

// config.json for the qwen3 or gpt2 format, with the fields transformers writes for that class.
nlohmann::json hf_config_json(const blocklab::ModelConfig& config, ExportFormat format);

struct ExportedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Our parameters (looked up by name through `param`, each as long as its ParameterTable entry) under the
// format's names and layouts, in the order they are written. The model must pass check_exportable.
using ParamLookup = std::function<std::span<const float>(const std::string& name)>;
std::vector<ExportedTensor> export_tensors(const blocklab::ModelConfig& config, ExportFormat format,
                                           const ParamLookup& param);

// The Hugging Face formats other than blocklab's own that can express `config` (each with no problem for
// check_exportable), e.g. gpt2 for a Pre-LN seed model.
std::vector<ExportFormat> also_expressible(const blocklab::ModelConfig& config);

// `out` as the directory to write (normalised: "dir/" -> "dir"). Throws Error when it names no directory
// ("", ".", ".."), exists as a file, or exists and is not empty (unless force).
std::filesystem::path output_directory(const std::filesystem::path& out, bool force);

struct WrittenModel {
  std::filesystem::path directory;     // as written
  std::vector<std::string> files;      // written into it, in order
  std::size_t tensors = 0;
  int64_t parameters = 0;              // elements written
};

// Writes the model directory `target` (from output_directory): config.json and model.safetensors in
// `format` (not Auto; the model must pass check_exportable). The blocklab format writes `blocklab_config`
// as config.json and `step` into the safetensors metadata; the others ignore both. The files go into a
// hidden temporary directory beside `target` (each fsynced) that is renamed into place, so `target` is
// either complete or as it was.
WrittenModel write_model_directory(const std::filesystem::path& target, const blocklab::ModelConfig& model,
                                   ExportFormat format, const ParamLookup& param,
                                   const nlohmann::json& blocklab_config, int64_t step);

}  // namespace blocklab::hf
