#include "jobs/hf_probe_job.h"

#include <chrono>
#include <filesystem>

#include "report/residual_plot.h"
#include "util/error.h"
#include "util/threads.h"

namespace blocklab::jobs {

namespace fs = std::filesystem;

namespace {

struct Prompt {
  std::vector<int32_t> tokens;
  std::shared_ptr<const text::Tokenizer> tokenizer;  // when model_dir/tokenizer.json exists and loads
};

void check_prompt(const HfPromptSpec& spec) {
  if (spec.text.has_value() == spec.tokens.has_value())
    throw Error(spec.text ? "give the prompt as text or as token ids, not both"
                          : "give the prompt as text or as token ids (e.g. 1,2,3)");
  if (spec.threads < 0) throw Error("threads must be >= 0 (0: all cores), got " + std::to_string(spec.threads));
}

// The prompt's ids; the tokenizer is needed for text, and only labels the output when ids are given.
Prompt read_prompt(const HfPromptSpec& spec) {
  Prompt p;
  const fs::path tok_file = fs::path(spec.model_dir) / "tokenizer.json";
  std::error_code ec;
  if (fs::exists(tok_file, ec)) {
    try {
      p.tokenizer = std::make_shared<const text::Tokenizer>(text::Tokenizer::load(tok_file));
    } catch (const Error& e) {
      if (spec.text) throw;
      if (spec.on_warning) spec.on_warning(std::string("tokenizer not used: ") + e.what());
    }
  } else if (spec.text) {
    throw Error(tok_file.string() + ": not found; a text prompt needs the model's tokenizer.json (or give token ids)");
  }
  p.tokens = spec.text ? p.tokenizer->encode(*spec.text) : *spec.tokens;
  if (p.tokens.empty()) throw Error("the prompt has no tokens");
  return p;
}

// The model and the prompt's ids (the spec already checked).
hf::Model load(const HfPromptSpec& spec, Prompt& prompt) {
  set_num_threads(spec.threads);
  if (spec.on_loading) spec.on_loading();
  hf::Model model = hf::Model::load(spec.model_dir);
  prompt = read_prompt(spec);
  if (spec.on_loaded) spec.on_loaded(model, prompt.tokens, prompt.tokenizer.get());
  return model;
}

}  // namespace

ResidualProbeJobResult residual_probe_job(const ResidualProbeJob& job) {
  const auto t0 = std::chrono::steady_clock::now();
  check_prompt(job.prompt);
  const fs::path out_dir(job.out);
  std::error_code ec;
  if (!job.out.empty() && fs::exists(out_dir / "residual.csv", ec) && !job.overwrite)
    throw Error(job.out + ": already holds residual.csv (use --force to overwrite)");
  Prompt prompt;
  hf::Model model = load(job.prompt, prompt);
  if (!job.out.empty()) {
    fs::create_directories(out_dir, ec);
    if (ec || !fs::is_directory(out_dir))
      throw Error(job.out + ": cannot create output directory" + (ec ? ": " + ec.message() : ""));
  }
  probe::ResidualProbeOptions options;
  options.save_hidden = job.save_hidden;
  options.on_layer = job.on_layer;
  ResidualProbeJobResult r;
  r.model_type = model.config().model_type;
  r.tokens = prompt.tokens;
  r.result = probe::probe_residual(model, prompt.tokens, options);
  if (job.out.empty()) return r;

  probe::ResidualProbeRun run;
  run.model_dir = job.prompt.model_dir;
  run.text = job.prompt.text;
  run.tokens = prompt.tokens;
  run.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.written = probe::write_residual_probe(out_dir, model, run, r.result).names;
  if (job.plot) {
    const std::string title = "Residual stream norm per layer: " + fs::path(run.model_dir).filename().string() + " (" +
                              r.model_type + ", " + std::to_string(run.tokens.size()) + " tokens)";
    const report::PlotOutcome plot = report::plot_residual(out_dir, r.result.layers, title);
    r.written.push_back("residual.gp");
    if (plot.rendered) {
      r.written.push_back("residual.png");
      r.written.push_back("residual.svg");
    } else {
      r.plot_problem = plot.message;
    }
  }
  return r;
}

LogitsProbeJobResult logits_probe_job(const LogitsProbeJob& job) {
  if (job.top < 1) throw Error("top must be at least 1, got " + std::to_string(job.top));
  check_prompt(job.prompt);
  Prompt prompt;
  hf::Model model = load(job.prompt, prompt);
  probe::LogitsProbeOptions options;
  options.top = job.top;
  options.on_layer = job.on_layer;
  LogitsProbeJobResult r;
  r.tokens = prompt.tokens;
  r.tokenizer = prompt.tokenizer;
  r.top = probe::probe_logits(model, prompt.tokens, options);
  return r;
}

}  // namespace blocklab::jobs
