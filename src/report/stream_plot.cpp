#include "report/stream_plot.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace blocklab::report {

report::PlotPanel stream_panel(const std::vector<StreamCurve>& curves, const std::string& title) {
  report::PlotPanel panel;
  panel.title = title;
  panel.xlabel = "block l (0 = embeddings, l = output of block l)";
  panel.ylabel = "stream RMS, mean_t ||h_t|| / sqrt(C) (log scale)";
  panel.log_y = true;
  panel.legend = "outside right top";
  size_t last = 1;
  for (size_t i = 0; i < curves.size(); ++i) {
    const probe::StreamSummary& s = curves[i].summary;
    last = std::max({last, s.rms_first.size() - (s.rms_first.empty() ? 0 : 1), s.rms_last.size() - (s.rms_last.empty() ? 0 : 1)});
    report::PlotSeries init, end;
    for (size_t l = 0; l < s.rms_first.size(); ++l) {
      init.x.push_back(static_cast<double>(l));
      init.y.push_back(s.rms_first[l] > 0 ? s.rms_first[l] : std::nan(""));  // log scale: no zeros
    }
    for (size_t l = 0; l < s.rms_last.size(); ++l) {
      end.x.push_back(static_cast<double>(l));
      end.y.push_back(s.rms_last[l] > 0 ? s.rms_last[l] : std::nan(""));
    }
    end.title = curves[i].label + " (step " + std::to_string(s.last_step) + ")";
    init.color = end.color = report::palette(i);
    init.dash = 2;
    end.line_width = 2;
    end.points = true;
    panel.series.push_back(std::move(init));
    panel.series.push_back(std::move(end));
  }
  panel.title += "\ndashed: first recorded step (init), solid: last";
  panel.x_range = std::pair<double, double>(0, static_cast<double>(last));
  if (last <= 12) panel.raw = "set xtics 1";
  else if (last <= 48) panel.raw = "set xtics 4\nset mxtics 4";
  return panel;
}

report::PlotResult plot_run_stream(const std::filesystem::path& dir, const std::string& label) {
  const std::vector<probe::StreamRow> rows = probe::read_stream_csv((dir / "stream.csv").string());
  if (rows.empty()) throw Error((dir / "stream.csv").string() + ": no rows");
  report::PlotFigure figure;
  figure.width = 1000;
  figure.height = 600;
  figure.panels.push_back(stream_panel({{label, probe::summarize_stream(rows)}},
                                       "Residual stream RMS by depth: " + dir.filename().string()));
  return report::render_figure(figure, (dir / "stream").string());
}

}  // namespace blocklab::report
