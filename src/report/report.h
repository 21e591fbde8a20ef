#pragma once
// A small document model for reports, rendered twice: as Markdown (figures linked as PNG files next to
// it) and as one self-contained HTML file (figures embedded as SVG data URIs, so the file can be mailed
// or opened anywhere on its own).
//
// Inline markup in text: `code` and **bold**; everything else is literal (escaped for HTML).
#include <string>
#include <vector>

#include "report/lang.h"

namespace blocklab::report {

class ReportDocument {
 public:
  void heading(int level, const std::string& text);  // level 1..4
  void paragraph(const std::string& text);
  void bullets(const std::vector<std::string>& items);
  void table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
  // base: figure path without extension, relative to the report's directory (BASE.png / BASE.svg).
  void figure(const std::string& base, const std::string& caption);
  void code(const std::string& text);

  std::string markdown() const;
  // report_dir: where the figure paths are relative to. A missing figure becomes a note in the page.
  // lang: the page's lang attribute (and with it the browser's choice of fonts).
  std::string html(const std::string& report_dir, const std::string& title, Lang lang = Lang::En) const;

 private:
  enum class Kind { Heading, Paragraph, Bullets, Table, Figure, Code };
  struct Block {
    Kind kind;
    int level = 0;
    std::string text;
    std::vector<std::string> items;
    std::vector<std::vector<std::string>> rows;
  };
  std::vector<Block> blocks_;
};

std::string base64_encode(const std::string& bytes);
std::string html_escape(const std::string& text);

}  // namespace blocklab::report
