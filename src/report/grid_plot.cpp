#include "report/grid_plot.h"

#include <sstream>

namespace blocklab::report {

std::string gp_text(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

std::string grid_axes(const std::vector<GridTic>& x, const std::vector<GridTic>& y) {
  std::ostringstream g;
  g << "unset grid\nset border 0\nset tics scale 0\nset xtics (";
  for (size_t i = 0; i < x.size(); ++i) g << (i ? ", " : "") << gp_text(x[i].label) << " " << x[i].at;
  g << ")\nset ytics (";
  for (size_t i = 0; i < y.size(); ++i) g << (i ? ", " : "") << gp_text(y[i].label) << " " << y[i].at;
  g << ")\n";
  return g.str();
}

std::string grid_cell(int id, double x0, double y0, double x1, double y1, const std::string& color) {
  std::ostringstream g;
  g << "set object " << id << " rect from " << x0 << "," << y0 << " to " << x1 << "," << y1 << " fc rgb "
    << gp_text(color) << " fs solid 1.0 border lc rgb \"#ffffff\" lw 1 back\n";
  return g.str();
}

std::string grid_label(int id, const std::string& quoted_text, double x, double y, int font_size,
                       const std::string& color) {
  std::ostringstream g;
  g << "set label " << id << " " << quoted_text << " at " << x << "," << y << " center front font \"," << font_size
    << "\" textcolor rgb " << gp_text(color) << "\n";
  return g.str();
}

PlotPanel grid_key_panel() {
  PlotPanel key;
  key.axes = false;
  key.x_range = std::make_pair(0.0, 1.0);
  key.y_range = std::make_pair(0.0, 1.0);
  key.legend = "inside left center vertical noopaque";
  key.raw = "unset key\nset key inside left center vertical Left reverse samplen 1.5 spacing 1.3 nobox\n";
  return key;
}

}  // namespace blocklab::report
