#include "jobs/train_job.h"

#include <filesystem>

#include "probe/curvature_run.h"
#include "probe/residual_probe.h"
#include "probe/stream_probe.h"
#include "probe/update_probe.h"
#include "report/labels.h"
#include "report/stream_plot.h"

namespace blocklab::jobs {

namespace fs = std::filesystem;

TrainJobResult train_job(const TrainJob& job) {
  const RunConfig& config = job.config;
  const bool records = job.exchange == nullptr || job.exchange->rank() == 0;  // rank 0 writes the directory
  std::optional<probe::ResidualProbeWriter> residual;
  std::optional<probe::CurvatureRecorder> curvature;
  std::optional<probe::UpdateProbeWriter> updates;
  if (records && config.probe_every > 0)
    residual.emplace((fs::path(config.out) / "residual.csv").string(), config.probe_every);
  if (records && config.curvature_every > 0) {
    probe::CurvatureOptions options = job.curvature.options;
    options.per_block = config.curvature_per_block;
    curvature.emplace((fs::path(config.out) / "curvature.csv").string(), config.curvature_every, options,
                      job.curvature.batch);
    curvature->also_at(job.curvature.also_at);
  }
  if (records && config.update_probe_every > 0) updates.emplace((fs::path(config.out) / "updates.csv").string());
  TrainerHook hook;
  if (residual || curvature || updates || job.hook)
    hook = [&](Trainer& trainer) {
      if (updates) (*updates)(trainer);  // first: it reads the step's batch and the weights before its update
      if (residual) (*residual)(trainer);
      if (curvature) (*curvature)(trainer);
      if (job.hook) job.hook(trainer);
    };
  hook = probe::with_stream_recorder(config, std::move(hook));  // stream_every: OUT/stream.csv (rank 0 alone)

  TrainJobResult result;
  result.summary = job.resume != nullptr ? resume_run(config, *job.resume, job.observer, hook, job.exchange)
                                         : train_run(config, job.overwrite, job.observer, hook, job.exchange);
  if (records && config.stream_every > 0)  // the stream by depth, init dashed and end solid
    result.stream_plot = report::plot_run_stream(config.out, report::design_label(config.model));
  return result;
}

}  // namespace blocklab::jobs
