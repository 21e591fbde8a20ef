// Figures: the generated gnuplot script, rendering to PNG + SVG, and a clear message without gnuplot.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <fstream>

#include "cli_runner.h"
#include "report/plot.h"
#include "util/error.h"

using namespace blocklab;
namespace bt = blocklab::testing;
namespace fs = std::filesystem;

namespace {
report::PlotFigure two_panels() {
  report::PlotFigure fig;
  fig.title = "Loss \"curves\"";
  fig.rows = 1;
  fig.cols = 2;
  for (int p = 0; p < 2; ++p) {
    report::PlotPanel panel;
    panel.title = "panel " + std::to_string(p);
    panel.xlabel = "step";
    panel.ylabel = "loss";
    panel.log_y = p == 1;
    panel.series.push_back({{1, 2, 3}, {4.2, std::nan(""), 0.5}, "seed 0", "#0072B2", 1.2, 1, false});
    panel.hlines.push_back({std::log(64.0), "ln V", "#555555", 2, 1.5});
    fig.panels.push_back(panel);
  }
  return fig;
}

struct EnvGuard {  // sets an environment variable for one test
  std::string name;
  EnvGuard(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
  ~EnvGuard() { ::unsetenv(name.c_str()); }
};
}  // namespace

TEST(Plot, ScriptHoldsTheDataAndBothOutputs) {
  const std::string g = report::gnuplot_script(two_panels(), "fig");
  EXPECT_NE(g.find("$d0_0 << EOD\n1 4.2\n2 NaN\n3 0.5\nEOD"), std::string::npos) << g;
  EXPECT_NE(g.find("set terminal pngcairo"), std::string::npos);
  EXPECT_NE(g.find("set output \"fig.png\""), std::string::npos);
  EXPECT_NE(g.find("set terminal svg"), std::string::npos);
  EXPECT_NE(g.find("set output \"fig.svg\""), std::string::npos);
  EXPECT_NE(g.find("set multiplot layout 1,2 title \"Loss \\\"curves\\\"\""), std::string::npos) << g;
  EXPECT_NE(g.find("set logscale y"), std::string::npos);
  EXPECT_NE(g.find("title \"ln V\""), std::string::npos);
  EXPECT_NE(g.find("dt 2"), std::string::npos);  // the dashed reference line
  report::PlotFigure bad = two_panels();
  bad.cols = 1;  // 2 panels in a 1x1 layout
  EXPECT_THROW(report::gnuplot_script(bad, "fig"), Error);
  bad = two_panels();
  bad.panels[0].series[0].y.pop_back();
  EXPECT_THROW(report::gnuplot_script(bad, "fig"), Error);
}

TEST(Plot, WithoutGnuplotWritesTheScriptAndSaysWhy) {
  EnvGuard env("BLOCKLAB_GNUPLOT", "/nonexistent/gnuplot");
  const fs::path dir = bt::fresh_dir("plot_missing");
  const report::PlotResult r = report::render_figure(two_panels(), (dir / "fig").string());
  EXPECT_FALSE(r.drawn);
  EXPECT_NE(r.message.find("gnuplot not found"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("gnuplot-nox"), std::string::npos) << r.message;
  EXPECT_TRUE(fs::exists(dir / "fig.gp"));
  EXPECT_FALSE(fs::exists(dir / "fig.png"));
}

TEST(Plot, GnuplotDrawsPngAndSvg) {
  if (report::gnuplot_program().empty()) GTEST_SKIP() << "gnuplot is not installed";
  const fs::path dir = bt::fresh_dir("plot_draw");
  const report::PlotResult r = report::render_figure(two_panels(), (dir / "fig").string());
  ASSERT_TRUE(r.drawn) << r.message;
  const std::string png = bt::read_text(dir / "fig.png");
  ASSERT_GT(png.size(), 1000u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  const std::string svg = bt::read_text(dir / "fig.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("seed 0"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "fig.gnuplot.log"));
}

TEST(Plot, DrawsIntoARelativeDirectory) {
  if (report::gnuplot_program().empty()) GTEST_SKIP() << "gnuplot is not installed";
  const fs::path dir = bt::fresh_dir("plot_relative");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  fs::create_directories("sub/dir");
  const report::PlotResult r = report::render_figure(two_panels(), "sub/dir/fig");
  fs::current_path(cwd);
  EXPECT_TRUE(r.drawn) << r.message;
  EXPECT_TRUE(fs::exists(dir / "sub" / "dir" / "fig.png"));
}

TEST(Plot, ABrokenScriptIsReportedNotThrown) {
  if (report::gnuplot_program().empty()) GTEST_SKIP() << "gnuplot is not installed";
  const fs::path dir = bt::fresh_dir("plot_broken");
  report::PlotFigure fig = two_panels();
  fig.panels[0].raw = "set nonsense_option 3";
  const report::PlotResult r = report::render_figure(fig, (dir / "fig").string());
  EXPECT_FALSE(r.drawn);
  EXPECT_NE(r.message.find("gnuplot failed"), std::string::npos) << r.message;
}
