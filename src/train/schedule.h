#pragma once
// Learning-rate schedules. Steps count from 1 (the first update).
//   warm-up: lr * step / warmup for step <= warmup (linear from 0), then
//   constant: lr                         cosine: min_lr + (lr - min_lr) (1 + cos(pi * progress)) / 2
//   where progress = (step - warmup) / (total - warmup) in [0, 1].
#include <string>

namespace blocklab {

enum class ScheduleKind { Constant, Cosine };
std::string to_string(ScheduleKind);
ScheduleKind parse_schedule_kind(const std::string&);

struct Schedule {
  ScheduleKind kind = ScheduleKind::Constant;
  double lr = 1e-3;
  int warmup = 0;
  int total_steps = 1;
  double min_lr = 0.0;

  double at(int step) const;
};

}  // namespace blocklab
