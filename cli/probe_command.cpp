// blocklab probe residual | logits: run a Hugging Face model forward on a prompt and report the
// residual-stream norms per layer, or the most likely next tokens (the probes themselves: probe/hf_probe.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "commands.h"
#include "jobs/hf_probe_job.h"
#include "progress.h"
#include "text/unicode.h"
#include "util/error.h"
#include "util/parse_list.h"

namespace blocklab::cli {

namespace {

struct PromptFlags {
  std::string model;
  std::string text;
  std::string tokens;
  int threads = 0;
};

void add_prompt_flags(CLI::App* app, PromptFlags& f) {
  app->add_option("--model", f.model, "Hugging Face model directory (config.json + safetensors)")->required();
  auto* text = app->add_option("--text", f.text, "prompt text (needs DIR/tokenizer.json)");
  auto* tokens = app->add_option("--tokens", f.tokens, "prompt as token ids, e.g. 1,2,3");
  text->excludes(tokens);
  app->add_option("--threads", f.threads, "threads (0 = all cores)")->capture_default_str();
}

// The prompt flags as the probe jobs take them.
jobs::HfPromptSpec prompt_spec(const PromptFlags& f, const CLI::App* app) {
  const bool has_text = app->count("--text") > 0, has_tokens = app->count("--tokens") > 0;
  if (!has_text && !has_tokens) throw Error("give the prompt with --text TEXT or --tokens 1,2,3");
  jobs::HfPromptSpec spec;
  spec.model_dir = f.model;
  if (has_text) spec.text = f.text;
  if (has_tokens) spec.tokens = parse_list<int32_t>(f.tokens, "--tokens", 0);
  spec.threads = f.threads;
  spec.on_warning = [](const std::string& w) { std::fprintf(stderr, "blocklab: warning: %s\n", w.c_str()); };
  spec.on_loading = [dir = f.model] {
    std::printf("loading %s\n", dir.c_str());
    std::fflush(stdout);
  };
  return spec;
}

// Token text for a terminal: control characters and bytes that are not valid UTF-8 (a token can hold
// part of a character) as escapes.
std::string printable(const std::string& bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool valid = len > 1 && i + len <= bytes.size();
    if (valid) {
      try {
        text::decode_utf8(std::string_view(bytes).substr(i, len), "token");
      } catch (const Error&) {
        valid = false;
      }
    }
    if (valid) {
      out.append(bytes, i, len);
      i += len;
      continue;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

std::string model_line(const hf::Model& m) {
  const hf::Config& hc = m.config();
  const ModelConfig& c = hc.model;
  char buf[512];
  const double params = static_cast<double>(m.parameter_count());
  std::snprintf(buf, sizeof buf, "%s: %d blocks, width %d, %d heads (%d kv) x %d, MLP %d %s, %s; %.3g %s parameters (%s, %zu file%s)",
                hc.model_type.c_str(), c.layers, c.width, c.heads, c.kv_heads, c.head_size(), c.mlp_hidden(),
                to_string(c.mlp).c_str(), to_string(c.norm).c_str(), params >= 1e9 ? params / 1e9 : params / 1e6,
                params >= 1e9 ? "B" : "M", m.dtype_summary().c_str(), m.weights().files().size(),
                m.weights().files().size() == 1 ? "" : "s");
  return buf;
}

std::string token_list_text(const std::vector<int32_t>& t) {
  std::string s;
  const std::size_t shown = std::min<std::size_t>(t.size(), 32);
  for (std::size_t i = 0; i < shown; ++i) {
    if (i) s += ',';
    s += std::to_string(t[i]);
  }
  if (shown < t.size()) s += ",... (" + std::to_string(t.size()) + " in all)";
  return s;
}

int run_residual(const CLI::App* app, const PromptFlags& f, const std::string& out, bool force, bool save_hidden,
                 bool no_plot) {
  jobs::ResidualProbeJob job;
  job.out = out;
  job.overwrite = force;
  job.save_hidden = save_hidden;
  job.plot = !no_plot;
  std::optional<Progress> progress;
  job.prompt = prompt_spec(f, app);
  job.prompt.on_loaded = [&](const hf::Model& model, const std::vector<int32_t>& tokens, const text::Tokenizer*) {
    std::printf("model   %s\n", model_line(model).c_str());
    std::printf("tokens  %s\n", token_list_text(tokens).c_str());
    std::fflush(stdout);
    progress.emplace("block", model.config().model.layers, 1);
  };
  job.on_layer = [&](const probe::ResidualLayerStats& s) {
    if (s.layer == 0 || !progress) return;
    char detail[96];
    std::snprintf(detail, sizeof detail, "|mean h| %.4g", s.mean_vector_norm);
    progress->update(s.layer, detail);
  };
  const jobs::ResidualProbeJobResult r = jobs::residual_probe_job(job);
  if (progress) progress->finish();

  const auto& layers = r.result.layers;
  const int blocks = static_cast<int>(layers.size()) - 1;
  std::printf("\n%5s  %16s  %16s  %10s  %12s  %10s  %10s  %10s  %7s  %6s\n", "layer", "|mean_t h_t|", "mean_t |h_t|",
              "sqrt(l+1)", "growth(mean)", "rel.update", "rms", "max|h|", "channel", "sink");
  for (const probe::ResidualLayerStats& s : layers) {
    char sink[16] = "-";
    if (s.sink) std::snprintf(sink, sizeof sink, "%.4f", *s.sink);
    std::printf("%5d  %16.6g  %16.6g  %10.4f  %12.4g  %10.4g  %10.4g  %10.4g  %7d  %6s\n", s.layer, s.mean_vector_norm,
                s.mean_token_norm, std::sqrt(s.layer + 1.0), s.mean_vector_norm / layers.front().mean_vector_norm,
                s.relative_update, s.rms, s.max_abs, s.max_channel, sink);
  }
  std::printf("\nafter %d blocks |mean h| grew x%.4g from the embeddings; a random walk of unit steps grows x%.4g "
              "(sqrt(%d))\n",
              blocks, layers.back().mean_vector_norm / layers.front().mean_vector_norm, std::sqrt(blocks + 1.0),
              blocks + 1);
  if (r.plot_problem) std::fprintf(stderr, "blocklab: warning: no figure: %s\n", r.plot_problem->c_str());
  std::string list;
  for (const std::string& w : r.written) list += (list.empty() ? "" : ", ") + w;
  std::printf("forward %s (%d tokens); wrote %s/{%s}\n", Progress::format_duration(r.result.forward_seconds).c_str(),
              static_cast<int>(r.tokens.size()), out.c_str(), list.c_str());
  return 0;
}

int run_logits(const CLI::App* app, const PromptFlags& f, int top) {
  jobs::LogitsProbeJob job;
  job.top = top;
  std::optional<Progress> progress;
  job.prompt = prompt_spec(f, app);
  job.prompt.on_loaded = [&](const hf::Model& model, const std::vector<int32_t>& tokens, const text::Tokenizer* tokenizer) {
    std::printf("model   %s\n", model_line(model).c_str());
    std::printf("tokens  %s\n", token_list_text(tokens).c_str());
    if (tokenizer) {
      try {
        std::printf("prompt  \"%s\"\n", printable(tokenizer->decode(tokens)).c_str());
      } catch (const Error&) {
        // ids the tokenizer does not know (the model's vocabulary can be larger): no text to show
      }
    }
    std::fflush(stdout);
    progress.emplace("block", model.config().model.layers, 1);
  };
  job.on_layer = [&](int layer) {
    if (layer > 0 && progress) progress->update(layer, "");
  };
  const jobs::LogitsProbeJobResult r = jobs::logits_probe_job(job);
  if (progress) progress->finish();

  std::printf("\nnext token after position %zu:\n%4s  %8s  %9s  %10s  %s\n", r.tokens.size() - 1, "rank", "id", "prob",
              "logit", "token");
  for (size_t i = 0; i < r.top.size(); ++i) {
    const int32_t id = r.top[i].id;
    std::string text = "-";
    if (r.tokenizer && id < r.tokenizer->vocab_size()) {
      try {
        text = "\"" + printable(r.tokenizer->token_bytes(id)) + "\"";
      } catch (const Error&) {
        text = "(no token)";
      }
    }
    std::printf("%4d  %8d  %9.5f  %10.4f  %s\n", static_cast<int>(i) + 1, id, r.top[i].probability, r.top[i].logit,
                text.c_str());
  }
  return 0;
}

}  // namespace

void register_probe(CLI::App& root, std::vector<Command>& commands) {
  auto* probe = root.add_subcommand("probe", "probe a Hugging Face model (Qwen3, Qwen3-VL, Qwen2, Llama, GPT-2)");
  probe->require_subcommand(1);

  auto* residual = probe->add_subcommand("residual", "residual-stream norm per layer, with CSV and figure");
  auto rf = std::make_shared<PromptFlags>();
  auto out = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  auto save_hidden = std::make_shared<bool>(false);
  auto no_plot = std::make_shared<bool>(false);
  add_prompt_flags(residual, *rf);
  residual->add_option("--out", *out, "output directory")->required();
  residual->add_flag("--force", *force, "overwrite results already in --out");
  residual->add_flag("--save-hidden", *save_hidden, "also write every layer's hidden states (hidden_states.safetensors)");
  residual->add_flag("--no-plot", *no_plot, "skip the figure");
  residual->footer(
      "Per layer l (0 = embeddings, l = output of block l) over the prompt tokens: the norm of the mean token\n"
      "vector, the mean token norm and the mean relative update, next to the random-walk reference sqrt(l+1).\n"
      "Writes OUT/residual.csv, OUT/residual.json, OUT/residual.gp and (with gnuplot) OUT/residual.{png,svg}.\n"
      "Example: blocklab probe residual --model ~/models/Qwen3-4B --text \"The capital of France is\" --out runs/res");
  commands.push_back({residual, [residual, rf, out, force, save_hidden, no_plot] {
                        return run_residual(residual, *rf, *out, *force, *save_hidden, *no_plot);
                      }});

  auto* logits = probe->add_subcommand("logits", "the most likely next tokens after the prompt");
  auto lf = std::make_shared<PromptFlags>();
  auto top = std::make_shared<int>(10);
  add_prompt_flags(logits, *lf);
  logits->add_option("--top", *top, "how many tokens to list")->capture_default_str();
  commands.push_back({logits, [logits, lf, top] { return run_logits(logits, *lf, *top); }});
}

}  // namespace blocklab::cli
