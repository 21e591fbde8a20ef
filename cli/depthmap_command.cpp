// blocklab depthmap: placement x depth x warm-up x seeds, each run labelled and timed to loss < 0.01.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "experiment_flags.h"
#include "map_flags.h"
#include "experiments/depthmap.h"
#include "report/labels.h"
#include "util/error.h"

namespace blocklab::cli {

void register_depthmap(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand(
      "depthmap", "train every placement at several depths, with and without warm-up, and map which ones learn");
  auto flags = std::make_shared<MapFlags>();
  auto depths = std::make_shared<std::string>();
  add_config_flags(app, flags->config);
  app->add_option("--placements", flags->placements, "comma-separated norm placements [all]")->type_name("LIST");
  app->add_option("--depths", *depths, "comma-separated numbers of blocks [6,12,24,48,96]")->type_name("LIST");
  app->add_option("--warmups", flags->warmups, "comma-separated warm-up steps, one table each [0,400]")
      ->type_name("LIST");
  app->add_option("--seeds", flags->seeds, "comma-separated seeds, one run per seed in every cell [0,1,2; --quick: 0]")
      ->type_name("LIST");
  add_jobs_flag(app, flags->jobs);
  app->add_flag("--quick", flags->quick,
                "a reduced map: width 64, 8+8-token sequences, depths 4,8,16 (a few minutes on 2 cores; flags "
                "still override)");
  app->footer(
      "Defaults: the source's model (width 128, 4 heads, V 64, n 32), batch 16, Adam 1e-3, 600 steps, every\n"
      "placement, depths 6,12,24,48,96, warm-up 0 and 400, seeds 0,1,2 (--quick: seed 0); every other config flag\n"
      "sets all runs; with several seeds a cell reads \"2/3 learned, median N steps\". Prints\n"
      "the number of runs and the expected time (FLOPs per step x steps, at a rate measured on the smallest run)\n"
      "before it starts. Writes OUT/depthmap.csv, OUT/depthmap.md and OUT/depthmap.{png,svg}; the runs are a\n"
      "sweep in OUT/runs (re-running the same command continues it). Default OUT: runs/depthmap[-quick].\n"
      "The runs keep no final weights (weights = false: no model.safetensors each); --weights true keeps them.");
  commands.push_back({app, [app, flags, depths] {
                        reject_axis_flags(app, {"--layers", "--warmup"}, "--depths / --warmups");
                        experiments::DepthMapOptions options = experiments::depthmap_preset(flags->quick);
                        read_map_config(app, *flags, options,
                                        flags->quick ? "runs/depthmap-quick" : "runs/depthmap");
                        if (app->count("--depths") > 0)
                          options.depths = experiments::parse_int_list(*depths, "--depths");
                        read_map_runs(app, *flags, options);
                        const experiments::SweepOptions plan = experiments::plan_depthmap(options);  // Error: exit 2
                        const experiments::DepthMapEstimate estimate = experiments::estimate_depthmap(options, plan);
                        std::printf("depth map: %s\n", experiments::estimate_text(estimate).c_str());
                        std::fflush(stdout);
                        experiments::DepthMapResult result;
                        if (const int status = run_map([&](const auto& log, const auto& progress) {
                              result = experiments::run_depthmap(options, log, progress);
                            }))
                          return status;
                        for (int warmup : options.warmups) {
                          const std::string title = warmup == 0 ? "no warm-up" : "warm-up " + std::to_string(warmup);
                          std::printf("\n%s\n", title.c_str());
                          auto rows = experiments::depthmap_table(options, result.cells, warmup);
                          rows.insert(rows.begin(), experiments::depthmap_table_header(options));
                          print_table(rows);
                        }
                        return 0;
                      }});
}

}  // namespace blocklab::cli
