#include "train/memory.h"

#include "util/memory.h"

namespace blocklab {

TrainingMemory training_memory(const RunConfig& config, double stop_above) {
  TrainingMemory m = estimate_training_memory(config.model, config.batch, config.model.seq_len, stop_above);
  m.adam_moments = m.parameters * optimizer_state_arrays(config.optimizer);  // counted as Adam's 2 arrays there
  return m;
}

void require_training_memory(const RunConfig& config, const std::string& what, int runs_at_once) {
  const auto available = available_memory();
  if (!available) return;
  const double runs = runs_at_once < 1 ? 1 : runs_at_once;
  // Stop at the lower bound when it alone is more than what is there.
  const TrainingMemory m = training_memory(config, available->bytes / runs);
  const double per_run = m.total() + kProgramBytes;
  std::string parts = "parameters + gradients + Adam moments " +
                      format_bytes(m.parameters + m.gradients + m.adam_moments) + ", " +
                      (m.rounded_parameters > 0 ? "parameters in bf16 " + format_bytes(m.rounded_parameters) + ", " : "") +
                      "activations " + format_bytes(m.activations) + ", backward buffers " +
                      format_bytes(m.backward_buffers);
  if (runs > 1) parts = format_bytes(per_run) + " per run x " + std::to_string(runs_at_once) + " runs; " + parts;
  require_memory(what, per_run * runs, parts,
                 "; lower --batch, --width, --layers, --copy-len or --vocab" +
                     std::string(runs > 1 ? ", or --jobs" : ""),
                 m.lower_bound);
}

}  // namespace blocklab
