// blocklab gradnorm: Experiment A, gradient norms per block at initialization.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "train/memory.h"
#include "experiment_flags.h"
#include "experiments/gradnorm.h"
#include "report/labels.h"

namespace blocklab::cli {

void register_gradnorm(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand(
      "gradnorm", "gradient norm of every parameter at initialization, per block (Xiong et al. 2020, Fig. 3)");
  auto flags = std::make_shared<ConfigFlags>();
  auto seeds = std::make_shared<std::string>();
  auto placements = std::make_shared<std::string>();
  auto batches = std::make_shared<int>(1);
  add_config_flags(app, *flags);
  app->add_option("--seeds", *seeds, "comma-separated seeds [0,1,2]")->type_name("LIST");
  app->add_option("--placements", *placements, "norm placements to compare, comma-separated, or all [post,pre]")->type_name("LIST");
  app->add_option("--batches", *batches, "average each norm over the first K batches of the data stream [1]")
      ->type_name("K");
  app->footer(
      "Model and task come from the config flags (default: the source's 24 blocks x width 128, 4 heads,\n"
      "copy task V=64 n=32, Xavier init, batch 32). Writes OUT/gradnorm.csv\n"
      "(placement,seed,block,parameter,grad_norm), OUT/gradnorm_fc2.csv, OUT/gradnorm.{png,svg} (fc2 weight),\n"
      "OUT/gradnorm_FAMILY.{png,svg} per parameter family (mlp.fc2.weight, attn.qkv.weight, norm1.weight, ...)\n"
      "and OUT/gradnorm_summary.md (fc2 last block / first block per placement).\n"
      "Placements: post, pre, peri, reordered, deepnorm, admin, rezero, tfixup, mix, lns, hybrid, hybrid_star,\n"
      "hc, mhc, ngpt, or all.\n"
      "Example: blocklab gradnorm --batch 16 --seeds 0,1,2 --placements all --out runs/gradnorm");
  commands.push_back({app, [app, flags, seeds, placements, batches] {
                        experiments::GradNormOptions options;
                        options.base = build_config(app, *flags);
                        options.out = output_dir(app, options.base, "runs/gradnorm");
                        options.seeds = seed_list(app, *seeds, options.base, "0,1,2");
                        options.placements = placement_list(app, *placements, options.base);
                        options.batches = *batches;
                        RunConfig sized = options.base;  // one model at a time, each of the base's size
                        resolve(sized);
                        require_training_memory(sized, "gradnorm");
                        ConsoleReporter console;
                        const auto result = experiments::run_gradnorm(options, console.log());
                        std::printf("MLP second-layer weight gradient norm at init, mean of %zu seed(s):\n",
                                    options.seeds.size());
                        int label_width = 8;
                        for (const auto& p : result.profiles)
                          label_width = std::max(label_width, static_cast<int>(report::placement_label(p.placement).size()));
                        for (const auto& p : result.profiles) {
                          const double ratio = p.last_over_first();
                          std::printf("  %-*s block 1: %.4f   block %zu: %.4f   last/first: %s\n",
                                      label_width, report::placement_label(p.placement).c_str(), p.mean.front(), p.mean.size(),
                                      p.mean.back(), std::isfinite(ratio) ? experiments::fmt(ratio, "%.3f").c_str() : "n/a");
                        }
                        return 0;
                      }});
}

}  // namespace blocklab::cli
