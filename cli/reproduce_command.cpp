// blocklab reproduce: every experiment of the source section, and a report.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "experiment_flags.h"
#include "experiments/reproduce.h"

namespace blocklab::cli {

void register_reproduce(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand(
      "reproduce", "run every experiment of the source section and write report.md and a self-contained report.html");
  auto quick = std::make_shared<bool>(false);
  auto out = std::make_shared<std::string>();
  auto jobs = std::make_shared<int>(0);
  app->add_flag("--quick", *quick,
                "a reduced version (smaller training model, fewer steps) that shows every phenomenon in minutes");
  app->add_option("--out", *out, "output directory (re-running it continues where it stopped)")
      ->required()
      ->type_name("DIR");
  auto no_depthmap = std::make_shared<bool>(false);
  app->add_option("--jobs", *jobs, "training runs at a time [cores]")->check(at_least(0))->type_name("N");
  app->add_flag("--no-depthmap", *no_depthmap, "skip the depth map (every placement x depth x warm-up)");
  auto no_stabilitymap = std::make_shared<bool>(false);
  app->add_flag("--no-stabilitymap", *no_stabilitymap,
                "skip the stability map (Post-LN/Pre-LN x adam/adam+v0 x warm-up x lr x seeds; also continues a "
                "directory written before the map joined the reproduction)");
  auto no_curvature = std::make_shared<bool>(false);
  app->add_flag("--no-curvature", *no_curvature,
                "skip the curvature part (preconditioned sharpness against 38/lr over the 2x2 grid's first steps)");
  auto max_steps = std::make_shared<int>(0);
  app->add_option("--max-steps", *max_steps,
                  "cut every training run to at most N steps: a check that the whole pipeline runs on this machine "
                  "or build (the report then says nothing about the source's claims, and says so)")
      ->check(at_least(1))
      ->type_name("N");
  auto lang = std::make_shared<std::string>("en");
  app->add_option("--lang", *lang,
                  "language of the report and its figures: en, or ko (Korean, with the source's terms); the runs do "
                  "not depend on it, so a finished directory can be reported again in the other")
      ->check(CLI::IsMember({"en", "ko"}))
      ->type_name("en|ko");
  app->footer(
      "Full version (the source's settings): experiment A on the 24 x 128 model at batch 4/8/16/32; experiment B,\n"
      "{Post-LN, Pre-LN} x {no warm-up, 400 warm-up steps} x seeds 0,1,2, 1,200 steps at batch 32; a depth sweep\n"
      "(6/12/18/24 blocks, 600 steps, batch 16); a depth map of every placement at 6/12/24 blocks x warm-up\n"
      "0/400 (width 128, 600 steps, batch 16, seed 0; --no-depthmap skips it); Adam's preconditioned sharpness\n"
      "against 38/lr over the 2x2 grid's first 200 steps (every 20, seed 0) and per-block sharpness at init\n"
      "(curvature batch of 8 sequences; --no-curvature skips it); the quick stability map (6 x 64, 400 steps,\n"
      "Post-LN/Pre-LN x adam/adam+v0 x warm-up 0/100 x lr 1e-3/3e-3/1e-2 x seeds 0,1,2, in both versions;\n"
      "--no-stabilitymap skips it);\n"
      "problems 9, 10, 11. Training\n"
      "dominates: on 2 cores expect many hours. --quick trains a 12-block, width-64 model instead and the quick\n"
      "depth map: about 17 minutes on 2 cores in all, and 1-2 minutes for the stability map.");
  commands.push_back({app, [quick, out, jobs, no_depthmap, no_stabilitymap, no_curvature, max_steps, lang] {
                        experiments::ReproduceOptions options = experiments::reproduce_preset(*quick);
                        if (*max_steps > 0) experiments::cap_training_steps(options, *max_steps);
                        options.out = *out;
                        options.jobs = *jobs;
                        options.depthmap = !*no_depthmap;
                        options.stabilitymap = !*no_stabilitymap;
                        options.curvature = !*no_curvature;
                        options.lang = report::parse_lang(*lang);
                        ConsoleReporter console;
                        experiments::ReproduceResult result;
                        try {
                          result = experiments::run_reproduce(options, console.log(), console.progress());
                        } catch (const experiments::SweepInterrupted& e) {
                          console.finish();
                          std::fprintf(stderr, "blocklab: %s\n", e.what());
                          return 128 + e.signal();
                        }
                        console.finish();
                        std::printf("report: %s\n        %s\n", result.report_md.c_str(), result.report_html.c_str());
                        return 0;
                      }});
}

}  // namespace blocklab::cli
