#pragma once
// A training run with everything its config asks to record beside it, as one library call. Every front end
// that trains (blocklab train, the Python train(), a sweep's worker, the curvature grid) calls train_job, so a
// run records and finishes the same way wherever it was started:
//   the run itself     train_run, or resume_run from a checkpoint (train/run.h)
//   its recorders      from the config's keys, none of which changes the run's numbers:
//     probe_every      OUT/residual.csv     residual-stream norms after each block (probe/residual_probe.h)
//     curvature_every  OUT/curvature.csv    sharpness, Adam's preconditioned sharpness, their thresholds, the
//                                           trace and (curvature_per_block) each block's (probe/curvature_run.h)
//     stream_every     OUT/stream.csv       per-block stream statistics (probe/stream_probe.h), and at the end
//                                           OUT/stream.{png,svg}: the stream RMS by block at init and at the end
//     update_probe_every  OUT/updates.csv   per block, Adam's step-size spread, the update-to-weight ratio and the
//                                           critical sharpness along the update (probe/update_probe.h)
// Under MPI only rank 0 records; the other ranks train alone.
#include <optional>
#include <vector>

#include "probe/curvature.h"
#include "report/plot.h"
#include "train/run.h"

namespace blocklab::jobs {

// How OUT/curvature.csv is measured; when it is (curvature_every) and whether per block (curvature_per_block)
// come from the config.
struct CurvatureRecording {
  probe::CurvatureOptions options;  // the estimators' settings (per_block is the config's)
  int batch = 0;                    // sequences of the curvature batch (0: the run's batch)
  std::vector<int> also_at;         // steps measured besides every N-th (e.g. densely over the first few)
};

struct TrainJob {
  RunConfig config;                        // resolved (resolve())
  const ResumePoint* resume = nullptr;     // continue the run from this checkpoint; null: a new run
  bool overwrite = false;                  // a new run may replace one already in config.out
  StepObserver observer;                   // after every step
  TrainerHook hook;                        // the front end's own, after the recorders (e.g. to copy the weights)
  ShardExchange* exchange = nullptr;       // data-parallel over MPI ranks (train/shard_reduce.h)
  CurvatureRecording curvature;
};

struct TrainJobResult {
  RunSummary summary;
  // With stream_every > 0 (rank 0): the figure OUT/stream.{png,svg}, or why it was not drawn.
  std::optional<report::PlotResult> stream_plot;
};

// Trains job.config as described above. Throws what train_run and resume_run throw (Error before anything is
// written for a bad config or directory; Interrupted after SIGINT/SIGTERM, with the checkpoint written).
TrainJobResult train_job(const TrainJob& job);

}  // namespace blocklab::jobs
