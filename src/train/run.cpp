#include "train/run.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/checksum.h"
#include "io/metrics.h"
#include "io/read_file.h"
#include "io/safetensors.h"
#include "io/tfevents.h"
#include "train/memory.h"
#include "util/error.h"
#include "util/signals.h"
#include "util/threads.h"

namespace blocklab {

namespace fs = std::filesystem;

namespace {


// BLOCKLAB_INJECT_NONFINITE=STEP[,STEP...][:TENSOR]
void apply_fault_injection(Trainer& trainer) {
  const char* env = std::getenv("BLOCKLAB_INJECT_NONFINITE");
  if (env == nullptr || *env == '\0') return;
  const std::string text = env;
  const size_t colon = text.find(':');
  std::string tensor = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (tensor.empty()) tensor = trainer.model().table().specs().back().name;
  std::vector<int> steps;
  const std::string list = text.substr(0, colon);
  for (size_t start = 0; start <= list.size();) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    char* stop = nullptr;
    const long step = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || step < 1 || step > 1'000'000'000)
      throw Error("BLOCKLAB_INJECT_NONFINITE: expected STEP[,STEP...][:TENSOR], got '" + text + "'");
    steps.push_back(static_cast<int>(step));
    start = end + 1;
  }
  trainer.inject_nonfinite(std::move(steps), tensor);
}

void note_loss(RunSummary& s, int step, double loss, bool& have_loss) {
  if (!std::isfinite(loss)) return;
  if (!have_loss || loss < s.min_loss) s.min_loss = loss, s.min_loss_step = step;
  if (!have_loss) s.first_loss = loss;
  s.final_loss = loss;
  have_loss = true;
}

void note_val_loss(RunSummary& s, int step, double val_loss) {
  if (!std::isfinite(val_loss)) return;
  if (!s.min_val_loss || val_loss < *s.min_val_loss) s.min_val_loss = val_loss, s.min_val_loss_step = step;
  s.val_loss = val_loss;
  s.val_loss_step = step;
}

void write_summary(const fs::path& dir, const RunSummary& summary, const char* status) {
  nlohmann::json j = {{"steps", summary.steps},         {"first_loss", summary.first_loss},
                      {"final_loss", summary.final_loss}, {"min_loss", summary.min_loss},
                      {"min_loss_step", summary.min_loss_step}, {"seconds", summary.total_seconds()},
                      {"ms_per_step", summary.ms_per_step()}, {"skipped_steps", summary.skipped_steps},
                      {"status", status}};
  if (summary.start_step > 0) {
    j["resumed_from_step"] = summary.start_step;
    j["seconds_this_process"] = summary.seconds;  // what ms_per_step divides
    if (summary.seconds_before < 0) j["seconds_from_step"] = summary.start_step;  // "seconds" misses the earlier steps
  }
  if (summary.val_loss) {
    j["val_loss"] = *summary.val_loss;
    j["val_loss_step"] = summary.val_loss_step;
    j["min_val_loss"] = *summary.min_val_loss;
    j["min_val_loss_step"] = summary.min_val_loss_step;
  }
  if (summary.unigram_entropy) j["unigram_entropy"] = *summary.unigram_entropy;
  if (!summary.nonfinite_error.empty()) j["error"] = summary.nonfinite_error;
  io::write_file_atomic((dir / "summary.json").string(), j.dump(2) + "\n");
}

// The training time of steps 1 .. step from the summary.json a run left when it stopped at that step (an
// interruption writes it beside the checkpoint; its "seconds" is the run's time over all processes so far);
// -1 when there is none for that step (a crash after a periodic checkpoint, a run from before summaries
// recorded the whole time): the time is then not known.
double seconds_through(const fs::path& dir, int step) {
  try {
    const auto j = nlohmann::json::parse(io::read_file(dir / "summary.json"));
    if (j.value("steps", -1) == step && !j.contains("seconds_from_step") && j.contains("seconds") &&
        (j.value("resumed_from_step", 0) == 0 || j.contains("seconds_this_process")))
      return j["seconds"].get<double>();
  } catch (const nlohmann::json::exception&) {
  } catch (const Error&) {
  }
  return -1;
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

bool is_writer(const ShardExchange* exchange) { return exchange == nullptr || exchange->rank() == 0; }

// The config as the TensorBoard text plugin shows it: the config.json text as a Markdown code block.
std::string config_markdown(const RunConfig& config) {
  std::string text = to_json(config).dump(2), out;
  out.reserve(text.size() * 2);
  out += "    ";
  for (char c : text) {
    out += c;
    if (c == '\n') out += "    ";
  }
  return out;
}

// The TensorBoard event file of a run segment (see EventFileWriter), with the config at its first step.
void open_events(std::optional<io::EventFileWriter>& events, const RunConfig& config, int start_step) {
  if (!config.tensorboard) return;
  events.emplace(config.out, start_step);
  events->text(events->first_step(), "config", config_markdown(config));
}

// The scalars of one step in the event file (TensorBoard groups the tags by their first component).
void write_step_events(io::EventFileWriter& events, const StepResult& r, int64_t skipped) {
  std::vector<std::pair<std::string, double>> values = {{"loss/train", r.loss},
                                                        {"train/lr", r.lr},
                                                        {"train/grad_norm", r.grad_norm},
                                                        {"train/skipped_steps", static_cast<double>(skipped)},
                                                        {"time/step_ms", 1000.0 * r.seconds}};
  if (r.val_loss) values.insert(values.begin() + 1, {"loss/val", *r.val_loss});
  events.scalars(r.step, values);
}

// Runs `prepare` on every rank; when it throws on any rank, every rank throws (the others a short note
// pointing at the rank that failed), so that no rank waits for the others in the step loop.
template <class F>
void on_every_rank(ShardExchange* exchange, F&& prepare) {
  if (exchange == nullptr || exchange->size() == 1) {
    prepare();
    return;
  }
  std::string error;
  try {
    prepare();
  } catch (const Error& e) {
    error = e.what();
  }
  const int failed = exchange->max_over_ranks(error.empty() ? -1 : exchange->rank());
  if (!error.empty()) throw Error(error);
  if (failed >= 0) throw Error("rank " + std::to_string(failed) + " could not start the run (see its message)");
}

// The step loop shared by new and resumed runs; `summary` holds what came before (resumed runs).
// metrics is null on the ranks that do not write; events also when the run writes no event file.
RunSummary run_steps(Trainer& trainer, const RunConfig& config, io::MetricsWriter* metrics,
                     io::EventFileWriter* events, RunSummary summary, bool have_loss, const StepObserver& observer,
                     const TrainerHook& hook) {
  const fs::path dir(config.out);
  trainer.set_event_writer(events);
  ShardExchange* exchange = trainer.exchange();
  const bool writer = is_writer(exchange), agree = exchange != nullptr && exchange->size() > 1;
  StopSignals signals;  // SIGINT/SIGTERM: finish this step, write a checkpoint, stop
  if (hook) hook(trainer);
  const bool text = config.is_text();
  if (const TextTask* task = trainer.task().text())
    summary.unigram_entropy = unigram_entropy(task->tokens().ids().first(task->split().train_end));
  std::vector<std::optional<double>> row(5);
  while (trainer.steps_done() < config.steps) {
    StepResult r = trainer.step();
    if (text && (r.step % config.eval_every == 0 || r.step == config.steps)) {
      r.val_loss = trainer.validation_loss();
      note_val_loss(summary, r.step, *r.val_loss);
    }
    if (metrics && !text) metrics->row(r.step, {r.loss, r.lr, r.grad_norm, static_cast<double>(trainer.skipped_steps())});
    if (metrics && text) {
      row = {r.loss, r.lr, r.grad_norm, static_cast<double>(trainer.skipped_steps()), r.val_loss};
      metrics->row_partial(r.step, row);
    }
    if (events) write_step_events(*events, r, trainer.skipped_steps());
    summary.steps = r.step;
    summary.seconds += r.seconds;
    if (r.nonfinite && config.on_nonfinite == NonFinitePolicy::Abort) {
      const std::string tensor = trainer.first_nonfinite_grad();
      summary.nonfinite_error = "step " + std::to_string(r.step) + ": " +
                                (tensor.empty() ? "non-finite loss" : "non-finite gradient in " + tensor) + " (loss " +
                                format_number(r.loss) + ", gradient norm " + format_number(r.grad_norm) +
                                "); stopped (on_nonfinite = abort)";
      summary.skipped_steps = trainer.skipped_steps();
      if (writer) write_summary(dir, summary, "nonfinite");
      return summary;
    }
    summary.skipped_steps = trainer.skipped_steps();
    note_loss(summary, r.step, r.loss, have_loss);
    if (observer) observer(r);
    if (hook) hook(trainer);
    // every rank stops after the same step: the largest signal number any rank saw
    const int signal = agree ? exchange->max_over_ranks(signals.pending()) : signals.pending();
    const bool periodic =
        config.checkpoint_every > 0 && (r.step % config.checkpoint_every == 0 || r.step == config.steps);
    if (signal == 0 && !periodic) continue;
    fs::path checkpoint = io::checkpoints_dir(dir);
    if (writer) {
      metrics->sync();  // the rows up to this step are durable before the checkpoint that relies on them
      if (events) events->sync();
      checkpoint = io::write_checkpoint(dir, trainer.checkpoint_state(), config.keep_checkpoints);
    }
    if (signal != 0) {
      if (writer) write_summary(dir, summary, "interrupted");
      throw Interrupted(signal, r.step, checkpoint.string());
    }
  }
  if (writer && config.weights) {
    write_final_model(dir / "model.safetensors", trainer);
  } else if (writer) {
    std::error_code ec;  // no stale final weights of an earlier run or an earlier end of this one
    fs::remove(dir / "model.safetensors", ec);
  }
  if (writer) write_summary(dir, summary, "completed");
  return summary;
}

// Renames damaged checkpoints to step_NNNNNNN.damaged[.K]: kept for inspection, but no longer a checkpoint
// that the run would replace, prune or try to resume from.
void set_aside_damaged(const std::vector<SkippedCheckpoint>& skipped) {
  for (const SkippedCheckpoint& s : skipped) {
    std::error_code ec;
    fs::path target = s.path.string() + ".damaged";
    for (int k = 2; fs::exists(target, ec); ++k) target = s.path.string() + ".damaged." + std::to_string(k);
    fs::rename(s.path, target, ec);
    if (ec) throw Error(s.path.string() + ": cannot set the damaged checkpoint aside: " + ec.message());
  }
}

}  // namespace

Interrupted::Interrupted(int signal, int step, std::string checkpoint)
    : std::runtime_error("interrupted by signal " + std::to_string(signal) + " after step " + std::to_string(step)),
      signal_(signal),
      step_(step),
      checkpoint_(std::move(checkpoint)) {}

void write_config_json(const std::string& path, const RunConfig& config) {
  io::write_file_atomic(path, to_json(config).dump(2) + "\n");
}

RunConfig read_config_json(const std::string& path) {
  const std::string text = io::read_file(path);
  RunConfig config;
  try {
    apply_json(config, nlohmann::json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  return config;
}

void refuse_existing_run(const std::string& dir, bool overwrite) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw Error(dir + ": exists and is not a directory");
  if (!overwrite)
    for (const char* name : {"config.json", "metrics.csv", "checkpoints"})
      if (fs::exists(fs::path(dir) / name))
        throw Error(dir + ": already holds a run (" + name + "); choose another --out or pass --force");
  if (!overwrite && fs::is_directory(dir, ec))
    if (const auto events = io::list_event_files(dir); !events.empty())
      throw Error(dir + ": already holds a run (" + events.front().filename().string() +
                  "); choose another --out or pass --force");
}

void prepare_run_dir(const std::string& dir, bool overwrite) {
  std::error_code ec;
  refuse_existing_run(dir, overwrite);
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create directory: " + ec.message());
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw Error(dir + ": directory is not writable");
  // --force: the old run's checkpoints must not be taken for this run's by a later --resume.
  const fs::path old_checkpoints = io::checkpoints_dir(dir);
  if (overwrite && fs::exists(old_checkpoints, ec)) {
    const fs::path trash = fs::path(dir) / (".checkpoints.removed." + std::to_string(::getpid()));
    fs::rename(old_checkpoints, trash, ec);
    if (ec) throw Error(old_checkpoints.string() + ": cannot remove the old run's checkpoints: " + ec.message());
    fs::remove_all(trash, ec);
  }
  // --force: neither may the old run's TensorBoard curves join this run's.
  if (overwrite)
    for (const fs::path& old : io::list_event_files(dir)) {
      fs::remove(old, ec);
      if (ec) throw Error(old.string() + ": cannot remove the old run's event file: " + ec.message());
    }
}

std::vector<std::string> metric_columns(const RunConfig& config) {
  std::vector<std::string> columns = {"step", "loss", "lr", "grad_norm", "skipped"};
  if (config.is_text()) columns.push_back("val_loss");
  return columns;
}

std::shared_ptr<const TokenIds> prepare_run_tokens(const RunConfig& config, bool reuse) {
  const fs::path dir(config.out), path = fs::path(config.out) / "tokens.bin";
  const TextTokenizer tokenizer = TextTokenizer::from_key(config.tokenizer);
  std::shared_ptr<const TokenIds> tokens;
  if (reuse && fs::exists(path)) {
    const SourceId source = identify_source(config.data);
    try {
      tokens = TokenIds::open(path);
    } catch (const Error&) {
      tokens = nullptr;  // damaged: tokenized again below, in memory
    }
    if (tokens) {
      const TokenFileHeader& h = tokens->header();
      if (h.source_bytes != source.bytes || h.source_checksum != source.checksum)
        throw Error(config.data + ": the data file changed since this run tokenized it (" +
                    std::to_string(h.source_bytes) + " bytes, xxh3_64 " + io::checksum_hex(h.source_checksum) +
                    "; now " + std::to_string(source.bytes) + " bytes, xxh3_64 " + io::checksum_hex(source.checksum) +
                    "); a resumed run must train on the same text: restore it, or start a new run");
      if (h.tokenizer_checksum != tokenizer.checksum())
        throw Error(config.tokenizer + ": the tokenizer changed since this run tokenized its data (now " +
                    tokenizer.describe() + "); a resumed run must use the same tokenizer");
    }
  }
  // A resumed run whose tokens.bin is gone or damaged makes the ids again in memory only: the checkpoint then
  // refuses them unless they are the ones it trained on (io::TrainingState::data_ids), so a changed file or
  // tokenizer leaves the run directory as it was.
  if (!tokens) tokens = reuse ? tokenize_text_file(config.data, tokenizer) : write_token_file(path, config.data, tokenizer);
  if (!tokenizer.is_bytes()) io::write_file_atomic((dir / "tokenizer.json").string(), tokenizer.json_text());
  return tokens;
}

void write_final_model(const fs::path& path, Trainer& trainer) {
  const Model<float>& model = trainer.model();
  std::vector<io::TensorToWrite> tensors;
  for (const ParamSpec& s : model.table().specs())
    tensors.push_back(io::tensor_view(s.name, s.shape, model.params().subspan(s.offset, s.numel)));
  io::write_safetensors(path.string(), tensors, {{"format", "pt"}, {"step", std::to_string(trainer.steps_done())}});
}

RunSummary train_run(RunConfig config, bool overwrite, const StepObserver& observer, const TrainerHook& hook,
                     ShardExchange* exchange) {
  std::optional<Trainer> trainer;
  std::optional<io::MetricsWriter> metrics;
  std::optional<io::EventFileWriter> events;
  on_every_rank(exchange, [&] {
    resolve(config);
    require_training_memory(config, "train");  // refuses before anything is allocated
    set_num_threads(config.threads);
    std::shared_ptr<const TokenIds> tokens;
    if (config.is_text()) {
      // Rank 0 tokenizes into the run directory (created, but nothing of a run written, before the data is
      // checked); the other ranks tokenize in memory.
      if (is_writer(exchange)) {
        refuse_existing_run(config.out, overwrite);
        std::error_code ec;
        fs::create_directories(config.out, ec);
        if (ec) throw Error(config.out + ": cannot create directory: " + ec.message());
        tokens = prepare_run_tokens(config, /*reuse=*/false);
      } else {
        tokens = tokenize_text_file(config.data, TextTokenizer::from_key(config.tokenizer));
      }
    }
    trainer.emplace(config, exchange, tokens);  // allocates everything before any file of the run is touched
    apply_fault_injection(*trainer);
    if (!is_writer(exchange)) return;
    prepare_run_dir(config.out, overwrite);
    const fs::path dir(config.out);
    write_config_json((dir / "config.json").string(), config);
    metrics.emplace((dir / "metrics.csv").string(), metric_columns(config));
    open_events(events, config, 0);
  });
  return run_steps(*trainer, config, metrics ? &*metrics : nullptr, events ? &*events : nullptr, RunSummary{}, false,
                   observer, hook);
}

ResumePoint find_resume_point(const std::string& run_dir) {
  if (!fs::is_directory(run_dir)) throw Error(run_dir + ": no such run directory");
  const auto checkpoints = io::list_checkpoint_dirs(run_dir);
  if (checkpoints.empty())
    throw Error(run_dir + ": no complete checkpoint in " + io::checkpoints_dir(run_dir).string() +
                " (runs write them with --checkpoint-every N, and when stopped by SIGINT/SIGTERM)");
  ResumePoint p;
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    const io::CheckpointRef& c = *it;
    const fs::path state_file = c.path / "state.safetensors";
    try {
      if (!c.complete) throw Error(c.path.string() + ": no COMPLETE marker");
      std::vector<std::string> notes = io::verify_checkpoint(c.path);
      RunConfig config;
      const std::string text = io::read_checkpoint_config(c.path);
      try {
        apply_json(config, nlohmann::json::parse(text));
      } catch (const nlohmann::json::exception& e) {
        throw Error(state_file.string() + ": config in __metadata__ is not valid JSON: " + e.what());
      } catch (const Error& e) {
        throw Error(state_file.string() + ": config in __metadata__: " + e.what());
      }
      p.checkpoint = c.path;
      p.step = static_cast<int>(std::min<int64_t>(c.step, INT32_MAX));
      p.config = std::move(config);
      p.config.out = run_dir;
      p.notes = std::move(notes);
      return p;
    } catch (const Error& e) {
      p.skipped.push_back({c.path, e.what()});
    }
  }
  std::string reasons;
  for (const SkippedCheckpoint& s : p.skipped) reasons += (reasons.empty() ? "" : "; ") + s.reason;
  throw Error(run_dir + ": no checkpoint verifies, nothing changed (" + reasons + ")");
}

const std::vector<std::string>& keys_changeable_on_resume() {
  static const std::vector<std::string> keys = {
      "steps",       "threads", "log_every",    "checkpoint_every", "keep_checkpoints",   "on_nonfinite",
      "tensorboard", "weights", "stream_every", "probe_every",      "curvature_every", "curvature_per_block",
      "update_probe_every", "update_probe_passes"};
  return keys;
}

namespace {
// "steps, threads, ... and update_probe_passes"
std::string changeable_keys_text() {
  const auto& keys = keys_changeable_on_resume();
  std::string text;
  for (size_t i = 0; i < keys.size(); ++i) text += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + keys[i];
  return text;
}
}  // namespace

void check_resume_config(const ResumePoint& from, const RunConfig& requested) {
  const auto& changeable = keys_changeable_on_resume();
  for (const ConfigKey& k : config_keys()) {
    if (std::find(changeable.begin(), changeable.end(), k.name) != changeable.end()) continue;
    const nlohmann::json was = k.get(from.config), now = k.get(requested);
    if (was != now)
      throw Error("--resume: " + k.name + " is " + was.dump() + " in the checkpoint, cannot change it to " + now.dump() +
                  " (a resumed run may change only " + changeable_keys_text() + ")");
  }
  if (requested.steps < from.step)
    throw Error("--resume: steps " + std::to_string(requested.steps) + " is below the checkpoint's step " +
                std::to_string(from.step));
}

RunSummary resume_run(RunConfig config, const ResumePoint& from, const StepObserver& observer,
                      const TrainerHook& hook, ShardExchange* exchange) {
  std::optional<Trainer> trainer;
  std::optional<io::MetricsWriter> metrics;
  std::optional<io::EventFileWriter> events;
  RunSummary summary;
  bool have_loss = false;
  on_every_rank(exchange, [&] {
    resolve(config);
    check_resume_config(from, config);
    require_training_memory(config, "train");
    set_num_threads(config.threads);
    std::shared_ptr<const TokenIds> tokens;
    if (config.is_text())
      tokens = is_writer(exchange) ? prepare_run_tokens(config, /*reuse=*/true)
                                   : tokenize_text_file(config.data, TextTokenizer::from_key(config.tokenizer));
    trainer.emplace(config, exchange, tokens);
    trainer->load_checkpoint(from.checkpoint);
    apply_fault_injection(*trainer);
    summary.steps = summary.start_step = from.step;
    summary.skipped_steps = trainer->skipped_steps();
    if (!is_writer(exchange)) return;
    const fs::path dir(config.out);
    if (::access(dir.c_str(), W_OK | X_OK) != 0) throw Error(config.out + ": directory is not writable");
    summary.seconds_before = seconds_through(dir, from.step);
    set_aside_damaged(from.skipped);
    const std::string metrics_path = (dir / "metrics.csv").string();
    io::keep_metrics_through(metrics_path, metric_columns(config), from.step);
    write_config_json((dir / "config.json").string(), config);
    // The summary continues from the rows kept (losses of the steps before the checkpoint).
    const io::MetricsTable kept = io::read_metrics(metrics_path);
    const int val_column = kept.column("val_loss");
    for (const auto& row : kept.rows) {
      note_loss(summary, static_cast<int>(row[0]), row[1], have_loss);
      if (val_column >= 0) note_val_loss(summary, static_cast<int>(row[0]), row[val_column]);
    }
    metrics.emplace(metrics_path, metric_columns(config), /*append=*/true);
    // The event files keep the steps up to the checkpoint (a crash may have left later ones); this segment's
    // file goes on from the step after it, so that every step is in the directory once.
    io::keep_events_through(dir, from.step);
    open_events(events, config, from.step);
  });
  return run_steps(*trainer, config, metrics ? &*metrics : nullptr, events ? &*events : nullptr, summary, have_loss,
                   observer, hook);
}

}  // namespace blocklab
