// The sweep as three steps over the same run function: plan (OUT/plan.jsonl), run one planned run by
// index in this process, merge whatever has finished. A batch scheduler, GNU parallel, xargs or an MPI
// task farm only has to call `sweep run OUT --index I` for every I; the one-command sweep does the same
// with local worker processes.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/manifest.h"
#include "experiments/sweep.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/csv.h"
#include "io/metrics.h"
#include "io/read_file.h"
#include "jobs/train_job.h"
#include "sched/dir_lock.h"
#include "util/error.h"
#include "util/rng.h"

namespace blocklab::experiments {

namespace fs = std::filesystem;

namespace {

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

nlohmann::json plan_line(size_t index, const SweepRun& run, const std::string& fingerprint) {
  nlohmann::json config = to_json(run.config);
  config.erase("out");  // OUT/<name>, wherever OUT is when the run executes
  return {{"index", index}, {"name", run.name},           {"cell", run.cell},  {"values", run.cell_values},
          {"seed", run.seed}, {"fingerprint", fingerprint}, {"config", config}};
}

std::string plan_text(const std::vector<SweepRun>& runs) {
  std::string text;
  for (size_t i = 0; i < runs.size(); ++i) text += plan_line(i, runs[i], config_fingerprint(runs[i].config)).dump() + "\n";
  return text;
}

void write_result(const SweepPlan& plan, size_t index, const fs::path& dir) {
  nlohmann::json summary;
  try {
    summary = nlohmann::json::parse(io::read_file(dir / "summary.json"));
  } catch (const nlohmann::json::exception& e) {
    throw Error((dir / "summary.json").string() + ": not valid JSON: " + e.what());
  }
  const nlohmann::json record = {{"index", index},
                                 {"name", plan.runs[index].name},
                                 {"fingerprint", plan.fingerprints[index]},
                                 {"status", summary.value("status", std::string("completed"))},
                                 {"steps", summary.value("steps", 0)},
                                 {"final_loss", summary.value("final_loss", 0.0)},
                                 {"min_loss", summary.value("min_loss", 0.0)}};
  io::write_file_atomic((dir / kResultName).string(), record.dump(2) + "\n");
}

// A planned run's state for merge's list of unfinished runs.
std::string run_state(const SweepRun& run) {
  const fs::path dir(run.config.out);
  if (!fs::exists(dir / "config.json")) return "not started";
  const auto checkpoints = io::list_checkpoints(dir);
  if (!checkpoints.empty()) return "stopped, checkpoint at step " + std::to_string(checkpoints.back().step);
  return "started, no checkpoint yet (running, or killed)";
}

}  // namespace

std::string config_fingerprint(const RunConfig& config) {
  return hex64(Rng::hash(results_json(config).dump()));
}

SweepPlan write_sweep_plan(const SweepOptions& options) {
  const std::vector<SweepRun> runs = plan_sweep(options);  // Error before anything is written
  claim_output_dir(options.out, "sweep", sweep_settings(options), true);
  const fs::path path = fs::path(options.out) / kPlanName;
  const std::string text = plan_text(runs);
  if (!fs::exists(path) || io::read_file(path) != text) io::write_file_atomic(path.string(), text);
  return read_sweep_plan(options.out);
}

SweepPlan read_sweep_plan(const std::string& out) {
  const fs::path manifest = fs::path(out) / kManifestName, path = fs::path(out) / kPlanName;
  if (!fs::exists(manifest) || !fs::exists(path))
    throw Error(out + ": holds no sweep plan (" + kManifestName + " and " + kPlanName +
                "; write one with: blocklab sweep plan --grid ... --out " + out + ")");
  SweepPlan plan;
  plan.out = out;
  try {
    const auto m = nlohmann::json::parse(io::read_file(manifest));
    if (m.value("experiment", std::string()) != "sweep")
      throw Error(out + ": holds a " + m.value("experiment", std::string("?")) + " experiment, not a sweep");
    const nlohmann::json& settings = m.at("settings");
    for (const auto& axis : settings.at("grid"))
      plan.grid.push_back({axis.at("key").get<std::string>(), axis.at("values").get<std::vector<std::string>>()});
    plan.seeds = settings.at("seeds").get<std::vector<uint64_t>>();
    plan.probe_every = settings.value("probe_every", 0);
  } catch (const nlohmann::json::exception& e) {
    throw Error(manifest.string() + ": not a sweep's settings: " + e.what());
  }
  std::ifstream in(path);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const std::string where = path.string() + ":" + std::to_string(number);
    SweepRun run;
    std::string fingerprint;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.at("index").get<size_t>() != plan.runs.size()) throw Error(where + ": runs out of order");
      run.name = j.at("name").get<std::string>();
      run.cell = j.at("cell").get<size_t>();
      run.cell_values = j.at("values").get<std::vector<std::string>>();
      run.seed = j.at("seed").get<uint64_t>();
      fingerprint = j.at("fingerprint").get<std::string>();
      apply_json(run.config, j.at("config"));
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": malformed plan line: " + e.what());
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    if (run.name.empty() || run.name.find('/') != std::string::npos || run.name == "." || run.name == "..")
      throw Error(where + ": bad run name '" + run.name + "'");
    run.config.out = (fs::path(out) / run.name).string();
    resolve(run.config);
    if (config_fingerprint(run.config) != fingerprint)
      throw Error(where + ": the fingerprint does not match the run's config (the plan was edited?)");
    plan.runs.push_back(std::move(run));
    plan.fingerprints.push_back(fingerprint);
  }
  if (plan.runs.empty()) throw Error(path.string() + ": no runs");
  return plan;
}

