// blocklab curvature: sharpness, Adam's preconditioned sharpness, trace and per-block sharpness of a run's
// training loss on one batch, at a checkpoint or the final weights (probe/curvature.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "experiments/labels.h"
#include "io/npy.h"
#include "probe/curvature.h"
#include "probe/curvature_run.h"
#include "progress.h"
#include "util/error.h"
#include "util/memory.h"
#include "util/threads.h"

namespace blocklab::cli {

namespace {

struct CurvatureFlags {
  std::string run_dir, tokens;
  int checkpoint = -1;
  uint64_t batch_seed = 0;
  int batch = 0;
  int top = 1;
  int max_iter = 50;
  double tol = 1e-5;
  int trace_samples = 8;
  bool no_per_block = false;
  int block_max_iter = 30;
  int order = 2;
  int threads = 0;
  uint64_t seed = 0;
  bool json = false;
};

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

void register_curvature(CLI::App& root, std::vector<Command>& commands) {
  auto* app = root.add_subcommand(
      "curvature", "sharpness, Adam's preconditioned sharpness, Hessian trace and per-block sharpness of a run's loss");
  auto f = std::make_shared<CurvatureFlags>();
  app->add_option("RUN_DIR", f->run_dir, "a training run's directory (its --out)")->required();
  app->add_option("--checkpoint", f->checkpoint, "the checkpoint at this step [the newest; else model.safetensors]")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))
      ->type_name("STEP");
  auto* seed_option = app->add_option("--batch-seed", f->batch_seed,
                                      "draw the batch from the run's task with this seed [derived from the run's seed]")
                          ->type_name("S");
  auto* tokens_option =
      app->add_option("--tokens", f->tokens,
                      "read the batch's token ids from FILE: .npy (int32/int64) or .safetensors, shape (batch, sequence); "
                      "inputs [:, :-1], targets [:, 1:]")
          ->type_name("FILE");
  seed_option->excludes(tokens_option);
  app->add_option("--batch", f->batch, "sequences in the drawn batch [the run's batch]")
      ->check(CLI::Range(1, 65536))
      ->type_name("B");
  app->add_option("--top", f->top, "largest Hessian eigenvalues to report [1]")->check(at_least(1))->type_name("K");
  app->add_option("--max-iter", f->max_iter, "Lanczos iterations at most; each keeps one vector of the parameters' size [50]")
      ->check(CLI::Range(1, 100000))
      ->type_name("N");
  app->add_option("--tol", f->tol, "Lanczos convergence: residual bound <= TOL x the largest |Ritz value| [1e-5]")
      ->check(CLI::Range(1e-14, 1.0))
      ->type_name("TOL");
  app->add_option("--trace-samples", f->trace_samples, "Hutchinson samples for the trace (0: none) [8]")
      ->check(CLI::Range(0, 1000000))
      ->type_name("S");
  app->add_flag("--no-per-block", f->no_per_block, "skip the per-block sharpness");
  app->add_option("--block-max-iter", f->block_max_iter, "Lanczos iterations per block at most (tolerance 1e-3) [30]")
      ->check(at_least(1))
      ->type_name("N");
  app->add_option("--order", f->order, "finite-difference order of the Hessian-vector products, 2 or 4 [2]")
      ->check(CLI::IsMember({2, 4}));
  app->add_option("--seed", f->seed, "seed of Lanczos's start vectors and Hutchinson's probes [0]");
  app->add_option("--threads", f->threads, "threads (0 = all cores)")->check(CLI::Range(0, 4096));
  app->add_flag("--json", f->json, "print the estimates as one JSON object");
  app->footer(
      "Method: Hessian-vector products by central differences of the double-precision model's analytic gradient,\n"
      "Hv = |v| (g(theta + h u) - g(theta - h u)) / 2h, u = v/|v|, h = 1e-4 (order 4: h = 1e-3, four gradients).\n"
      "sharpness = lambda_max(H) by Lanczos with full reorthogonalisation (stops when the residual bound of each\n"
      "of the top K Ritz values is <= TOL x the largest |Ritz value|); preconditioned sharpness = lambda_max(P^-1 H),\n"
      "P = (1 - beta1^t) diag(sqrt(v_hat) + eps), v_hat = v / (1 - beta2^t), from the checkpoint's Adam state\n"
      "(absent at step 0 and for final weights without one); trace by Hutchinson (Rademacher probes, with its\n"
      "standard error); per_block[l] = lambda_max of the Hessian restricted to block l's parameters.\n"
      "Compare the sharpness with 2/lr and the preconditioned sharpness with (2 + 2 beta1) / ((1 - beta1) lr)\n"
      "= 38/lr (the stability thresholds of gradient descent and of Adam; printed for lr of the next step).\n"
      "Progress and the expected time go to stderr. --json keys: sharpness, top, preconditioned_sharpness,\n"
      "trace, trace_std_error, per_block, method, batch, weights, step, lr, edge_gd, edge_adam, loss,\n"
      "iterations, converged, gradients, seconds, threads.\n"
      "Example: blocklab curvature runs/post24 --checkpoint 100 --top 3 --json");
  commands.push_back({app, [app, f] {
                        if (f->threads > 0) set_num_threads(f->threads);
                        probe::RunWeights w = probe::load_run_weights(f->run_dir, app->count("--checkpoint") ? f->checkpoint : -1);
                        const RunConfig& config = w.config;
                        Batch batch;
                        nlohmann::json batch_json;
                        if (!f->tokens.empty()) {
                          batch = probe::batch_from_tokens(config, io::read_token_file(f->tokens), f->tokens);
                          batch_json = {{"source", "file"}, {"path", f->tokens}};
                        } else {
                          const uint64_t seed =
                              app->count("--batch-seed") ? f->batch_seed : probe::curvature_batch_seed(config.seed);
                          batch = probe::curvature_batch(config, seed, f->batch > 0 ? f->batch : config.batch);
                          batch_json = {{"source", "task"}, {"task", config.task}, {"seed", seed}};
                        }
                        {  // the double-precision model, its activations and Lanczos's basis, before allocating them
                          const auto acts = Activations<double>::sizes(config.model, batch.batch, batch.seq_len);
                          const double n = static_cast<double>(w.params.size());
                          const double basis = 8.0 * n * std::min<double>(std::max(f->max_iter, f->block_max_iter), n);
                          const double needed = 8.0 * 6 * n + static_cast<double>(acts.activation_bytes + acts.scratch_bytes) + basis;
                          require_memory("curvature", needed,
                                         "model and gradients " + format_bytes(48 * n) + " + activations " +
                                             format_bytes(static_cast<double>(acts.activation_bytes + acts.scratch_bytes)) +
                                             " + Lanczos vectors " + format_bytes(basis),
                                         "; try a smaller --batch or --max-iter");
                        }
                        batch_json["sequences"] = batch.batch;
                        batch_json["tokens"] = batch.seq_len + 1;
                        probe::CurvatureOptions o;
                        o.top = f->top;
                        o.max_iter = f->max_iter;
                        o.tol = f->tol;
                        o.trace_samples = f->trace_samples;
                        o.per_block = !f->no_per_block;
                        o.block_max_iter = f->block_max_iter;
                        o.order = f->order;
                        o.seed = f->seed;
                        const bool have_adam = !w.adam_v.empty() && w.adam_steps >= 1;
                        const probe::AdamMoments adam{w.adam_v, w.adam_steps, config.adam.beta1, config.adam.beta2,
                                                      config.adam.eps};
                        std::fprintf(stderr, "blocklab: %s (step %d), batch of %d x %d tokens, %d thread(s)\n",
                                     w.source.c_str(), w.step, batch.batch, batch.seq_len + 1, num_threads());
                        const auto t0 = std::chrono::steady_clock::now();
                        probe::CurvatureLoss loss(config.model, std::span<const float>(w.params), batch);
                        const double per_gradient = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                        const long budget = probe::curvature_gradient_budget(config.model, o, have_adam);
                        std::fprintf(stderr,
                                     "blocklab: one gradient in double precision takes %s; at most %ld gradients: "
                                     "expect at most %s (Lanczos usually stops sooner)\n",
                                     Progress::format_duration(per_gradient).c_str(), budget,
                                     Progress::format_duration(per_gradient * budget).c_str());
                        Progress progress("gradients", budget);
                        o.progress = [&](const std::string& s, long done, long) { progress.update(done, s); };
                        const probe::CurvatureResult r = probe::measure_curvature(loss, have_adam ? &adam : nullptr, o);
                        progress.finish();
                        const double lr = probe::next_learning_rate(config, w.step);
                        const double edge_gd = 2 / lr, edge_adam = probe::adam_edge(config.adam.beta1, lr);
                        if (f->json) {
                          nlohmann::json j;
                          j["sharpness"] = number_or_null(r.top[0]);
                          j["top"] = nlohmann::json::array();
                          for (double v : r.top) j["top"].push_back(number_or_null(v));
                          j["preconditioned_sharpness"] = r.preconditioned ? number_or_null(*r.preconditioned) : nlohmann::json(nullptr);
                          j["trace"] = r.trace ? number_or_null(r.trace->value) : nlohmann::json(nullptr);
                          j["trace_std_error"] = r.trace ? number_or_null(r.trace->std_error) : nlohmann::json(nullptr);
                          j["trace_samples"] = r.trace ? r.trace->samples : 0;
                          j["per_block"] = nlohmann::json::array();
                          for (double v : r.per_block) j["per_block"].push_back(number_or_null(v));
                          j["method"] = r.method;
                          j["batch"] = batch_json;
                          j["weights"] = w.source;
                          j["step"] = w.step;
                          j["loss"] = number_or_null(r.loss);
                          j["lr"] = lr;
                          j["edge_gd"] = number_or_null(edge_gd);
                          j["edge_adam"] = number_or_null(edge_adam);
                          j["iterations"] = r.iterations;
                          j["converged"] = r.converged;
                          j["preconditioned_converged"] =
                              r.preconditioned ? nlohmann::json(r.preconditioned_converged) : nlohmann::json();
                          j["gradients"] = r.gradients;
                          j["seconds"] = r.seconds;
                          j["threads"] = num_threads();
                          std::printf("%s\n", j.dump().c_str());
                          return 0;
                        }
                        std::printf("%s, %d blocks x width %d, step %d (%s), loss %.6f on the batch\n",
                                    experiments::placement_label(config.model.norm_placement).c_str(), config.model.layers,
                                    config.model.width, w.step, w.source.c_str(), r.loss);
                        std::printf("method: %s\n", r.method.c_str());
                        std::printf("sharpness lambda_max(H):            %.6g   (2/lr = %.6g, lr %.3g)%s\n", r.top[0], edge_gd, lr,
                                    r.converged ? "" : "  [Lanczos did not converge]");
                        for (size_t i = 1; i < r.top.size(); ++i) std::printf("  lambda_%zu:                         %.6g\n", i + 1, r.top[i]);
                        if (r.preconditioned)
                          std::printf("preconditioned lambda_max(P^-1 H):  %.6g   ((2+2b1)/((1-b1) lr) = %.6g)%s\n",
                                      *r.preconditioned, edge_adam, r.preconditioned_converged ? "" : "  [Lanczos did not converge]");
                        else
                          std::printf("preconditioned sharpness:           n/a (no optimizer state at these weights)\n");
                        if (r.trace)
                          std::printf("trace (Hutchinson, %d samples):     %.6g +- %.3g\n", r.trace->samples, r.trace->value,
                                      r.trace->std_error);
                        for (size_t l = 0; l < r.per_block.size(); ++l)
                          std::printf("  block %2zu lambda_max(H_ll): %.6g\n", l + 1, r.per_block[l]);
                        std::printf("%ld gradients in %s (%d thread(s))\n", r.gradients,
                                    Progress::format_duration(r.seconds).c_str(), num_threads());
                        return 0;
                      }});
}

}  // namespace blocklab::cli
