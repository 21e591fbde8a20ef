// blocklab sample: a trained run continues a prompt.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "train/sample.h"
#include "util/error.h"
#include "util/threads.h"

namespace blocklab::cli {

namespace {

struct SampleFlags {
  std::string run_dir, prompt, prompt_ids;
  SampleOptions options;
  int threads = 0;
};

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

int run_sample(const CLI::App* app, const SampleFlags& f) {
  const bool text_prompt = app->count("--prompt") > 0, id_prompt = app->count("--prompt-ids") > 0;
  if (text_prompt == id_prompt) throw Error("give either --prompt TEXT or --prompt-ids 1,2,3");
  set_num_threads(f.threads);
  RunModel run = load_run_model(f.run_dir);
  for (const std::string& note : run.notes) std::fprintf(stderr, "blocklab: note: %s\n", note.c_str());
  std::vector<int32_t> prompt;
  if (text_prompt) {
    if (!run.tokenizer)
      throw Error(f.run_dir + " was trained on the " + run.config.task + " task, whose tokens are ids 0.." +
                  std::to_string(run.config.model.vocab - 1) + ", not text: give them with --prompt-ids, e.g. --prompt-ids 1,2,3");
    check_utf8({reinterpret_cast<const std::byte*>(f.prompt.data()), f.prompt.size()}, "--prompt");
    prompt = run.tokenizer->encode(f.prompt);
    if (prompt.empty()) throw Error("--prompt is empty: give at least one character");
  } else {
    prompt = parse_id_list(f.prompt_ids, "--prompt-ids");
  }
  check_sample_options(f.options, run.config.model.vocab);
  check_prompt(run.model.config(), prompt);
  const char* mode = f.options.temperature == 0 ? "greedy" : "sampled";
  std::fprintf(stderr, "%s: %s (step %d), %d tokens %s", f.run_dir.c_str(), run.weights.filename().c_str(), run.step,
               f.options.tokens, mode);
  if (f.options.temperature > 0)
    std::fprintf(stderr, " at temperature %g, top-k %d, seed %llu", f.options.temperature, f.options.top_k,
                 static_cast<unsigned long long>(f.options.seed));
  std::fprintf(stderr, "\n");
  if (run.tokenizer) {
    // The prompt, then each token's bytes as it is chosen.
    std::fputs(f.prompt.c_str(), stdout);
    std::fflush(stdout);
    generate(run.model, prompt, f.options, [&](int32_t id) {
      const std::string bytes = run.tokenizer->decode(std::span<const int32_t>(&id, 1));
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
      std::fflush(stdout);
    });
    std::fputs("\n", stdout);
  } else {
    const std::vector<int32_t> added = generate(run.model, prompt, f.options);
    std::printf("%s -> %s\n", join_ids(prompt).c_str(), join_ids(added).c_str());
  }
  return 0;
}

}  // namespace

void register_sample(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand("sample", "continue a prompt with a trained run's model");
  auto f = std::make_shared<SampleFlags>();
  app->add_option("run_dir", f->run_dir, "the run directory (blocklab train --out)")->required()->type_name("RUN_DIR");
  app->add_option("--prompt", f->prompt, "text to continue (text runs)")->type_name("TEXT");
  app->add_option("--prompt-ids", f->prompt_ids, "token ids to continue, e.g. 1,2,3 (any run; copy and reverse runs need them)")
      ->type_name("IDS");
  app->add_option("--tokens", f->options.tokens, "how many tokens to add")->check(at_least(1))->capture_default_str();
  app->add_option("--temperature", f->options.temperature, "0: greedy (the most likely token); above 0: sample")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app->add_option("--top-k", f->options.top_k, "sample among the K most likely tokens only (0: all)")
      ->check(at_least(0))
      ->capture_default_str();
  app->add_option("--seed", f->options.seed, "seed of the sampling")->capture_default_str();
  app->add_option("--threads", f->threads, "worker threads (0: all cores)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  app->footer(
      "Uses the run's final weights (model.safetensors, which every run writes unless --no-weights) or its newest checkpoint\n"
      "that verifies, whichever is later, and the run's tokenizer. Prints the prompt and its continuation; the\n"
      "window slides when the text outgrows the model's positions. Examples:\n"
      "  blocklab sample runs/book --prompt 'Naomi said' --tokens 200 --temperature 0.8 --top-k 20 --seed 1\n"
      "  blocklab sample runs/reverse --prompt-ids 5,9,2,7 --tokens 4 --temperature 0");
  commands.push_back({app, [app, f] { return run_sample(app, *f); }});
}

}  // namespace blocklab::cli
