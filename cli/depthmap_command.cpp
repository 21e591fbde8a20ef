// blocklab depthmap: placement x depth x warm-up x seeds, each run labelled and timed to loss < 0.01.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "experiment_flags.h"
#include "experiments/depthmap.h"
#include "report/labels.h"
#include "util/error.h"

namespace blocklab::cli {

void register_depthmap(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand(
      "depthmap", "train every placement at several depths, with and without warm-up, and map which ones learn");
  auto flags = std::make_shared<ConfigFlags>();
  auto placements = std::make_shared<std::string>();
  auto depths = std::make_shared<std::string>();
  auto warmups = std::make_shared<std::string>();
  auto seeds = std::make_shared<std::string>();
  auto jobs = std::make_shared<int>(0);
  auto quick = std::make_shared<bool>(false);
  add_config_flags(app, *flags);
  app->add_option("--placements", *placements, "comma-separated norm placements [all]")->type_name("LIST");
  app->add_option("--depths", *depths, "comma-separated numbers of blocks [6,12,24,48,96]")->type_name("LIST");
  app->add_option("--warmups", *warmups, "comma-separated warm-up steps, one table each [0,400]")->type_name("LIST");
  app->add_option("--seeds", *seeds, "comma-separated seeds, one run per seed in every cell [0,1,2; --quick: 0]")
      ->type_name("LIST");
  app->add_option("--jobs", *jobs, "runs at a time; each gets max(1, cores/jobs) threads [cores]")
      ->check(at_least(0))
      ->type_name("N");
  app->add_flag("--quick", *quick,
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
  commands.push_back({app, [app, flags, placements, depths, warmups, seeds, jobs, quick] {
                        for (const char* axis : {"--layers", "--warmup"})
                          if (app->count(axis) > 0)
                            throw Error(std::string(axis) + " is an axis of the map: use --depths / --warmups");
                        experiments::DepthMapOptions options = experiments::depthmap_preset(*quick);
                        options.base = build_config(app, *flags, options.base);
                        options.out = output_dir(app, options.base, *quick ? "runs/depthmap-quick" : "runs/depthmap");
                        if (app->count("--placements") > 0 || app->count("--norm-placement") > 0)
                          options.placements = placement_list(app, *placements, options.base);
                        if (app->count("--depths") > 0) options.depths = experiments::parse_int_list(*depths, "--depths");
                        if (app->count("--warmups") > 0) {
                          options.warmups.clear();
                          for (uint64_t w : experiments::parse_seed_list(*warmups, "--warmups")) {
                            if (w > 1000000000) throw Error("--warmups: " + std::to_string(w) + " is too large");
                            options.warmups.push_back(static_cast<int>(w));
                          }
                        }
                        std::string preset_seeds;
                        for (uint64_t s : options.seeds)
                          preset_seeds += (preset_seeds.empty() ? "" : ",") + std::to_string(s);
                        options.seeds = seed_list(app, *seeds, options.base, preset_seeds);
                        options.jobs = *jobs;
                        const experiments::SweepOptions plan = experiments::plan_depthmap(options);  // Error: exit 2
                        const experiments::DepthMapEstimate estimate = experiments::estimate_depthmap(options, plan);
                        std::printf("depth map: %s\n", experiments::estimate_text(estimate).c_str());
                        std::fflush(stdout);
                        ConsoleReporter console;
                        experiments::DepthMapResult result;
                        try {
                          result = experiments::run_depthmap(options, console.log(), console.progress());
                        } catch (const experiments::SweepInterrupted& e) {
                          console.finish();
                          std::fprintf(stderr, "blocklab: %s\n", e.what());
                          return 128 + e.signal();
                        }
                        console.finish();
                        for (int warmup : options.warmups) {
                          std::printf("\n%s\n", warmup == 0 ? "no warm-up" : ("warm-up " + std::to_string(warmup)).c_str());
                          auto rows = experiments::depthmap_table(options, result.cells, warmup);
                          rows.insert(rows.begin(), experiments::depthmap_table_header(options));
                          std::vector<size_t> widths;
                          for (const auto& row : rows)
                            for (size_t i = 0; i < row.size(); ++i) {
                              if (widths.size() <= i) widths.push_back(0);
                              widths[i] = std::max(widths[i], row[i].size());
                            }
                          for (const auto& row : rows) {
                            for (size_t i = 0; i < row.size(); ++i)
                              std::printf("%s%-*s", i ? "  " : "", static_cast<int>(widths[i]), row[i].c_str());
                            std::printf("\n");
                          }
                        }
                        return 0;
                      }});
}

}  // namespace blocklab::cli
