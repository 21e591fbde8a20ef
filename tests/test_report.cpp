// The report document: Markdown and self-contained HTML with embedded figures.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_runner.h"
#include "report/report.h"
#include "util/error.h"

using namespace blocklab;
namespace bt = blocklab::testing;

TEST(Report, Base64MatchesKnownVectors) {
  EXPECT_EQ(report::base64_encode(""), "");
  EXPECT_EQ(report::base64_encode("f"), "Zg==");
  EXPECT_EQ(report::base64_encode("fo"), "Zm8=");
  EXPECT_EQ(report::base64_encode("foo"), "Zm9v");
  EXPECT_EQ(report::base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(report::base64_encode(std::string("\xff\x00\x10", 3)), "/wAQ");
}

TEST(Report, MarkdownAndHtmlCarryTheSameContent) {
  const auto dir = bt::fresh_dir("report");
  std::ofstream(dir / "fig.svg") << "<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>";
  report::ReportDocument doc;
  doc.heading(1, "Title");
  doc.paragraph("Use `blocklab sweep` with **care** & <angle>.");
  doc.table({"a", "b|c"}, {{"1", "2"}});
  doc.figure("fig", "a figure");
  doc.figure("missing", "not drawn");
  doc.bullets({"one", "two"});
  doc.code("x < y\n");
  EXPECT_THROW(doc.table({"a"}, {{"1", "2"}}), Error);

  const std::string md = doc.markdown();
  EXPECT_NE(md.find("# Title"), std::string::npos);
  EXPECT_NE(md.find("| a | b\\|c |"), std::string::npos) << md;
  EXPECT_NE(md.find("![a figure](fig.png)"), std::string::npos);
  EXPECT_NE(md.find("- two"), std::string::npos);

  const std::string html = doc.html(dir.string(), "T");
  EXPECT_NE(html.find("<code>blocklab sweep</code>"), std::string::npos) << html;
  EXPECT_NE(html.find("<strong>care</strong> &amp; &lt;angle&gt;"), std::string::npos);
  EXPECT_NE(html.find("data:image/svg+xml;base64," +
                      report::base64_encode("<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>")),
            std::string::npos);
  EXPECT_NE(html.find("missing.svg is missing"), std::string::npos);
  EXPECT_NE(html.find("<pre>x &lt; y"), std::string::npos);
  EXPECT_EQ(html.find("src=\"fig"), std::string::npos);  // nothing refers to an outside file
}
