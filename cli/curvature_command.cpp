// blocklab curvature: sharpness, Adam's preconditioned sharpness, trace and per-block sharpness of a run's
// training loss on one batch, at a checkpoint or the final weights (probe/curvature.h).
#include <cstdio>
#include <memory>
#include <optional>

#include "commands.h"
#include "jobs/curvature_job.h"
#include "progress.h"
#include "report/labels.h"

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

void print_report(const jobs::CurvatureReport& report) {
  const probe::CurvatureResult& r = report.result;
  std::printf("%s, %d blocks x width %d, step %d (%s), loss %.6f on the batch\n",
              report::placement_label(report.model.norm_placement).c_str(), report.model.layers, report.model.width,
              report.step, report.weights.c_str(), r.loss);
  std::printf("method: %s\n", r.method.c_str());
  std::printf("sharpness lambda_max(H):            %.6g   (2/lr = %.6g, lr %.3g)%s\n", r.top[0], report.edge_gd,
              report.lr, r.converged ? "" : "  [Lanczos did not converge]");
  for (size_t i = 1; i < r.top.size(); ++i) std::printf("  lambda_%zu:                         %.6g\n", i + 1, r.top[i]);
  if (r.preconditioned)
    std::printf("preconditioned lambda_max(P^-1 H):  %.6g   ((2+2b1)/((1-b1) lr) = %.6g)%s\n", *r.preconditioned,
                report.edge_adam, r.preconditioned_converged ? "" : "  [Lanczos did not converge]");
  else
    std::printf("preconditioned sharpness:           n/a (no optimizer state at these weights)\n");
  if (r.trace)
    std::printf("trace (Hutchinson, %d samples):     %.6g +- %.3g\n", r.trace->samples, r.trace->value,
                r.trace->std_error);
  for (size_t l = 0; l < r.per_block.size(); ++l) std::printf("  block %2zu lambda_max(H_ll): %.6g\n", l + 1, r.per_block[l]);
  std::printf("%ld gradients in %s (%d thread(s))\n", r.gradients, Progress::format_duration(r.seconds).c_str(),
              report.threads);
}

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
                        jobs::CurvatureJob job;
                        job.run_dir = f->run_dir;
                        job.checkpoint = app->count("--checkpoint") ? f->checkpoint : -1;
                        if (app->count("--batch-seed")) job.batch_seed = f->batch_seed;
                        job.tokens = f->tokens;
                        job.batch = f->batch;
                        job.threads = f->threads;
                        probe::CurvatureOptions& o = job.options;
                        o.top = f->top;
                        o.max_iter = f->max_iter;
                        o.tol = f->tol;
                        o.trace_samples = f->trace_samples;
                        o.per_block = !f->no_per_block;
                        o.block_max_iter = f->block_max_iter;
                        o.order = f->order;
                        o.seed = f->seed;
                        std::optional<Progress> progress;
                        job.on_start = [&](const jobs::CurvatureStart& s) {
                          std::fprintf(stderr, "blocklab: %s (step %d), batch of %d x %d tokens, %d thread(s)\n",
                                       s.weights.c_str(), s.step, s.sequences, s.tokens, s.threads);
                          std::fprintf(stderr,
                                       "blocklab: one gradient in double precision takes %s; at most %ld gradients: "
                                       "expect at most %s (Lanczos usually stops sooner)\n",
                                       Progress::format_duration(s.gradient_seconds).c_str(), s.gradients_at_most,
                                       Progress::format_duration(s.gradient_seconds * s.gradients_at_most).c_str());
                          progress.emplace("gradients", s.gradients_at_most);
                        };
                        o.progress = [&](const std::string& stage, long done, long) {
                          if (progress) progress->update(done, stage);
                        };
                        const jobs::CurvatureReport report = jobs::curvature_job(job);
                        if (progress) progress->finish();
                        if (f->json) {
                          std::printf("%s\n", jobs::to_json(report).dump().c_str());
                          return 0;
                        }
                        print_report(report);
                        return 0;
                      }});
}

}  // namespace blocklab::cli
