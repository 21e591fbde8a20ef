#include "report/residual_plot.h"

#include <algorithm>
#include <cmath>

#include "report/plot.h"
#include "util/error.h"

namespace blocklab::report {

PlotOutcome plot_residual(const std::filesystem::path& dir, const std::vector<probe::ResidualLayerStats>& layers,
                          const std::string& title) {
  if (layers.empty()) throw Error("residual plot: no layers");
  report::PlotPanel panel;
  panel.title = title;
  panel.xlabel = "layer l (0 = embeddings, l = output of block l)";
  panel.ylabel = "norm (log scale)";
  panel.log_y = true;
  panel.legend = "below";  // the curves fill the panel: the legend goes under it
  const int last = layers.back().layer;
  panel.x_range = std::pair<double, double>(0, std::max(1, last));
  panel.raw = "set bmargin 7\n";  // room for the x label above the legend
  if (last <= 12) panel.raw += "set xtics 1";
  else if (last <= 48) panel.raw += "set xtics 4\nset mxtics 4";
  const double v0 = layers.front().mean_vector_norm, n0 = layers.front().mean_token_norm;
  report::PlotSeries mean_vector, mean_token, walk_vector, walk_token;
  for (const probe::ResidualLayerStats& s : layers) {
    const double l = s.layer, walk = std::sqrt(l + 1.0);
    mean_vector.x.push_back(l);
    mean_vector.y.push_back(s.mean_vector_norm);
    mean_token.x.push_back(l);
    mean_token.y.push_back(s.mean_token_norm);
    walk_vector.x.push_back(l);
    walk_vector.y.push_back(v0 * walk);
    walk_token.x.push_back(l);
    walk_token.y.push_back(n0 * walk);
  }
  mean_vector.title = "|mean of the token vectors|";
  mean_token.title = "mean of the token norms";
  walk_vector.title = "random walk: layer-0 value x sqrt(l+1)";
  mean_vector.color = walk_vector.color = report::palette(0);
  mean_token.color = walk_token.color = report::palette(1);
  mean_vector.points = mean_token.points = true;
  mean_vector.line_width = mean_token.line_width = 2;
  walk_vector.dash = walk_token.dash = 2;
  panel.series = {mean_vector, mean_token, walk_vector, walk_token};
  report::PlotFigure figure;
  figure.width = 960;
  figure.height = 640;
  figure.panels.push_back(std::move(panel));
  const report::PlotResult r = report::render_figure(figure, (dir / "residual").string());
  return {r.drawn, r.message};
}

}  // namespace blocklab::report
