// blocklab residual: problem 10, how the residual stream grows.
#include <cmath>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "experiment_flags.h"
#include "experiments/residual.h"

namespace blocklab::cli {

void register_residual(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand(
      "residual", "residual-stream growth: random-walk simulation, and stream norms of models and training runs");
  auto flags = std::make_shared<ConfigFlags>();
  auto dim = std::make_shared<int>(256);
  auto trials = std::make_shared<int>(2000);
  auto depths = std::make_shared<std::string>("1,4,16,36");
  auto seeds = std::make_shared<std::string>();
  auto placements = std::make_shared<std::string>();
  auto runs = std::make_shared<std::vector<std::string>>();
  auto no_model = std::make_shared<bool>(false);
  add_config_flags(app, *flags);
  app->add_option("--dim", *dim, "random walk: dimension D [256]")->type_name("D");
  app->add_option("--trials", *trials, "random walk: trials [2000]")->type_name("N");
  app->add_option("--depths", *depths, "random walk: block counts L for the table [1,4,16,36]")->type_name("LIST");
  app->add_option("--seeds", *seeds, "seeds of the models probed at initialization [0]")->type_name("LIST");
  app->add_option("--placements", *placements, "norm placements probed at initialization [post,pre]")
      ->type_name("LIST");
  app->add_option("--run", *runs, "a training run directory with residual.csv (train --probe-every N); repeatable")
      ->type_name("DIR");
  app->add_flag("--no-model", *no_model, "skip the models at initialization (simulation and --run only)");
  app->footer(
      "Writes OUT/residual_walk.{csv,png,svg} (mean length after L blocks vs sqrt(L+1)), and for the models at\n"
      "initialization (config flags; default the source's 24 x 128 model) and each --run, OUT/residual_init.csv\n"
      "and OUT/residual_probe.{png,svg}: the mean per-token norm and the norm of the mean token vector per layer.");
  commands.push_back({app, [app, flags, dim, trials, depths, seeds, placements, runs, no_model] {
                        experiments::ResidualOptions options;
                        options.base = build_config(app, *flags);
                        options.out = output_dir(app, options.base, "runs/residual");
                        options.walk.dim = *dim;
                        options.walk.trials = *trials;
                        options.walk.depths = experiments::parse_int_list(*depths, "depths");
                        options.walk.seed = options.base.seed;
                        options.probe_init = !*no_model;
                        options.seeds = seed_list(app, *seeds, options.base, "0");
                        options.placements = placement_list(app, *placements, options.base);
                        options.runs = *runs;
                        ConsoleReporter console;
                        const auto result = experiments::run_residual(options, console.log());
                        std::printf("%8s %12s %12s %16s\n", "blocks L", "mean length", "sqrt(L+1)", "block L changes");
                        for (int d : result.walk.depths)
                          std::printf("%8d %12.3f %12.3f %16.3f\n", d, result.walk.length_at(d), std::sqrt(d + 1.0),
                                      result.walk.mean_relative_change[d]);
                        return 0;
                      }});
}

}  // namespace blocklab::cli
