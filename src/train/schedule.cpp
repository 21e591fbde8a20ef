#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace blocklab {

std::string to_string(ScheduleKind k) { return k == ScheduleKind::Constant ? "constant" : "cosine"; }

ScheduleKind parse_schedule_kind(const std::string& s) {
  if (s == "constant") return ScheduleKind::Constant;
  if (s == "cosine") return ScheduleKind::Cosine;
  throw Error("unknown schedule '" + s + "' (expected constant or cosine)");
}

double Schedule::at(int step) const {
  if (warmup > 0 && step <= warmup) return lr * static_cast<double>(step) / warmup;
  if (kind == ScheduleKind::Constant) return lr;
  const int decay_steps = std::max(1, total_steps - warmup);
  const double progress = std::clamp(static_cast<double>(step - warmup) / decay_steps, 0.0, 1.0);
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace blocklab
