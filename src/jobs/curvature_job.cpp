#include "jobs/curvature_job.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "io/npy.h"
#include "probe/curvature_run.h"
#include "util/error.h"
#include "util/memory.h"
#include "util/threads.h"

namespace blocklab::jobs {

namespace {

void check(const CurvatureJob& job) {
  const probe::CurvatureOptions& o = job.options;
  if (o.top < 1) throw Error("top must be >= 1, got " + std::to_string(o.top));
  if (o.max_iter < 1) throw Error("max_iter must be >= 1, got " + std::to_string(o.max_iter));
  if (o.block_max_iter < 1) throw Error("block_max_iter must be >= 1, got " + std::to_string(o.block_max_iter));
  if (o.trace_samples < 0) throw Error("trace_samples must be >= 0, got " + std::to_string(o.trace_samples));
  if (!(o.tol > 0)) throw Error("tol must be > 0");
  if (o.order != 2 && o.order != 4) throw Error("order must be 2 or 4, got " + std::to_string(o.order));
  if (job.batch < 0 || job.batch > 65536) throw Error("batch must be in 0..65536 (0: the run's), got " + std::to_string(job.batch));
  if (job.threads < 0) throw Error("threads must be >= 0 (0: all cores), got " + std::to_string(job.threads));
  if (job.batch_seed && !job.tokens.empty()) throw Error("give a batch seed or a token file, not both");
}

// The double-precision model and gradients (6 arenas), its activations and Lanczos's basis.
void require_curvature_memory(const RunConfig& config, const Batch& batch, long parameters,
                              const probe::CurvatureOptions& o) {
  const auto acts = Activations<double>::sizes(config.model, batch.batch, batch.seq_len);
  const double n = static_cast<double>(parameters);
  const double activations = static_cast<double>(acts.activation_bytes + acts.scratch_bytes);
  const double basis = 8.0 * n * std::min<double>(std::max(o.max_iter, o.block_max_iter), n);
  require_memory("curvature", 8.0 * 6 * n + activations + basis,
                 "model and gradients " + format_bytes(48 * n) + " + activations " + format_bytes(activations) +
                     " + Lanczos vectors " + format_bytes(basis),
                 "; try a smaller batch or max_iter");
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

CurvatureReport curvature_job(const CurvatureJob& job) {
  check(job);
  set_num_threads(job.threads);
  probe::RunWeights w = probe::load_run_weights(job.run_dir, job.checkpoint);
  const RunConfig& config = w.config;
  CurvatureReport report;
  Batch batch;
  if (!job.tokens.empty()) {
    batch = probe::batch_from_tokens(config, io::read_token_file(job.tokens), job.tokens);
    report.batch = {{"source", "file"}, {"path", job.tokens}};
  } else {
    const uint64_t seed = job.batch_seed ? *job.batch_seed : probe::curvature_batch_seed(config.seed);
    batch = probe::curvature_batch(config, seed, job.batch > 0 ? job.batch : config.batch);
    report.batch = {{"source", "task"}, {"task", config.task}, {"seed", seed}};
  }
  report.batch["sequences"] = batch.batch;
  report.batch["tokens"] = batch.seq_len + 1;
  require_curvature_memory(config, batch, static_cast<long>(w.params.size()), job.options);

  const bool have_adam = !w.adam_v.empty() && w.adam_steps >= 1;
  const probe::AdamMoments adam{w.adam_v, w.adam_steps, config.optimizer.beta1, config.optimizer.beta2, config.optimizer.eps};
  const auto t0 = std::chrono::steady_clock::now();
  probe::CurvatureLoss loss(config.model, std::span<const float>(w.params), batch);  // one gradient
  if (job.on_start)
    job.on_start({w.source, w.step, batch.batch, batch.seq_len + 1, num_threads(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  probe::curvature_gradient_budget(config.model, job.options, have_adam)});
  report.result = probe::measure_curvature(loss, have_adam ? &adam : nullptr, job.options);
  report.weights = w.source;
  report.step = w.step;
  report.lr = probe::next_learning_rate(config, w.step);
  report.edge_gd = 2 / report.lr;
  report.edge_adam = probe::adam_edge(config.optimizer.beta1, report.lr);
  report.threads = num_threads();
  report.model = config.model;
  return report;
}

nlohmann::json to_json(const CurvatureReport& report) {
  const probe::CurvatureResult& r = report.result;
  auto numbers = [](const std::vector<double>& values) {
    nlohmann::json a = nlohmann::json::array();
    for (double v : values) a.push_back(number_or_null(v));
    return a;
  };
  nlohmann::json j;
  j["sharpness"] = number_or_null(r.top[0]);
  j["top"] = numbers(r.top);
  j["preconditioned_sharpness"] = r.preconditioned ? number_or_null(*r.preconditioned) : nlohmann::json(nullptr);
  j["trace"] = r.trace ? number_or_null(r.trace->value) : nlohmann::json(nullptr);
  j["trace_std_error"] = r.trace ? number_or_null(r.trace->std_error) : nlohmann::json(nullptr);
  j["trace_samples"] = r.trace ? r.trace->samples : 0;
  j["per_block"] = numbers(r.per_block);
  j["method"] = r.method;
  j["batch"] = report.batch;
  j["weights"] = report.weights;
  j["step"] = report.step;
  j["loss"] = number_or_null(r.loss);
  j["lr"] = report.lr;
  j["edge_gd"] = number_or_null(report.edge_gd);
  j["edge_adam"] = number_or_null(report.edge_adam);
  j["iterations"] = r.iterations;
  j["converged"] = r.converged;
  j["preconditioned_converged"] = r.preconditioned ? nlohmann::json(r.preconditioned_converged) : nlohmann::json();
  j["gradients"] = r.gradients;
  j["seconds"] = r.seconds;
  j["threads"] = report.threads;
  return j;
}

}  // namespace blocklab::jobs
