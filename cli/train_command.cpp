// blocklab train: one training run on a synthetic task.
#include <cmath>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "progress.h"
#include "train/run.h"

namespace blocklab::cli {

void register_train(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand("train", "train a stack of transformer blocks on a synthetic task");
  auto flags = std::make_shared<ConfigFlags>();
  auto force = std::make_shared<bool>(false);
  add_config_flags(app, *flags);
  app->add_flag("--force", *force, "overwrite a run already in --out");
  app->footer(
      "Writes OUT/config.json (resolved config), OUT/metrics.csv (step,loss,lr,grad_norm per step) and\n"
      "OUT/summary.json. Example (the source's 24-block Pre-LN run):\n"
      "  blocklab train --norm-placement pre --layers 24 --width 128 --heads 4 --vocab 64 --copy-len 32 \\\n"
      "                 --batch 16 --steps 400 --lr 1e-3 --warmup 0 --seed 0 --out runs/pre24");
  commands.push_back({app, [app, flags, force] {
                        RunConfig config = build_config(app, *flags);
                        resolve(config);
                        std::printf("training %s-LN %s, %d blocks x width %d, %d heads, copy task V=%d n=%d, batch %d, "
                                    "%d steps, lr %g, warm-up %d, seed %llu -> %s\n",
                                    to_string(config.model.norm_placement).c_str(), to_string(config.model.norm).c_str(),
                                    config.model.layers, config.model.width, config.model.heads, config.model.vocab,
                                    config.copy_len, config.batch, config.steps, config.lr, config.warmup,
                                    static_cast<unsigned long long>(config.seed), config.out.c_str());
                        std::fflush(stdout);
                        Progress progress("step", config.steps, config.log_every);
                        const RunSummary s = train_run(config, *force, [&](const StepResult& r) {
                          char detail[128];
                          std::snprintf(detail, sizeof detail, "loss %.4f  lr %.2e  |g| %.3g  %.1f ms/step", r.loss,
                                        r.lr, r.grad_norm, 1000.0 * r.seconds);
                          progress.update(r.step, detail);
                        });
                        progress.finish();
                        std::printf("done: %d steps in %s (%.1f ms/step); loss %.4f -> %.4f (min %.4f at step %d; ln V = %.4f)\n",
                                    s.steps, Progress::format_duration(s.seconds).c_str(), s.ms_per_step(), s.first_loss,
                                    s.final_loss, s.min_loss, s.min_loss_step, std::log(config.model.vocab));
                        std::printf("wrote %s/{config.json,metrics.csv,summary.json}\n", config.out.c_str());
                        return std::isfinite(s.final_loss) ? 0 : 1;
                      }});
}

}  // namespace blocklab::cli
