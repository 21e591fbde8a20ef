#pragma once
// Export of a trained run as a Hugging Face model directory:
//
//   format    from                  HF_DIR holds
//   qwen3     block = qwen3         config.json (Qwen3ForCausalLM) + model.safetensors under Qwen3's names
//   gpt2      block = gpt2          config.json (GPT2LMHeadModel)  + model.safetensors under GPT-2's names
//   blocklab  block = seed or sd    the run's resolved config.json + its (or the checkpoint's) model.safetensors
//                                   (blocklab's PyTorch names), for architectures transformers has no class for
//
// Tensor names (N = block index, I = the MLP's hidden width):
//   qwen3  model.embed_tokens.weight <- tok_emb.weight; model.layers.N.input_layernorm.weight <- norm1.weight;
//          self_attn.{q,k,v}_proj.* <- attn.{q,k,v}.* (a fused attn.qkv is split by rows into Q, K, K);
//          self_attn.{q,k}_norm.weight <- attn.{q,k}_norm.weight; self_attn.o_proj.* <- attn.proj.*;
//          post_attention_layernorm.weight <- norm2.weight; mlp.up_proj.weight <- fc1 rows 0..I-1 (value),
//          mlp.gate_proj.weight <- fc1 rows I..2I-1 (gate), mlp.down_proj.weight <- fc2.weight;
//          model.norm.weight <- final_norm.weight; lm_head.weight <- head.weight (absent when tied)
//   gpt2   transformer.wte.weight, transformer.wpe.weight <- tok_emb, pos_emb; transformer.h.N.ln_1.* <- norm1.*;
//          attn.c_attn.* <- attn.qkv.*; attn.c_proj.* <- attn.proj.*; ln_2.* <- norm2.*; mlp.c_fc.* <- fc1.*;
//          mlp.c_proj.* <- fc2.*; transformer.ln_f.* <- final_norm.*; lm_head.weight <- head.weight (untied only).
//          GPT-2's Conv1D stores weights (in, out): every linear weight is written transposed.
//
// Weights come from the run's final weights (RUN_DIR/model.safetensors, which every finished run writes unless
// trained with --no-weights) or a complete checkpoint (io/checkpoint.h), whichever holds the later step.
// Everything is F32. The directory is written into a hidden temporary directory beside HF_DIR (each file
// fsynced) and renamed into place, so HF_DIR is either complete or untouched.
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

struct ExportOptions {
  std::filesystem::path checkpoint;    // empty: the run's final weights or its newest complete checkpoint
  ExportFormat format = ExportFormat::Auto;
  bool force = false;                  // replace a non-empty HF_DIR
};

struct ExportResult {
  ExportFormat format = ExportFormat::Auto;
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
  std::vector<ExportFormat> also_expressible;
};

// Exports run_dir's weights (its final model.safetensors or newest checkpoint, whichever is later; or
// options.checkpoint: a checkpoint directory, or the name of one in run_dir/checkpoints) to `out`. Throws Error, leaving `out` as it was, when the run directory or its
// checkpoint is missing or malformed, the format cannot express the run's architecture, `out` exists and
// is not empty (without force), or `out` overlaps the run directory.
ExportResult export_run(const std::filesystem::path& run_dir, const std::filesystem::path& out,
                        const ExportOptions& options = {});

}  // namespace blocklab::hf