bool run_done(const SweepPlan& plan, size_t index) {
  const fs::path dir(plan.runs.at(index).config.out);
  const fs::path result = dir / kResultName;
  if (!fs::exists(result) || !run_finished(dir.string())) return false;
  try {
    return nlohmann::json::parse(io::read_file(result)).value("fingerprint", std::string()) == plan.fingerprints[index];
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

std::string to_string(PlannedRunOutcome o) {
  switch (o) {
    case PlannedRunOutcome::AlreadyDone: return "already done";
    case PlannedRunOutcome::Trained: return "trained";
    case PlannedRunOutcome::Resumed: return "resumed";
  }
  return "?";
}

PlannedRunOutcome run_planned(const SweepPlan& plan, size_t index, int threads, const StepObserver& observer) {
  if (index >= plan.runs.size())
    throw Error("run index " + std::to_string(index) + " is not in the plan (0.." + std::to_string(plan.runs.size() - 1) +
                ")");
  const SweepRun& run = plan.runs[index];
  const fs::path dir(run.config.out);
  const std::string& fingerprint = plan.fingerprints[index];
  // A directory trained with another config is never continued or overwritten.
  if (fs::exists(dir / "config.json")) {
    const std::string found = config_fingerprint([&] {
      RunConfig c = read_config_json((dir / "config.json").string());
      resolve(c);
      return c;
    }());
    if (found != fingerprint)
      throw Error(dir.string() + ": holds a run with another config (fingerprint " + found + ", the plan says " +
                  fingerprint + "); remove it or plan the sweep into another directory");
  }
  fs::create_directories(dir);
  sched::DirLock lock(dir);
  if (run_done(plan, index)) return PlannedRunOutcome::AlreadyDone;
  std::error_code ec;
  fs::remove(dir / kResultName, ec);  // a stale record (another fingerprint) must not outlive this run

  RunConfig config = run.config;
  if (threads >= 0) config.threads = threads;
  if (plan.probe_every > 0) config.probe_every = plan.probe_every;  // a plan whose configs predate the key
  jobs::TrainJob job;
  job.config = config;
  job.observer = observer;
  job.overwrite = true;
  PlannedRunOutcome outcome;
  if (!io::list_checkpoints(dir).empty()) {  // interrupted: continue bit-exactly
    const ResumePoint from = find_resume_point(dir.string());
    job.resume = &from;
    jobs::train_job(job);
    outcome = PlannedRunOutcome::Resumed;
  } else if (run_finished(dir.string())) {  // ended, but killed before its record was written
    outcome = PlannedRunOutcome::Trained;
  } else {
    jobs::train_job(job);
    outcome = PlannedRunOutcome::Trained;
  }
  write_result(plan, index, dir);
  return outcome;
}

std::vector<size_t> parse_run_indices(const std::string& index, const std::string& range, size_t runs) {
  auto number = [&](const std::string& text, const std::string& what) {
    char* end = nullptr;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || v < 0) throw Error(what + ": expected a run index >= 0, got '" + text + "'");
    return static_cast<size_t>(v);
  };
  std::vector<size_t> out;
  if (!index.empty()) {
    out.push_back(number(index, "--index"));
  } else {
    const size_t colon = range.find(':');
    if (colon == std::string::npos) throw Error("--range: expected A:B (runs A .. B-1), got '" + range + "'");
    const size_t a = number(range.substr(0, colon), "--range"), b = number(range.substr(colon + 1), "--range");
    if (b <= a) throw Error("--range " + range + ": empty (B must be above A)");
    for (size_t i = a; i < b; ++i) out.push_back(i);
  }
  for (size_t i : out)
    if (i >= runs)
      throw Error("run index " + std::to_string(i) + " is not in the plan (0.." + std::to_string(runs - 1) + ")");
  return out;
}

SweepResult merge_sweep(const SweepPlan& plan, bool log_loss, const std::string& title_option, const Log& log,
                        report::Lang lang) {
  SweepResult result;
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    if (run_done(plan, i))
      result.runs.push_back(read_run(plan.runs[i]));
    else
      result.unfinished.push_back(std::to_string(i) + " " + plan.runs[i].name + " (" + run_state(plan.runs[i]) + ")");
  }

  const RunConfig& c = plan.runs.front().config;
  // Text runs add their validation losses and the text's unigram entropy (their "learned" threshold).
  const bool text = c.is_text();
  std::vector<std::string> header = {"run"};
  for (const GridAxis& axis : plan.grid) header.push_back(axis.key);
  for (const char* column : {"seed", "steps", "final_loss", "min_loss", "min_loss_step", "first_step_below_0.01",
                             "outcome", "seconds"})
    header.push_back(column);
  if (text)
    for (const char* column : {"final_val_loss", "min_val_loss", "min_val_loss_step", "unigram_entropy"})
      header.push_back(column);
  io::CsvWriter csv(header);
  const auto optional_number = [](const std::optional<double>& v) { return v ? io::csv_number(*v) : std::string(); };
  for (const auto& r : result.runs) {
    std::vector<std::string> row = {r.run.name};
    row.insert(row.end(), r.run.cell_values.begin(), r.run.cell_values.end());
    row.insert(row.end(), {std::to_string(r.run.seed), std::to_string(r.curve.steps), io::csv_number(r.curve.final_loss),
                           io::csv_number(r.curve.min_loss), std::to_string(r.curve.min_loss_step),
                           r.curve.first_step_below ? std::to_string(*r.curve.first_step_below) : "",
                           probe::to_string(r.curve.outcome), io::csv_number(r.seconds, "%.1f")});
    if (text)
      row.insert(row.end(), {optional_number(r.final_val_loss), optional_number(r.min_val_loss),
                             r.min_val_loss ? std::to_string(r.min_val_loss_step) : "", optional_number(r.unigram_entropy)});
    csv.row(row);
  }
  io::write_file_atomic((fs::path(plan.out) / "summary.csv").string(), csv.text());

  const double ln_vocab = std::log(static_cast<double>(c.model.vocab));
  std::string title = title_option;
  if (title.empty()) {
    std::ostringstream t;
    const bool data_varies =
        std::any_of(plan.grid.begin(), plan.grid.end(), [](const GridAxis& axis) { return axis.key == "data"; });
    if (text)
      t << "Text loss (" << (data_varies ? std::string() : fs::path(c.data).filename().string() + ", ") << "V="
        << c.model.vocab << ", windows of " << c.model.seq_len << ")";
    else
      t << (c.task == "reverse" ? "Reverse" : "Copy") << " task loss";
    t << ", " << c.model.layers << (c.model.layers == 1 ? " block" : " blocks") << " x width " << c.model.width;
    if (!text) t << ", V=" << c.model.vocab << " n=" << c.copy_len;
    t << ", batch " << c.batch << ", lr " << c.lr << ", " << plan.seeds.size() << " seed(s)";
    title = t.str();
  }
  // A text run's losses stay within a decade (ln V down to about 1): a linear axis reads better there.
  result.figure = report::render_figure(sweep_figure(plan.grid, result.runs, ln_vocab, log_loss && !text, title, lang),
                                    (fs::path(plan.out) / "loss").string());
  if (log) log(result.figure.drawn ? "wrote " + plan.out + "/summary.csv and loss.{png,svg}" : result.figure.message);
  return result;
}

}  // namespace blocklab::experiments
