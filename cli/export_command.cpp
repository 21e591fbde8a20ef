// blocklab export RUN_DIR --out HF_DIR: a trained run as a Hugging Face model directory (train/export_run.h).
#include <cstdio>
#include <memory>

#include "commands.h"
#include "train/export_run.h"
#include "util/error.h"

namespace blocklab::cli {

namespace {

struct ExportFlags {
  std::string run_dir, out, checkpoint, format = "auto";
  bool force = false;
};

int run_export(const ExportFlags& f) {
  ExportOptions options;
  options.checkpoint = f.checkpoint;
  options.format = hf::parse_export_format(f.format);
  options.force = f.force;
  const ExportResult r = export_run(f.run_dir, f.out, options);

  std::printf("exported %s, step %lld (%s)\n", r.checkpoint.string().c_str(), static_cast<long long>(r.step),
              r.reason.c_str());
  if (r.run_steps > r.step)
    std::printf("note: the run trained %lld steps; this checkpoint holds the weights of step %lld\n",
                static_cast<long long>(r.run_steps), static_cast<long long>(r.step));
  switch (r.format) {
    case hf::ExportFormat::Qwen3:
      std::printf("format: Hugging Face qwen3 (Qwen3ForCausalLM)\n");
      break;
    case hf::ExportFormat::GPT2:
      std::printf("format: Hugging Face gpt2 (GPT2LMHeadModel)\n");
      break;
    default:
      std::printf(
          "format: blocklab's own: the run's model.safetensors (blocklab's PyTorch names) and its config.json; "
          "transformers' Auto classes do not load it\n");
      for (hf::ExportFormat also : r.also_expressible)
        std::printf("note: this architecture is also expressible as Hugging Face %s: add --format %s\n",
                    hf::export_format_name(also), hf::export_format_name(also));
      break;
  }
  std::string files;
  for (const std::string& name : r.files) files += (files.empty() ? "" : ",") + name;
  std::printf("wrote %s/{%s}: %zu tensors, %lld parameters, F32\n", r.directory.string().c_str(), files.c_str(),
              r.tensors, static_cast<long long>(r.parameters));
  return 0;
}

}  // namespace

void register_export(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand(
      "export", "write a trained run's weights as a Hugging Face model directory (qwen3 and gpt2 runs load in "
                "transformers' Qwen3ForCausalLM / GPT2LMHeadModel and in `blocklab probe`)");
  auto f = std::make_shared<ExportFlags>();
  app->add_option("run_dir", f->run_dir, "the run directory (blocklab train --out)")->required()->type_name("RUN_DIR");
  app->add_option("--out", f->out, "the model directory to write (created; must not exist or be empty)")
      ->required()
      ->type_name("HF_DIR");
  app->add_option("--checkpoint", f->checkpoint,
                  "export this checkpoint (a directory, or a name in RUN_DIR/checkpoints such as step_0000400) "
                  "instead of the run's final weights or newest checkpoint")
      ->type_name("DIR");
  app->add_option("--format", f->format,
                  "auto (from the run's block: qwen3, gpt2; blocklab's own for seed and sd), qwen3, gpt2 or blocklab")
      ->capture_default_str()
      ->type_name("FORMAT");
  app->add_flag("--force", f->force, "replace HF_DIR when it exists and is not empty");
  app->footer(
      "The weights are the run's final ones (RUN_DIR/model.safetensors, written by every finished run unless\n"
      "--no-weights) or its newest complete checkpoint, whichever is later. A run whose architecture the\n"
      "format cannot express is refused (exit 2), naming the key.\n"
      "Example:\n"
      "  blocklab train --block qwen3 --layers 4 --width 64 --heads 4 --kv-heads 2 --steps 400 --out runs/q3\n"
      "  blocklab export runs/q3 --out models/q3 && blocklab probe logits --model models/q3 --tokens 1,2,3");
  commands.push_back({app, [f] { return run_export(*f); }});
}

}  // namespace blocklab::cli
