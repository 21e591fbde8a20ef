// blocklab stabilitymap: placement x optimizer x warm-up x lr x seeds, each run labelled and timed to loss < 0.01.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "experiment_flags.h"
#include "map_flags.h"
#include "experiments/stabilitymap.h"
#include "experiments/warmup_explanations.h"
#include "report/labels.h"
#include "util/error.h"

namespace blocklab::cli {

void register_stabilitymap(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand(
      "stabilitymap", "train placements x optimizers x warm-up lengths x learning rates x seeds, and map which learn");
  auto flags = std::make_shared<MapFlags>();
  auto optimizers = std::make_shared<std::string>();
  auto lrs = std::make_shared<std::string>();
  auto estimate_only = std::make_shared<bool>(false);
  auto finished = std::make_shared<std::string>();
  add_config_flags(app, flags->config);
  app->add_option("--placements", flags->placements, "comma-separated norm placements, or all [post,pre]")
      ->type_name("LIST");
  app->add_option("--optimizers", *optimizers,
                  "comma-separated optimizer entries: adam, adamw, radam, sgd, lion, muon; +v0 on adam, adamw or "
                  "radam starts Adam's second moment from the first gradient (GI-Adam) [adam,radam,adam+v0]")
      ->type_name("LIST");
  app->add_option("--warmups", flags->warmups, "comma-separated warm-up steps, across each panel [0,100,400]")
      ->type_name("LIST");
  app->add_option("--lrs", *lrs, "comma-separated peak learning rates, up each panel on a log axis "
                                 "[1e-4,3e-4,1e-3,3e-3,1e-2]")
      ->type_name("LIST");
  app->add_option("--seeds", flags->seeds, "comma-separated seeds, one run per seed in every cell [0,1,2]")
      ->type_name("LIST");
  add_jobs_flag(app, flags->jobs);
  app->add_flag("--quick", flags->quick,
                "a reduced map: 6 blocks x width 64, 8+8-token sequences, batch 8, 400 steps; adam, adam+v0; "
                "warm-up 0,100; lr 1e-3,3e-3,1e-2; seeds 0,1,2 (72 runs, 1-2 minutes on 2 cores; flags still "
                "override)");
  app->add_option("--finished", *finished,
                  "a directory with the experiment.json and stabilitymap.csv of the same map (same per-run settings) "
                  "finished elsewhere: its runs are not trained again and count in this map")
      ->type_name("DIR");
  app->add_flag("--estimate-only", *estimate_only, "print the number of runs and the expected time, then stop");
  app->footer(
      "Defaults: the source's model (24 blocks x width 128, 4 heads, V 64, n 32), batch 16, 600 steps; Post-LN\n"
      "and Pre-LN; adam, radam, adam+v0; warm-up 0,100,400; lr 1e-4,3e-4,1e-3,3e-3,1e-2; seeds 0,1,2. Every other\n"
      "config flag sets all runs (--steps, --layers, --width, --batch, ...). Prints the number of runs and the\n"
      "expected time before it starts. Writes OUT/stabilitymap.csv, OUT/stabilitymap.md, OUT/stabilitymap.{png,svg}\n"
      "and OUT/stabilitymap_<placement>_<optimizer>.{png,svg}; the runs are one sweep per optimizer in\n"
      "OUT/runs/<optimizer> (re-running the same command continues it). Default OUT: runs/stabilitymap[-quick].\n"
      "Interrupted (Ctrl-C, SIGTERM), it writes the map of the runs finished so far; to go on on another machine,\n"
      "carry OUT/experiment.json and OUT/stabilitymap.csv there and pass their directory as --finished.");
  commands.push_back({app, [app, flags, optimizers, lrs, estimate_only, finished] {
                        reject_axis_flags(app, {"--warmup", "--lr", "--optimizer", "--adam-v0"},
                                          "--warmups / --lrs / --optimizers");
                        experiments::StabilityMapOptions options = experiments::stabilitymap_preset(flags->quick);
                        read_map_config(app, *flags, options,
                                        flags->quick ? "runs/stabilitymap-quick" : "runs/stabilitymap");
                        if (app->count("--optimizers") > 0)
                          options.optimizers = experiments::parse_optimizer_entries(*optimizers, "--optimizers");
                        if (app->count("--lrs") > 0) options.lrs = experiments::parse_lr_list(*lrs, "--lrs");
                        read_map_runs(app, *flags, options);
                        options.finished = *finished;
                        const auto plans = experiments::plan_stabilitymap(options);  // Error: exit 2
                        const experiments::DepthMapEstimate estimate = experiments::estimate_sweeps(plans);
                        std::printf("stability map: %s\n", experiments::estimate_text(estimate).c_str());
                        std::fflush(stdout);
                        if (*estimate_only) return 0;
                        experiments::StabilityMapResult result;
                        if (const int status = run_map([&](const auto& log, const auto& progress) {
                              result = experiments::run_stabilitymap(options, log, progress);
                            }))
                          return status;
                        for (NormPlacement p : options.placements)
                          for (const experiments::OptimizerEntry& e : options.optimizers) {
                            const std::string name = experiments::to_string(e);
                            std::printf("\n%s, %s\n", report::placement_label(p).c_str(), name.c_str());
                            auto rows = experiments::stabilitymap_table(options, result.cells, p, name);
                            rows.insert(rows.begin(), experiments::stabilitymap_table_header(options));
                            print_table(rows);
                          }
                        // What the map says of the explanations it can test (its stabilitymap.md has the tables).
                        std::printf("\n%s\n", report::tr(options.lang, "Explanations of warm-up this map can test")
                                                   .c_str());
                        for (const experiments::ExplanationCheck& c :
                             experiments::check_stabilitymap_explanations(options, result.cells, options.lang))
                          std::printf("  %s: %s\n    %s\n", c.explanation.c_str(),
                                      experiments::verdict_text(c.verdict, options.lang).c_str(), c.measured.c_str());
                        return 0;
                      }});
}

}  // namespace blocklab::cli
