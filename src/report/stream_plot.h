#pragma once
// The stream-statistics figure (report/plot.h): the residual stream's RMS by depth (block index on x, 0 = the
// embeddings; log y), one colour per design, dashed at the first recorded step (init) and solid at the last.
// The depth map draws one panel of it per warm-up; `blocklab train --stream-every N` draws it for one run.
#include <filesystem>
#include <string>
#include <vector>

#include "report/plot.h"
#include "probe/stream_probe.h"

namespace blocklab::report {

struct StreamCurve {
  std::string label;            // the design: placement and options
  probe::StreamSummary summary;
};

// One panel: two series per curve (init dashed, end solid), in the curves' order.
report::PlotPanel stream_panel(const std::vector<StreamCurve>& curves, const std::string& title);

// DIR/stream.{gp,png,svg} for one run from DIR/stream.csv, labelled `label`. Throws Error when stream.csv
// cannot be read; a missing gnuplot is reported in the result.
report::PlotResult plot_run_stream(const std::filesystem::path& dir, const std::string& label);

}  // namespace blocklab::report
