#pragma once
// The residual-stream probe's figure (report/plot.h): both norms per layer on a log scale, each with its
// random-walk reference (layer-0 value x sqrt(l + 1)) dashed.
#include <filesystem>
#include <string>
#include <vector>

#include "probe/residual_layers.h"

namespace blocklab::report {

struct PlotOutcome {
  bool rendered = false;
  std::string message;  // why not, when not rendered
};
// Writes DIR/residual.gp (self-contained), and with gnuplot DIR/residual.png and DIR/residual.svg. A missing
// gnuplot is reported in the outcome, not thrown.
PlotOutcome plot_residual(const std::filesystem::path& dir, const std::vector<probe::ResidualLayerStats>& layers,
                          const std::string& title);

}  // namespace blocklab::report
