#pragma once
// Refusing a training run that cannot fit in memory, before anything is allocated (model/memory.h for the
// estimate, util/memory.h for what is available).
#include <string>

#include "model/memory.h"
#include "train/run_config.h"

namespace blocklab {

// Room for the program itself, its libraries and thread stacks, on top of the training state.
inline constexpr double kProgramBytes = 64.0 * 1024 * 1024;

// The estimate for one run of a resolved config.
TrainingMemory training_memory(const RunConfig& config, double stop_above = std::numeric_limits<double>::infinity());

// Throws Error (one line: bytes needed, their parts, bytes available and where that number comes from)
// when `runs_at_once` runs of this resolved config do not fit in the memory available. `what` opens the
// message ("train", "sweep: 4 runs at once").
void require_training_memory(const RunConfig& config, const std::string& what, int runs_at_once = 1);

}  // namespace blocklab
