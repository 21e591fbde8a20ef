// blocklab sweep: a grid of training runs over config keys x seeds, run in parallel.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "experiment_flags.h"
#include "experiments/sweep.h"
#include "progress.h"
#include "util/error.h"

namespace blocklab::cli {

namespace {

void print_runs(const experiments::SweepResult& result) {
  // Text runs: the lowest validation loss instead of the step below 0.01 (a text's loss does not go there);
  // "learned" means below the text's unigram entropy (summary.csv has it).
  const bool text = !result.runs.empty() && result.runs.front().run.config.is_text();
  std::printf("%-48s %-14s %10s %10s %8s\n", "run", "outcome", "final", "min", text ? "min val" : "<0.01 at");
  for (const auto& r : result.runs) {
    char last[32] = "-";
    if (text && r.min_val_loss)
      std::snprintf(last, sizeof last, "%.4f", *r.min_val_loss);
    else if (!text && r.curve.first_step_below)
      std::snprintf(last, sizeof last, "%d", *r.curve.first_step_below);
    std::printf("%-48s %-14s %10.4f %10.4f %8s\n", r.run.name.c_str(), probe::to_string(r.curve.outcome).c_str(),
                r.curve.final_loss, r.curve.min_loss, last);
  }
}

// The grid flags shared by `sweep` and `sweep plan`.
struct GridFlags {
  ConfigFlags config;
  std::vector<std::string> grid;
  std::string seeds;
};

void add_grid_flags(CLI::App* app, GridFlags& f) {
  add_config_flags(app, f.config);
  app->add_option("--grid", f.grid, "KEY=V1,V2,...: one grid axis (repeat for more axes)")->type_name("KEY=LIST");
  app->add_option("--seeds", f.seeds, "comma-separated seeds, one run per seed in every cell [0,1,2]")
      ->type_name("LIST");
}

experiments::SweepOptions grid_options(const CLI::App* app, const GridFlags& f) {
  experiments::SweepOptions options;
  options.base = build_config(app, f.config, experiments::sweep_base_config());
  options.out = output_dir(app, options.base, "runs/sweep");
  options.seeds = seed_list(app, f.seeds, options.base, "0,1,2");
  for (const auto& spec : f.grid) options.grid.push_back(experiments::parse_grid_axis(spec));
  return options;
}

void register_sweep_plan(CLI::App* sweep, std::vector<Command>& commands) {
  auto* app = sweep->add_subcommand("plan", "write a sweep's plan (OUT/plan.jsonl, one line per run) without running it");
  auto flags = std::make_shared<GridFlags>();
  add_grid_flags(app, *flags);
  app->footer(
      "Takes the flags of `blocklab sweep` and writes OUT/experiment.json and OUT/plan.jsonl: one line per run, in\n"
      "grid order (first axis slowest, seeds fastest): index, name, resolved config, config fingerprint. Planning\n"
      "the same sweep again changes nothing; another sweep's directory is refused. Then run every index with\n"
      "`blocklab sweep run OUT --index I` (any order, any machine sharing OUT) and `blocklab sweep merge OUT`.");
  commands.push_back({app, [app, flags] {
                        const experiments::SweepPlan plan = experiments::write_sweep_plan(grid_options(app, *flags));
                        std::printf("planned %zu runs in %s/%s (indices 0..%zu)\n", plan.runs.size(), plan.out.c_str(),
                                    experiments::kPlanName, plan.runs.size() - 1);
                        return 0;
                      }});
}

void register_sweep_run(CLI::App* sweep, std::vector<Command>& commands) {
  auto* app = sweep->add_subcommand("run", "run planned runs of a sweep by index, in this process");
  auto dir = std::make_shared<std::string>();
  auto index = std::make_shared<std::string>();
  auto range = std::make_shared<std::string>();
  auto threads = std::make_shared<int>(-1);
  auto mpi = std::make_shared<bool>(false);
  app->add_option("dir", *dir, "the sweep's directory (written by `blocklab sweep plan`)")->required()->type_name("DIR");
  auto* index_option = app->add_option("--index", *index, "run number I of the plan (0-based)")->type_name("I");
  auto* range_option = app->add_option("--range", *range, "runs A .. B-1 of the plan, one after the other")->type_name("A:B");
  auto* mpi_flag = app->add_flag("--mpi", *mpi,
                                 "under mpirun: every run of the plan, handed out by rank 0 to ranks as they become free");
  index_option->excludes(range_option);
  mpi_flag->excludes(index_option);
  mpi_flag->excludes(range_option);
  app->add_option("--threads", *threads, "threads per run [the planned config's]")->check(at_least(0))->type_name("N");
  app->footer(
      "Without --index, --range or --mpi, the index comes from SLURM_ARRAY_TASK_ID (sbatch --array=0-N).\n"
      "A finished run is left untouched; an interrupted one continues from its newest checkpoint; a run\n"
      "directory trained with another config is refused. OUT/<run>/result.json is written last.");
  commands.push_back({app, [app, dir, index, range, threads, mpi] {
                        (void)app;
                        const experiments::SweepPlan plan = experiments::read_sweep_plan(*dir);
                        if (*mpi) return experiments::run_sweep_mpi(plan, *threads, [](const std::string& line) {
                          std::printf("%s\n", line.c_str());
                          std::fflush(stdout);
                        });
                        std::string one = *index;
                        if (one.empty() && range->empty()) {
                          const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
                          if (task == nullptr || *task == '\0')
                            throw Error("sweep run: give --index I, --range A:B or --mpi (or run it as a Slurm array task, "
                                        "which sets SLURM_ARRAY_TASK_ID)");
                          one = task;
                        }
                        const std::vector<size_t> indices = experiments::parse_run_indices(one, *range, plan.runs.size());
                        int failed = 0;
                        for (size_t i : indices) {
                          const experiments::SweepRun& run = plan.runs[i];
                          std::printf("run %zu/%zu %s\n", i, plan.runs.size(), run.name.c_str());
                          std::fflush(stdout);
                          Progress progress("step", run.config.steps, run.config.log_every);
                          const StepObserver observer = [&](const StepResult& r) {
                            char detail[96];
                            std::snprintf(detail, sizeof detail, "loss %.4f  %.1f ms/step", r.loss, 1000.0 * r.seconds);
                            progress.update(r.step, detail);
                          };
                          try {
                            const auto outcome = experiments::run_planned(plan, i, *threads, observer);
                            progress.finish();
                            std::printf("run %zu %s: %s\n", i, run.name.c_str(), experiments::to_string(outcome).c_str());
                          } catch (const Error& e) {
                            progress.finish();
                            if (indices.size() == 1) throw;
                            std::fflush(stdout);
                            std::fprintf(stderr, "blocklab: error: run %zu %s: %s\n", i, run.name.c_str(), e.what());
                            ++failed;
                          }
                          std::fflush(stdout);
                        }
                        return failed == 0 ? 0 : 1;
                      }});
}

void register_sweep_merge(CLI::App* sweep, std::vector<Command>& commands) {
  auto* app = sweep->add_subcommand("merge", "summary.csv and figures of a sweep's finished runs; lists the others");
  auto dir = std::make_shared<std::string>();
  auto linear = std::make_shared<bool>(false);
  auto title = std::make_shared<std::string>();
  app->add_option("dir", *dir, "the sweep's directory")->required()->type_name("DIR");
  app->add_flag("--linear-loss", *linear, "draw the loss on a linear axis (default: log scale)");
  app->add_option("--title", *title, "figure title [derived from the settings]");
  app->footer("Exit status 0 when every planned run is done, 1 when some are not (they are listed).");
  commands.push_back({app, [dir, linear, title] {
                        const experiments::SweepPlan plan = experiments::read_sweep_plan(*dir);
                        ConsoleReporter console;
                        const experiments::SweepResult result = experiments::merge_sweep(plan, !*linear, *title, console.log());
                        console.finish();
                        print_runs(result);
                        std::printf("%zu of %zu runs done\n", result.runs.size(), plan.runs.size());
                        for (const auto& u : result.unfinished) std::printf("not done: %s\n", u.c_str());
                        return result.unfinished.empty() ? 0 : 1;
                      }});
}

}  // namespace

void register_sweep(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand("sweep", "train a grid of runs over config keys and seeds, in parallel");
  // The verbs come first in `commands`: main runs the first parsed command, and `sweep` itself is parsed too.
  register_sweep_plan(app, commands);
  register_sweep_run(app, commands);
  register_sweep_merge(app, commands);
  auto flags = std::make_shared<GridFlags>();
  auto jobs = std::make_shared<int>(0);
  auto linear = std::make_shared<bool>(false);
  add_grid_flags(app, *flags);
  app->add_option("--jobs", *jobs, "runs at a time; each gets max(1, cores/jobs) threads [cores]")
      ->check(at_least(0))
      ->type_name("N");
  app->add_flag("--linear-loss", *linear, "draw the loss on a linear axis (default: log scale)");
  app->footer(
      "Every other config flag sets the base config of all runs. Each run trains in OUT/<key>=<value>+...+seed=<S>/\n"
      "as a separate process (`blocklab sweep run OUT --index I`, log in train.log). Writes OUT/summary.csv (final/min loss, first\n"
      "step below 0.01, outcome: diverged, collapsed, blew-up, never-started, learned, learning) and OUT/loss.{png,svg}. Re-running\n"
      "the same command skips finished runs and resumes interrupted ones; another sweep's directory is refused.\n"
      "The same in three steps, for a batch scheduler or MPI: `sweep plan`, `sweep run`, `sweep merge` (see their --help).\n"
      "The runs keep no final weights (weights = false: no model.safetensors each); --weights true keeps them.\n"
      "Example (the source's 2x2 grid): blocklab sweep --grid norm_placement=post,pre --grid warmup=0,400 \\\n"
      "  --seeds 0,1,2 --steps 1200 --batch 32 --out runs/sweep");
  commands.push_back({app, [app, flags, jobs, linear] {
                        experiments::SweepOptions options = grid_options(app, *flags);
                        options.jobs = *jobs;
                        options.log_loss = !*linear;
                        ConsoleReporter console;
                        experiments::SweepResult result;
                        try {
                          result = experiments::run_sweep(options, console.log(), console.progress());
                        } catch (const experiments::SweepInterrupted& e) {
                          console.finish();
                          std::fprintf(stderr, "blocklab: %s\n", e.what());
                          return 128 + e.signal();
                        }
                        console.finish();
                        print_runs(result);
                        return 0;
                      }});
}

}  // namespace blocklab::cli
