#include "train/run.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "io/atomic_file.h"
#include "io/metrics.h"
#include "tensor/threading.h"
#include "util/error.h"

namespace blocklab {

namespace fs = std::filesystem;

void prepare_run_dir(const std::string& dir, bool overwrite) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw Error(dir + ": exists and is not a directory");
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create directory: " + ec.message());
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw Error(dir + ": directory is not writable");
  if (!overwrite)
    for (const char* name : {"config.json", "metrics.csv"})
      if (fs::exists(fs::path(dir) / name))
        throw Error(dir + ": already holds a run (" + name + "); choose another --out or pass --force");
}

RunSummary train_run(RunConfig config, bool overwrite, const StepObserver& observer) {
  resolve(config);
  set_num_threads(config.threads);
  Trainer trainer(config);  // allocates everything before any file is touched
  prepare_run_dir(config.out, overwrite);
  const fs::path dir(config.out);
  io::write_file_atomic((dir / "config.json").string(), to_json(config).dump(2) + "\n");
  io::MetricsWriter metrics((dir / "metrics.csv").string(), {"step", "loss", "lr", "grad_norm"});

  RunSummary summary;
  for (int s = 0; s < config.steps; ++s) {
    const StepResult r = trainer.step();
    metrics.row(r.step, {r.loss, r.lr, r.grad_norm});
    if (s == 0) summary.first_loss = r.loss, summary.min_loss = r.loss, summary.min_loss_step = r.step;
    if (r.loss < summary.min_loss) summary.min_loss = r.loss, summary.min_loss_step = r.step;
    summary.final_loss = r.loss;
    summary.seconds += r.seconds;
    summary.steps = r.step;
    if (observer) observer(r);
  }
  nlohmann::json j = {{"steps", summary.steps},         {"first_loss", summary.first_loss},
                      {"final_loss", summary.final_loss}, {"min_loss", summary.min_loss},
                      {"min_loss_step", summary.min_loss_step}, {"seconds", summary.seconds},
                      {"ms_per_step", summary.ms_per_step()}};
  io::write_file_atomic((dir / "summary.json").string(), j.dump(2) + "\n");
  return summary;
}

}  // namespace blocklab
