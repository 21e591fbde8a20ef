#pragma once
// gnuplot pieces for panels drawn as a grid of labelled, filled cells (the depth map and the stability map):
// quoting, the tic-only axes, one cell's rectangle and label, and a panel that holds only a colour key.
#include <string>
#include <vector>

#include "report/plot.h"

namespace blocklab::report {

// `s` as a gnuplot double-quoted string: '"' and '\' escaped, everything else (a "\n" written as two
// characters, too) left as it is.
std::string gp_text(const std::string& s);

struct GridTic {
  std::string label;
  double at = 0;
};

// No grid, border or tic marks; the tics `x` across and `y` up, each at its position.
std::string grid_axes(const std::vector<GridTic>& x, const std::vector<GridTic>& y);

// Object `id`: a rectangle from (x0, y0) to (x1, y1) filled with `color`, a thin white border, behind the plot.
std::string grid_cell(int id, double x0, double y0, double x1, double y1, const std::string& color);

// Label `id`: `quoted_text` (already a gnuplot string) centred at (x, y) in front, font size `font_size`.
std::string grid_label(int id, const std::string& quoted_text, double x, double y, int font_size,
                       const std::string& color);

// A panel without axes that holds only legend entries (key_entries, added by the caller), on the left.
PlotPanel grid_key_panel();

}  // namespace blocklab::report
