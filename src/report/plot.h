#pragma once
// Figures drawn by gnuplot (Debian package gnuplot-nox). A figure is described in memory (panels of
// line series with their data), written as one self-contained gnuplot script BASE.gp (data inline as
// datablocks), and rendered to BASE.png (pngcairo) and BASE.svg. Without gnuplot the script is still
// written, so the figure can be drawn later with `gnuplot BASE.gp` in its directory.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace blocklab::report {

struct PlotSeries {
  std::vector<double> x, y;  // non-finite y values are drawn as gaps
  std::string title;         // legend entry; "" keeps the series out of the legend
  std::string color = "#1f77b4";
  double line_width = 1.5;
  int dash = 1;              // gnuplot dashtype: 1 solid, 2 dashed, 3 short dashes, ...
  bool points = false;       // mark the data points too
  bool no_line = false;      // points only (with points = true)
};

struct PlotHLine {  // a horizontal reference line across the whole panel
  double y = 0;
  std::string title;  // legend entry ("" = none)
  std::string color = "#555555";
  int dash = 2;
  double line_width = 1.5;
};

struct PlotKeyEntry {  // a legend entry with no data: a filled square of one colour
  std::string title;
  std::string color;
};

struct PlotPanel {
  std::string title, xlabel, ylabel;
  bool log_x = false, log_y = false;
  std::optional<std::pair<double, double>> x_range, y_range;
  std::vector<PlotSeries> series;
  std::vector<PlotHLine> hlines;
  std::vector<PlotKeyEntry> key_entries;  // legend-only entries (gnuplot keyentry), after the series
  std::string legend = "top right";  // gnuplot `set key` position, or "off"
  bool axes = true;                  // false: no border, tics or grid (for diagrams)
  std::string raw;                   // extra gnuplot commands issued before this panel's plot
};

struct PlotFigure {
  std::string title;
  int rows = 1, cols = 1;             // panel layout, filled row by row
  int width = 900, height = 600;      // pixels
  std::vector<PlotPanel> panels;
};

struct PlotResult {
  bool drawn = false;      // BASE.png and BASE.svg were written
  std::string script;      // BASE.gp
  std::string message;     // why nothing was drawn
};

// The gnuplot program: $BLOCKLAB_GNUPLOT when set, else `gnuplot` from PATH; "" when missing.
std::string gnuplot_program();

// The gnuplot script for fig, writing NAME.png and NAME.svg in the current directory.
std::string gnuplot_script(const PlotFigure& fig, const std::string& name);

// Writes BASE.gp and runs gnuplot on it (BASE is a path without extension). Throws Error when the
// script cannot be written; a missing or failing gnuplot is reported in the result instead.
PlotResult render_figure(const PlotFigure& fig, const std::string& base_path);

// Colours that stay distinct for colour-blind readers (Okabe-Ito), by index.
const std::string& palette(size_t index);

}  // namespace blocklab::report
