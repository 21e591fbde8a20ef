// blocklab sweep: a grid of training runs over config keys x seeds, run in parallel.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "commands.h"
#include "experiment_flags.h"
#include "experiments/sweep.h"
#include "train/memory.h"
#include "util/memory.h"

namespace blocklab::cli {

void register_sweep(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand("sweep", "train a grid of runs over config keys and seeds, in parallel");
  auto flags = std::make_shared<ConfigFlags>();
  auto grid = std::make_shared<std::vector<std::string>>();
  auto seeds = std::make_shared<std::string>();
  auto jobs = std::make_shared<int>(0);
  auto probe_every = std::make_shared<int>(0);
  auto linear = std::make_shared<bool>(false);
  add_config_flags(app, *flags);
  app->add_option("--grid", *grid, "KEY=V1,V2,...: one grid axis (repeat for more axes)")->type_name("KEY=LIST");
  app->add_option("--seeds", *seeds, "comma-separated seeds, one run per seed in every cell [0,1,2]")
      ->type_name("LIST");
  app->add_option("--jobs", *jobs, "runs at a time; each gets max(1, cores/jobs) threads [cores]")
      ->check(at_least(0))
      ->type_name("N");
  app->add_option("--probe-every", *probe_every, "each run also writes residual.csv every N steps")
      ->check(at_least(0))
      ->type_name("N");
  app->add_flag("--linear-loss", *linear, "draw the loss on a linear axis (default: log scale)");
  app->footer(
      "Every other config flag sets the base config of all runs. Each run trains in OUT/<key>=<value>+...+seed=<S>/\n"
      "as a separate `blocklab train` process (log in train.log). Writes OUT/summary.csv (final/min loss, first\n"
      "step below 0.01, outcome: diverged, collapsed, blew-up, never-started, learned, learning) and OUT/loss.{png,svg}. Re-running\n"
      "the same command skips finished runs and resumes interrupted ones; another sweep's directory is refused.\n"
      "Example (the source's 2x2 grid): blocklab sweep --grid norm_placement=post,pre --grid warmup=0,400 \\\n"
      "  --seeds 0,1,2 --steps 1200 --batch 32 --out runs/sweep");
  commands.push_back({app, [app, flags, grid, seeds, jobs, probe_every, linear] {
                        experiments::SweepOptions options;
                        options.base = build_config(app, *flags);
                        options.out = output_dir(app, options.base, "runs/sweep");
                        options.seeds = seed_list(app, *seeds, options.base, "0,1,2");
                        for (const auto& spec : *grid) options.grid.push_back(experiments::parse_grid_axis(spec));
                        options.jobs = *jobs;
                        options.probe_every = *probe_every;
                        options.log_loss = !*linear;
                        if (const auto available = available_memory()) {  // the largest run, as many times as run at once
                          const auto planned = experiments::plan_sweep(options);
                          const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
                          const int at_once = static_cast<int>(
                              std::min<size_t>(planned.size(), static_cast<size_t>(options.jobs > 0 ? options.jobs : cores)));
                          const experiments::SweepRun* largest = nullptr;
                          double most = -1;
                          for (const auto& run : planned)
                            if (const double b = training_memory(run.config, available->bytes).total(); b > most)
                              most = b, largest = &run;
                          if (largest != nullptr)
                            require_training_memory(largest->config, "sweep (largest run " + largest->name + ")", at_once);
                        }
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
                        std::printf("%-48s %-14s %10s %10s %8s\n", "run", "outcome", "final", "min", "<0.01 at");
                        for (const auto& r : result.runs)
                          std::printf("%-48s %-14s %10.4f %10.4f %8s\n", r.run.name.c_str(),
                                      probe::to_string(r.curve.outcome).c_str(), r.curve.final_loss, r.curve.min_loss,
                                      r.curve.first_step_below ? std::to_string(*r.curve.first_step_below).c_str() : "-");
                        return 0;
                      }});
}

}  // namespace blocklab::cli
