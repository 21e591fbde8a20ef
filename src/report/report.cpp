#include "report/report.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/read_file.h"
#include "util/error.h"

namespace blocklab::report {

namespace fs = std::filesystem;

namespace {

// `code` and **bold** to HTML; the rest escaped.
std::string inline_html(const std::string& text) {
  std::string out;
  bool code = false, bold = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '`') {
      out += code ? "</code>" : "<code>";
      code = !code;
    } else if (!code && text.compare(i, 2, "**") == 0) {
      out += bold ? "</strong>" : "<strong>";
      bold = !bold;
      ++i;
    } else {
      out += html_escape(std::string(1, text[i]));
    }
  }
  if (code) out += "</code>";
  if (bold) out += "</strong>";
  return out;
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string base64_encode(const std::string& bytes) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += table[(v >> 6) & 63];
    out += table[v & 63];
  }
  if (i + 1 == bytes.size()) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8);
    out += table[(v >> 18) & 63];
    out += table[(v >> 12) & 63];
    out += table[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

void ReportDocument::heading(int level, const std::string& text) {
  blocks_.push_back({Kind::Heading, std::clamp(level, 1, 4), text, {}, {}});
}
void ReportDocument::paragraph(const std::string& text) { blocks_.push_back({Kind::Paragraph, 0, text, {}, {}}); }
void ReportDocument::bullets(const std::vector<std::string>& items) {
  blocks_.push_back({Kind::Bullets, 0, "", items, {}});
}
void ReportDocument::table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  for (const auto& r : rows)
    if (r.size() != header.size()) throw Error("report table: a row has " + std::to_string(r.size()) + " cells, the header " +
                                               std::to_string(header.size()));
  std::vector<std::vector<std::string>> all = {header};
  all.insert(all.end(), rows.begin(), rows.end());
  blocks_.push_back({Kind::Table, 0, "", {}, all});
}
void ReportDocument::figure(const std::string& base, const std::string& caption) {
  blocks_.push_back({Kind::Figure, 0, caption, {base}, {}});
}
void ReportDocument::code(const std::string& text) { blocks_.push_back({Kind::Code, 0, text, {}, {}}); }

std::string ReportDocument::markdown() const {
  std::ostringstream md;
  for (const Block& b : blocks_) {
    switch (b.kind) {
      case Kind::Heading: md << std::string(b.level, '#') << " " << b.text << "\n\n"; break;
      case Kind::Paragraph: md << b.text << "\n\n"; break;
      case Kind::Bullets:
        for (const auto& item : b.items) md << "- " << item << "\n";
        md << "\n";
        break;
      case Kind::Table:
        for (size_t r = 0; r < b.rows.size(); ++r) {
          md << "|";
          for (const auto& cell : b.rows[r]) md << " " << md_cell(cell) << " |";
          md << "\n";
          if (r == 0) {
            md << "|";
            for (size_t c = 0; c < b.rows[0].size(); ++c) md << "---|";
            md << "\n";
          }
        }
        md << "\n";
        break;
      case Kind::Figure: md << "![" << b.text << "](" << b.items[0] << ".png)\n\n*" << b.text << "*\n\n"; break;
      case Kind::Code: md << "```\n" << b.text << (b.text.empty() || b.text.back() != '\n' ? "\n" : "") << "```\n\n"; break;
    }
  }
  return md.str();
}

std::string ReportDocument::html(const std::string& report_dir, const std::string& title, Lang lang) const {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"" << to_string(lang) << "\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << html_escape(title)
    << "</title>\n<style>\n"
       "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,'Noto Sans CJK KR','Apple SD Gothic Neo','Malgun Gothic',sans-serif;max-width:1200px;margin:2em auto;"
       "padding:0 1em;line-height:1.5;color:#222}\n"
       "h1,h2,h3{line-height:1.2}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}\n"
       "table{border-collapse:collapse;margin:1em 0;font-size:.92em}\n"
       "th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}\n"
       "th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}\n"
       "code{background:#f2f2f2;padding:0 .25em;border-radius:3px;font-size:.92em}\n"
       "pre{background:#f6f6f6;padding:.8em;overflow-x:auto;border-radius:4px}\n"
       "figure{margin:1.5em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}\n"
       "figcaption{color:#555;font-size:.92em;margin-top:.3em}\n"
       ".missing{color:#a00;border:1px dashed #a00;padding:.5em}\n"
       "</style>\n</head>\n<body>\n";
  for (const Block& b : blocks_) {
    switch (b.kind) {
      case Kind::Heading: h << "<h" << b.level << ">" << inline_html(b.text) << "</h" << b.level << ">\n"; break;
      case Kind::Paragraph: h << "<p>" << inline_html(b.text) << "</p>\n"; break;
      case Kind::Bullets:
        h << "<ul>\n";
        for (const auto& item : b.items) h << "<li>" << inline_html(item) << "</li>\n";
        h << "</ul>\n";
        break;
      case Kind::Table:
        h << "<table>\n";
        for (size_t r = 0; r < b.rows.size(); ++r) {
          h << "<tr>";
          for (const auto& cell : b.rows[r]) h << (r == 0 ? "<th>" : "<td>") << inline_html(cell) << (r == 0 ? "</th>" : "</td>");
          h << "</tr>\n";
        }
        h << "</table>\n";
        break;
      case Kind::Figure: {
        const fs::path svg = fs::path(report_dir) / (b.items[0] + ".svg");
        h << "<figure>\n";
        if (fs::exists(svg))
          h << "<img alt=\"" << html_escape(b.text) << "\" src=\"data:image/svg+xml;base64," << base64_encode(io::read_file(svg))
            << "\">\n";
        else
          h << "<div class=\"missing\">figure not drawn (" << html_escape(b.items[0]) << ".svg is missing: is gnuplot installed?)</div>\n";
        h << "<figcaption>" << inline_html(b.text) << "</figcaption>\n</figure>\n";
        break;
      }
      case Kind::Code: h << "<pre>" << html_escape(b.text) << "</pre>\n"; break;
    }
  }
  h << "</body>\n</html>\n";
  return h.str();
}

}  // namespace blocklab::report
