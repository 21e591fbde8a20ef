// blocklab train: one training run on a synthetic task (copy, reverse) or on a text.
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>

#include "commands.h"
#include "jobs/train_job.h"
#include "progress.h"
#include "report/labels.h"
#include "train/run.h"
#include "train/shard_reduce.h"
#include "util/error.h"
#include "util/mpi.h"
#include "util/threads.h"

namespace blocklab::cli {

void register_train(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand("train", "train a stack of transformer blocks on a synthetic task or a text");
  auto flags = std::make_shared<ConfigFlags>();
  auto force = std::make_shared<bool>(false);
  auto resume = std::make_shared<std::string>();
  auto config_json = std::make_shared<std::string>();
  add_config_flags(app, *flags);
  auto* json_option =
      app->add_option("--config-json", *config_json,
                      "a resolved config.json (as a run writes it) to start from instead of the defaults; flags "
                      "override it")
          ->type_name("FILE");
  app->add_flag("--force", *force, "overwrite a run already in --out");
  auto* resume_option =
      app->add_option("--resume", *resume,
                      "continue the run in DIR from its newest checkpoint (config from the checkpoint; only --steps, "
                      "--threads, --log-every, --checkpoint-every, --keep-checkpoints, --on-nonfinite, --tensorboard may change)")
          ->type_name("DIR");
  json_option->excludes("--config");
  json_option->excludes(resume_option);
  app->footer(
      "Writes OUT/config.json (resolved config), OUT/metrics.csv (step,loss,lr,grad_norm,skipped per step;\n"
      "the text task adds val_loss) and OUT/summary.json; with --checkpoint-every N also\n"
      "OUT/checkpoints/step_NNNNNNN/ (and always on SIGINT/SIGTERM, exit 130/143), from which --resume OUT\n"
      "continues bit-exactly. Every run that finishes writes its final weights OUT/model.safetensors (for\n"
      "blocklab export, sample and curvature) unless --no-weights (weights = false) is given.\n"
      "TensorBoard: OUT/events.out.tfevents.<time>.<host> holds the same numbers per step (loss/train,\n"
      "loss/val, train/lr, train/grad_norm, train/skipped_steps, time/step_ms), the config as text and, with\n"
      "--probe-every, the stream norms and per-block gradient norms; a resumed run adds a file that goes on\n"
      "after the checkpoint's step. `tensorboard --logdir runs/` shows every run below runs/ as a named\n"
      "curve; --no-tensorboard (tensorboard = false) writes no event file.\n"
      "--stream-every N (stream_every = N) appends per-block residual-stream statistics to OUT/stream.csv\n"
      "(step,block,rms,max_abs,max_channel,sink) at step 0, every N steps and the last step, and draws\n"
      "OUT/stream.{png,svg}: the stream RMS by block at init (dashed) and at the end (solid).\n"
      "--update-probe-every N (update_probe_every = N) appends, for every N-th update and the last, per block\n"
      "the spread of Adam's step size lr/(sqrt(v_hat)+eps), |dW|/|W| and the critical sharpness along the update\n"
      "to OUT/updates.csv (docs/cli.md).\n"
      "Example (the source's 24-block Pre-LN run):\n"
      "  blocklab train --norm-placement pre --layers 24 --width 128 --heads 4 --vocab 64 --copy-len 32 \\\n"
      "                 --batch 16 --steps 400 --lr 1e-3 --warmup 0 --seed 0 --out runs/pre24\n"
      "Train on a text (bytes as tokens; --tokenizer tokenizer.json for a Hugging Face one):\n"
      "  blocklab train --task text --data book.txt --norm-placement pre --layers 4 --width 128 --heads 4 \\\n"
      "                 --steps 1000 --out runs/book && blocklab sample runs/book --prompt 'Once upon'");
  commands.push_back({app, [app, flags, force, resume, config_json] {
                        // Under mpirun: data-parallel over the ranks (train/shard_reduce.h); rank 0 prints and writes.
                        std::optional<mpi::World> world;
                        std::optional<MpiShardExchange> exchange;
                        if (mpi::launched_by_mpi()) {
                          if (mpi::built_with_mpi()) {
                            world.emplace();
                            exchange.emplace();
                          } else {
                            for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
                              if (const char* v = std::getenv(name); v != nullptr && std::atoi(v) > 1)
                                throw Error("started by mpirun with " + std::string(v) +
                                            " ranks, but this blocklab was built without MPI (install libopenmpi-dev "
                                            "and openmpi-bin, then rebuild)");
                          }
                        }
                        const bool ranks = exchange && exchange->size() > 1;
                        if (exchange && exchange->rank() != 0) {  // quiet ranks: rank 0 reports for all
                          if (std::freopen("/dev/null", "w", stdout) == nullptr) std::fclose(stdout);
                        }
                        std::optional<ResumePoint> from;
                        RunConfig config;
                        if (!resume->empty()) {
                          if (app->count("--out") > 0) throw Error("--resume continues the run in its own directory; drop --out");
                          if (*force) throw Error("--force cannot be combined with --resume");
                          from = find_resume_point(*resume);
                          for (const SkippedCheckpoint& skipped : from->skipped)
                            std::fprintf(stderr, "blocklab: skipping damaged checkpoint %s: %s\n",
                                         skipped.path.c_str(), skipped.reason.c_str());
                          for (const std::string& note : from->notes) std::fprintf(stderr, "blocklab: note: %s\n", note.c_str());
                          config = build_config(app, *flags, from->config);
                          resolve(config);
                          check_resume_config(*from, config);
                          std::printf("resuming %s from %s (step %d) to step %d\n", config.out.c_str(),
                                      from->checkpoint.c_str(), from->step, config.steps);
                        } else {
                          config = build_config(app, *flags,
                                                config_json->empty() ? RunConfig{} : read_config_json(*config_json));
                          resolve(config);
                        }
                        if (ranks && app->count("--threads") == 0)  // the machine's cores shared by its ranks
                          config.threads = std::max(1, hardware_threads() / mpi::local_ranks());
                        if (exchange)
                          std::printf("data-parallel over %d rank(s) x %d thread(s), %d micro-shard(s) of %d sequences\n",
                                      exchange->size(), config.threads, config.micro_shards,
                                      config.batch / config.micro_shards);
                        char task[512];
                        if (config.is_text())
                          std::snprintf(task, sizeof task, "text task %s (tokenizer %s, V=%d, windows of %d)",
                                        config.data.c_str(), config.tokenizer.c_str(), config.model.vocab,
                                        config.model.seq_len);
                        else
                          std::snprintf(task, sizeof task, "%s task V=%d n=%d", config.task.c_str(), config.model.vocab,
                                        config.copy_len);
                        std::printf("training %s %s, %d blocks x width %d, %d heads, %s, batch %d, "
                                    "%d steps, lr %g, warm-up %d, seed %llu -> %s\n",
                                    report::placement_label(config.model.norm_placement).c_str(), to_string(config.model.norm).c_str(),
                                    config.model.layers, config.model.width, config.model.heads, task, config.batch,
                                    config.steps, config.lr, config.warmup, static_cast<unsigned long long>(config.seed),
                                    config.out.c_str());
                        std::fflush(stdout);
                        Progress progress("step", config.steps, config.log_every);
                        const bool quiet = exchange && exchange->rank() != 0;
                        std::optional<double> val_loss;  // the latest validation loss (text task)
                        const StepObserver observer = [&](const StepResult& r) {
                          if (quiet) return;
                          if (r.val_loss) val_loss = r.val_loss;
                          char val[32] = "";
                          if (val_loss) std::snprintf(val, sizeof val, "  val %.4f", *val_loss);
                          char detail[160];
                          std::snprintf(detail, sizeof detail, "loss %.4f%s  lr %.2e  |g| %.3g  %.1f ms/step%s", r.loss,
                                        val, r.lr, r.grad_norm, 1000.0 * r.seconds,
                                        r.nonfinite ? "  (skipped: non-finite)" : "");
                          progress.update(r.step, detail);
                        };
                        jobs::TrainJob job;
                        job.config = config;
                        job.resume = from ? &*from : nullptr;
                        job.overwrite = *force;
                        job.observer = observer;
                        job.exchange = exchange ? &*exchange : nullptr;
                        jobs::TrainJobResult result;
                        try {
                          result = jobs::train_job(job);
                        } catch (const Interrupted& e) {
                          progress.finish();
                          std::fflush(stdout);
                          std::fprintf(stderr, "blocklab: %s after step %d; wrote %s\nresume with: blocklab train --resume %s\n",
                                       e.signal() == SIGINT ? "interrupted (SIGINT)" : e.signal() == SIGTERM ? "terminated (SIGTERM)" : "stopped by a signal",
                                       e.step(), e.checkpoint().c_str(), config.out.c_str());
                          return 128 + e.signal();
                        }
                        const RunSummary& s = result.summary;
                        progress.finish();
                        if (!s.nonfinite_error.empty()) {
                          std::fflush(stdout);
                          std::fprintf(stderr, "blocklab: error: %s; metrics saved in %s/metrics.csv\n",
                                       s.nonfinite_error.c_str(), config.out.c_str());
                          return 1;
                        }
                        std::printf("done: %d steps in %s (%.1f ms/step); loss %.4f -> %.4f (min %.4f at step %d; ln V = %.4f)\n",
                                    s.steps, Progress::format_duration(s.seconds).c_str(), s.ms_per_step(), s.first_loss,
                                    s.final_loss, s.min_loss, s.min_loss_step, std::log(config.model.vocab));
                        if (s.val_loss)
                          std::printf("validation loss %.4f at step %d (min %.4f at step %d); unigram entropy of the "
                                      "training text %.4f\n",
                                      *s.val_loss, s.val_loss_step, *s.min_val_loss, s.min_val_loss_step,
                                      s.unigram_entropy.value_or(std::nan("")));
                        std::printf("wrote %s/{config.json,metrics.csv,summary.json%s}%s%s\n", config.out.c_str(),
                                    config.weights ? ",model.safetensors" : "", config.is_text() ? ", tokens.bin" : "",
                                    config.tensorboard ? " and the TensorBoard event file" : "");
                        if (result.stream_plot && !quiet) {  // the stream by depth, init dashed and end solid
                          if (result.stream_plot->drawn)
                            std::printf("wrote %s/stream.csv and stream.{png,svg}\n", config.out.c_str());
                          else
                            std::printf("wrote %s/stream.csv (no figure: %s)\n", config.out.c_str(),
                                        result.stream_plot->message.c_str());
                        }
                        return std::isfinite(s.final_loss) ? 0 : 1;
                      }});
}

}  // namespace blocklab::cli
